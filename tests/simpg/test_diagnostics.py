"""What simpg reports where a real backend would hang: mismatches, deadlocks, failures."""

from __future__ import annotations

import threading
import time

import pytest
import torch
import torch.distributed as dist

import simpg


def test_mismatched_op_shows_every_ranks_call_with_file_and_line():
    def body():
        if dist.get_rank() == 1:
            dist.broadcast(torch.ones(2), src=0)
        else:
            dist.all_reduce(torch.ones(2))

    with pytest.raises(simpg.CollectiveMismatchError) as info:
        simpg.run(body, 3)
    msg = str(info.value)
    assert "rank 0: all_reduce" in msg and "rank 1: broadcast" in msg
    assert "rank 2: all_reduce" in msg
    assert "test_diagnostics.py:" in msg


@pytest.mark.parametrize("what", ["shape", "dtype", "reduce op"])
def test_mismatched_shape_dtype_or_reduce_op(what):
    def body():
        odd = dist.get_rank() == 1
        shape = (3,) if odd and what == "shape" else (2,)
        dtype = torch.float64 if odd and what == "dtype" else torch.float32
        op = dist.ReduceOp.MAX if odd and what == "reduce op" else dist.ReduceOp.SUM
        dist.all_reduce(torch.ones(shape, dtype=dtype), op=op)

    with pytest.raises(simpg.CollectiveMismatchError, match="does not match across ranks"):
        simpg.run(body, 2)


def test_mismatched_groups_are_reported_with_each_ranks_group():
    def body():
        pair = dist.new_group([0, 1])
        if dist.get_rank() == 0:
            dist.all_reduce(torch.ones(1), group=pair)
        else:
            dist.all_reduce(torch.ones(1))

    with pytest.raises(simpg.CollectiveMismatchError) as info:
        simpg.run(body, 2)
    assert "group ranks(0,1)" in str(info.value) and "group world" in str(info.value)


def test_a_collective_others_never_reach_is_a_deadlock_report():
    def body():
        if dist.get_rank() == 0:
            dist.all_reduce(torch.ones(1))

    with pytest.raises(simpg.DeadlockError) as info:
        simpg.run(body, 3)
    msg = str(info.value)
    assert "rank 0: waiting in all_reduce" in msg and "rank 1: finished" in msg


def test_recv_without_send_is_a_deadlock_report():
    def body():
        if dist.get_rank() == 1:
            dist.recv(torch.empty(1), src=0)

    with pytest.raises(simpg.DeadlockError, match=r"rank 1: waiting in recv"):
        simpg.run(body, 2)


def test_a_rank_that_never_yields_hits_the_timeout_with_its_position():
    def body():
        if dist.get_rank() == 1:
            time.sleep(1.0)  # stands for a hang outside any collective
        dist.barrier()

    start = time.monotonic()
    with pytest.raises(simpg.DeadlockError) as info:
        simpg.run(body, 2, timeout=0.3)
    assert time.monotonic() - start < 10
    assert "rank 1 ran for" in str(info.value) and "test_diagnostics.py" in str(info.value)


def test_rank_failure_reraises_original_with_rank_and_releases_others():
    def body():
        if dist.get_rank() == 2:
            raise KeyError("boom")
        dist.all_reduce(torch.ones(1))  # ranks 0, 1 would wait for rank 2 forever

    before = threading.active_count()
    with pytest.raises(KeyError, match="boom") as info:
        simpg.run(body, 3)
    assert "[simpg] raised on rank 2 of 3" in info.value.__notes__
    time.sleep(0.05)
    assert threading.active_count() <= before + 3  # pool threads idle, none stuck


def test_released_ranks_see_rank_failed_error():
    seen = []

    def body():
        if dist.get_rank() == 2:  # ranks 0 and 1 run first and wait for it
            raise ValueError("rank 2 broke")
        try:
            dist.all_reduce(torch.ones(1))
        except simpg.RankFailedError as e:
            seen.append((dist.get_rank(), e.failed_rank))
            raise

    with pytest.raises(ValueError, match="rank 2 broke"):
        simpg.run(body, 3)
    assert sorted(seen) == [(0, 2), (1, 2)]


