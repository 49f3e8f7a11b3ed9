"""No hang ever: every stuck world ends at its timeout, run() returns, the next world works."""

from __future__ import annotations

import threading
import time

import pytest
import torch
import torch.distributed as dist

import simpg
from simpg.errors import UnwaitedWorkError, UnwaitedWorkWarning
from tests.support.simpg_helpers import run_bounded, spin_forever

def _next_world_works():
    def body():
        t = torch.tensor([dist.get_rank() + 1.0])
        dist.all_reduce(t)
        return t.item()

    assert run_bounded(body, 3, timeout=5) == [6.0, 6.0, 6.0]


def test_every_rank_busy_outside_collectives_times_out():
    with pytest.raises(simpg.DeadlockError) as info:
        run_bounded(spin_forever, 3, timeout=1)
    msg = str(info.value)
    assert "timeout (1s): rank 0 ran for" in msg
    assert "rank 0: running at" in msg and "in spin_forever" in msg
    assert "rank 1: ready to run (has not started its function)" in msg
    _next_world_works()


def test_a_looping_rank_while_another_waits_returns_and_names_both():
    def body():
        if dist.get_rank() == 1:
            spin_forever()
        dist.barrier()

    with pytest.raises(simpg.DeadlockError) as info:
        run_bounded(body, 2, timeout=1)
    msg = str(info.value)
    assert "rank 1: running at" in msg and "in spin_forever <- " in msg
    assert "rank 0: waiting in barrier() on group world at" in msg
    assert any("[simpg] rank(s) [1] did not return" in n for n in info.value.__notes__)
    _next_world_works()


def test_a_sleeping_rank_is_reported_at_the_timeout_not_when_it_wakes():
    woke = threading.Event()

    def body():
        if dist.get_rank() == 0:
            time.sleep(30)  # a C call: the interrupt fires only when it returns
            woke.set()
        dist.barrier()

    with pytest.raises(simpg.DeadlockError, match=r"rank 0 ran for .* without reaching"):
        run_bounded(body, 2, timeout=1)
    assert not woke.is_set()  # reported while the rank still slept
    _next_world_works()  # the sleeping rank no longer holds the CPU


def test_a_rank_blocked_outside_simpg_is_abandoned():
    never = threading.Event()

    def body():
        if dist.get_rank() == 2:
            never.wait()  # a lock no one releases
        dist.all_reduce(torch.ones(1))

    with pytest.raises(simpg.DeadlockError) as info:
        run_bounded(body, 3, timeout=1)
    assert "rank 2: running at" in str(info.value) and "in body" in str(info.value)
    never.set()  # let the abandoned thread unwind (it raises RankAbandoned, swallowed)
    _next_world_works()


def test_a_rank_alone_that_loops_forever_times_out():
    with pytest.raises(simpg.DeadlockError, match="rank 0 ran for"):
        run_bounded(spin_forever, 1, timeout=1)


def test_a_rank_that_keeps_running_after_the_failure_is_left_behind():
    def body():
        if dist.get_rank() == 1:  # rank 0 runs first and waits in the barrier
            raise ValueError("rank 1 broke")
        try:
            dist.barrier()
        except simpg.RankFailedError:
            spin_forever()  # a cleanup that never ends

    with pytest.raises(ValueError, match="rank 1 broke") as info:
        run_bounded(body, 2, timeout=1)
    assert any("[simpg] rank(s) [0] were still running user code" in n
               for n in info.value.__notes__)
    _next_world_works()


def test_except_exception_in_user_code_does_not_swallow_the_interrupt():
    def body():
        while True:
            try:
                spin_forever()
            except Exception:  # noqa: BLE001, S110 - what careless user code does
                pass

    with pytest.raises(simpg.DeadlockError):
        run_bounded(body, 2, timeout=1)
    _next_world_works()


def test_a_timeout_inside_run_subtests_ends_the_world():
    def check(n):
        if n == 2 and dist.get_rank() == 1:
            spin_forever()
        dist.barrier()

    with pytest.raises(simpg.DeadlockError, match="rank 1 ran for"):
        run_bounded(simpg.run_subtests, 2, {"n": [1, 2, 3]}, check, timeout=1)
    _next_world_works()


def test_collectives_reset_the_timeout_clock():
    def body():  # each step shorter than the timeout, the whole run longer
        for _ in range(4):
            time.sleep(0.3)
            dist.barrier()
        return True

    assert run_bounded(body, 1, timeout=1) == [True]


def test_polling_is_completed_without_wait_times_out_instead_of_spinning():
    def body():
        work = dist.all_reduce(torch.ones(1), async_op=True)
        while not work.is_completed():  # the other ranks never get to run
            pass

    with pytest.raises(simpg.DeadlockError, match="rank 0 ran for"):
        run_bounded(body, 2, timeout=1)


# -- un-waited async work --------------------------------------------------------------------

def _unwaited_body():
    t = torch.tensor([dist.get_rank() + 1.0])
    work = dist.all_reduce(t, async_op=True)  # never waited
    del work
    return t


def test_unwaited_work_warns_with_the_collective_and_the_user_call_site():
    with pytest.warns(UnwaitedWorkWarning) as record:
        simpg.run(_unwaited_body, 2)
    msg = str(record[0].message)
    assert msg.startswith("2 collective(s) issued with async_op=True were never waited")
    assert "rank 0: all_reduce(shapes=[(1,)]" in msg and "rank 1: all_reduce" in msg
    assert "test_reliability.py" in msg  # the user's line, not simpg's
    assert record[0].filename == __file__  # points at the simpg.run call


def test_strict_async_raises_instead():
    with pytest.raises(UnwaitedWorkError, match="rank 1: all_reduce.*test_reliability"):
        simpg.run(_unwaited_body, 2, strict_async=True)


def test_waited_work_and_sync_calls_are_quiet_in_strict_mode():
    def body():
        t = torch.ones(2)
        dist.all_reduce(t)
        w = dist.all_gather_single(torch.empty(4), t, async_op=True)
        w.wait()
        if dist.get_rank() == 0:
            dist.isend(torch.ones(1), dst=1).wait()
        else:
            dist.irecv(torch.empty(1), src=0).wait()
        return t.sum().item()

    assert simpg.run(body, 2, strict_async=True) == [4.0, 4.0]


def test_async_collective_another_rank_never_issues_is_a_deadlock_at_the_end():
    def body():
        if dist.get_rank() == 0:
            dist.all_reduce(torch.ones(1), async_op=True)

    with pytest.raises(simpg.DeadlockError,
                       match=r"can never complete.*\n  rank 0: all_reduce.*ranks \[1\] of the "
                             r"group never issued it"):
        simpg.run(body, 2)


def test_a_send_no_rank_receives_is_reported():
    def body():
        if dist.get_rank() == 0:
            dist.send(torch.ones(1), dst=1)

    with pytest.raises(simpg.DeadlockError, match=r"rank 0: send\(.*was never received by"):
        simpg.run(body, 2)


def test_functional_collectives_wait_through_wait_tensor():
    import torch.distributed._functional_collectives as funcol

    def body():
        t = funcol.all_reduce(torch.ones(2), "sum", dist.group.WORLD)
        return funcol.wait_tensor(t).sum().item()

    assert simpg.run(body, 2, strict_async=True) == [4.0, 4.0]