def test_reductions_are_bitwise_reproducible_in_rank_order():
    def body():
        g = torch.Generator().manual_seed(dist.get_rank())
        t = torch.randn(1000, generator=g, dtype=torch.float32) * 10 ** dist.get_rank()
        dist.all_reduce(t)
        return t

    a, b = simpg.run(body, 4)[0], simpg.run(body, 4, schedule_seed=3)[0]
    inputs = [torch.randn(1000, generator=torch.Generator().manual_seed(r)) * 10 ** r
              for r in range(4)]
    fold = ((inputs[0] + inputs[1]) + inputs[2]) + inputs[3]
    assert torch.equal(a, fold) and torch.equal(b, fold)


def test_each_rank_has_its_own_rng():
    def body():
        if dist.get_rank() == 0:
            torch.manual_seed(123)
            torch.rand(5)
        dist.barrier()
        return torch.rand(3)

    torch.manual_seed(7)
    expected_untouched = torch.rand(3)
    torch.manual_seed(7)
    out = simpg.run(body, 3, schedule_seed=11)
    for r in (1, 2):  # rank 0's seeding and draws do not leak into ranks 1 and 2
        assert torch.equal(out[r], expected_untouched)
    torch.manual_seed(123)
    torch.rand(5)
    assert torch.equal(out[0], torch.rand(3))
    torch.manual_seed(7)
    assert torch.equal(torch.rand(3), expected_untouched)  # the caller's RNG is restored


def test_independent_worlds_in_parallel_threads():
    results = {}

    def one_world(k):
        results[k] = simpg.run(_world_body(k), 4)

    threads = [threading.Thread(target=one_world, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for k in range(4):  # the same world alone gives the same numbers: no cross-talk
        assert results[k] == simpg.run(_world_body(k), 4)


def _world_body(k):
    def body():
        torch.manual_seed(k)
        t = torch.tensor([float(dist.get_rank() + k)])
        for _ in range(20):
            dist.all_reduce(t)
            t /= 4
        return t.item(), torch.rand(1).item()

    return body


def _order_log(seed):
    log = []

    def body():
        for step in range(3):
            log.append((dist.get_rank(), step))
            dist.barrier()

    simpg.run(body, 4, schedule_seed=seed)
    return log


def test_seeded_schedule_replays_exactly_and_seeds_differ():
    assert _order_log(5) == _order_log(5)
    assert len({tuple(_order_log(s)) for s in range(6)}) > 1


def test_seed_is_printed_on_failure():
    def body():
        if dist.get_rank() == 1:
            raise RuntimeError("x")

    with pytest.raises(RuntimeError) as info:
        simpg.run(body, 2, schedule_seed=42)
    assert any("schedule_seed=42" in n for n in info.value.__notes__)


def test_fault_injection_raise_at_kth_collective():
    calls = []

    def body():
        for k in range(3):
            dist.all_reduce(torch.ones(1))
            calls.append((dist.get_rank(), k))

    with pytest.raises(OSError, match="link down"):
        simpg.run(body, 2, faults=[simpg.RaiseAt(rank=1, call=2, error=OSError("link down"))])
    assert (1, 1) not in calls and (1, 0) in calls


def test_fault_injection_stall_is_reported_as_deadlock():
    def body():
        for _ in range(3):
            dist.all_reduce(torch.ones(1))

    with pytest.raises(simpg.DeadlockError, match="stalled by fault injection"):
        simpg.run(body, 3, faults=[simpg.StallAt(rank=2, call=2)])


def test_fault_arguments_are_checked():
    with pytest.raises(ValueError, match="rank must be in"):
        simpg.run(lambda: None, 2, faults=[simpg.StallAt(rank=5, call=1)])


def test_a_nested_run_is_refused_at_once():
    def inner() -> int:
        return dist.get_rank()

    def body() -> None:
        simpg.run(inner, 2)

    start = time.monotonic()
    with pytest.raises(simpg.SimpgError, match="called inside rank 0 of a running simpg world"):
        simpg.run(body, 2, timeout=5)
    assert time.monotonic() - start < 5
