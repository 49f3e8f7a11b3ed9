"""The misuse catalogue: each bad input on the simpg side, with the error type and message it
must get, within the world's timeout. One row per misuse; ``classify`` sorts an outcome into
the tally (clear error / wrong error / hang / silent) that the issue tracks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest
import torch
import torch.distributed as dist

import simpg
from simpg.errors import UnwaitedWorkError
from tests.support.simpg_helpers import run_bounded, spin_forever

TIMEOUT_S = 1.0  # every world here; the stuck ones end at it


@dataclass(frozen=True)
class Misuse:
    name: str
    program: Callable[[], Any]
    error: type[BaseException]
    message: str  # a substring of str(error)
    world_size: int = 2
    run_kwargs: dict = field(default_factory=dict)


def _rank() -> int:
    return dist.get_rank()


def _default_group() -> Any:
    return dist.distributed_c10d._get_default_group()


def _on(rank: int, fn: Callable[[], Any], other: Callable[[], Any] = lambda: None) -> Any:
    return fn() if _rank() == rank else other()


def _new_group_01():
    return dist.new_group([0, 1])


def _destroyed_group():
    g = _new_group_01()
    dist.destroy_process_group(g)
    dist.all_reduce(torch.ones(1), group=g)


def _destroyed_group_direct():
    g = _new_group_01()
    dist.destroy_process_group(g)
    g.allreduce([torch.ones(1)]).wait()  # the group object itself, past torch's checks


def _wrong_group():
    g = _new_group_01()
    dist.all_reduce(torch.ones(1), group=g if _rank() == 0 else None)


def _uneven_members():
    dist.new_group([0, 1] if _rank() == 0 else [0, 2])
    dist.barrier()


def _sparse():
    dist.all_reduce(torch.eye(2).to_sparse())


def _nested():
    simpg.run(lambda: None, 2)


def _init_twice():
    dist.init_process_group("simpg", rank=_rank(), world_size=2, store=dist.HashStore())


def _poll():
    work = dist.all_reduce(torch.ones(1), async_op=True)
    while not work.is_completed():
        pass


def _one_sided_async():
    _on(0, lambda: dist.all_reduce(torch.ones(1), async_op=True))


def _unwaited():
    dist.all_reduce(torch.ones(1), async_op=True)


CATALOGUE = [
    # -- simpg.run's own arguments ----------------------------------------------------------
    Misuse("world_size_zero", lambda: None, ValueError, "world_size must be an int >= 1, got 0",
           world_size=0),
    Misuse("world_size_float", lambda: None, ValueError, "world_size must be an int >= 1, got 1.5",
           world_size=1.5),  # type: ignore[arg-type]
    Misuse("timeout_negative", lambda: None, ValueError,
           "timeout must be a positive number of seconds, got -1", run_kwargs={"timeout": -1}),
    Misuse("fault_rank_out_of_range", lambda: None, ValueError, "rank must be in [0, 1]",
           run_kwargs={"faults": [simpg.RaiseAt(rank=5, call=1)]}),
    Misuse("fault_not_a_fault", lambda: None, TypeError,
           "faults: expected RaiseAt or StallAt, got 42", run_kwargs={"faults": [42]}),
    Misuse("fault_call_zero", lambda: None, ValueError, "call counts collectives from 1",
           run_kwargs={"faults": [simpg.StallAt(rank=0, call=0)]}),
    # -- collectives that differ across ranks ---------------------------------------------
    Misuse("different_ops", lambda: _on(0, dist.barrier, lambda: dist.all_reduce(torch.ones(1))),
           simpg.CollectiveMismatchError, "ranks issued different collectives"),
    Misuse("different_shapes", lambda: dist.all_reduce(torch.ones(2 + _rank())),
           simpg.CollectiveMismatchError, "rank 1: all_reduce(shapes=[(3,)]"),
    Misuse("different_dtypes",
           lambda: dist.all_reduce(torch.ones(2, dtype=[torch.float32, torch.int64][_rank()])),
           simpg.CollectiveMismatchError, "rank 1: all_reduce(shapes=[(2,)], dtype=torch.int64"),
    Misuse("different_reduce_ops",
           lambda: dist.all_reduce(torch.ones(2),
                                   op=[dist.ReduceOp.SUM, dist.ReduceOp.MAX][_rank()]),
           simpg.CollectiveMismatchError, "op=max"),
    Misuse("different_broadcast_src", lambda: dist.broadcast(torch.ones(2), src=_rank()),
           simpg.CollectiveMismatchError, "broadcast(shape=(2,), dtype=torch.float32, src=1)"),
    Misuse("different_all_gather_shapes",
           lambda: dist.all_gather_single(torch.empty(4 + 2 * _rank()), torch.ones(2 + _rank())),
           simpg.CollectiveMismatchError, "all_gather_into_tensor(input_shape=(3,)"),
    Misuse("different_groups", _wrong_group, simpg.CollectiveMismatchError,
           "ranks disagree on their next collective", world_size=3),
    Misuse("different_group_members", _uneven_members, simpg.CollectiveMismatchError,
           "with different members: [0, 1] and [0, 2]", world_size=3),
    Misuse("barrier_count_differs", lambda: [dist.barrier() for _ in range(1 + _rank())],
           simpg.DeadlockError, "rank 0: finished (left the world)"),
    Misuse("rank_skips_a_collective", lambda: _on(0, lambda: dist.all_reduce(torch.ones(1))),
           simpg.DeadlockError, "waiting for ranks [1]"),
    # -- arguments one rank gets wrong ----------------------------------------------------
    Misuse("all_gather_output_list_length",
           lambda: dist.all_gather([torch.empty(1)], torch.ones(1)), ValueError,
           "output_tensor_list: got 1 tensors, expected 2"),
    Misuse("all_gather_output_dtype",
           lambda: dist.all_gather([torch.empty(1, dtype=torch.int64)] * 2, torch.ones(1)),
           ValueError, "different dtypes"),  # torch's own check, before simpg's
    Misuse("all_gather_single_output_size",
           lambda: dist.all_gather_single(torch.empty(3), torch.ones(2)), ValueError,
           "output has 3 elements, expected 2 x 2"),
    Misuse("reduce_scatter_input_size",
           lambda: dist.reduce_scatter_single(torch.empty(2), torch.ones(5)), ValueError,
           "input has 5 elements, expected 2 x 2"),
    Misuse("all_to_all_bad_splits",
           lambda: dist.all_to_all_single(torch.empty(3), torch.ones(3), [1, 2], [3, 1]),
           ValueError, "input_split_sizes=[3, 1] must have 2 entries"),
    Misuse("all_to_all_uneven_without_splits",
           lambda: dist.all_to_all_single(torch.empty(3), torch.ones(3)), ValueError,
           "must split evenly over the group's 2 ranks"),
    Misuse("broadcast_src_out_of_range", lambda: dist.broadcast(torch.ones(1), src=5), ValueError,
           "out of range"),
    Misuse("scatter_list_length_on_root",
           lambda: dist.scatter(torch.empty(1), [torch.ones(1)] if _rank() == 0 else None, src=0),
           ValueError, "scatter_list: got 1 tensors, expected 2"),
    Misuse("meta_tensor", lambda: dist.all_reduce(torch.empty(2, device="meta")), ValueError,
           "simpg moves real data"),
    Misuse("sparse_tensor", _sparse, ValueError, "needs dense tensors"),
    Misuse("non_tensor_argument", lambda: dist.all_reduce([1.0, 2.0]), TypeError, "Tensor"),
    # straight to the group, past torch's own checks (as C++ callers reach it)
    Misuse("non_tensor_in_output_list",
           lambda: _default_group().allgather([[torch.ones(1), "x"]], [torch.ones(1)]),
           TypeError, "output_tensor_list[1]: expected a torch.Tensor, got str"),
    Misuse("meta_tensor_in_output_list",
           lambda: _default_group().allgather([[torch.ones(1), torch.empty(1, device="meta")]],
                                              [torch.ones(1)]),
           ValueError, "output_tensor_list[1] is a torch.strided tensor on meta"),
    Misuse("avg_on_integers",
           lambda: dist.all_reduce(torch.ones(1, dtype=torch.int64), op=dist.ReduceOp.AVG),
           ValueError, "reduce op 'avg' does not support dtype torch.int64"),
    Misuse("bitwise_reduce_on_floats",
           lambda: dist.all_reduce(torch.ones(1), op=dist.ReduceOp.BAND), ValueError,
           "'band' does not support dtype torch.float32"),
    # -- groups ---------------------------------------------------------------------------
    Misuse("new_group_rank_out_of_range", lambda: dist.new_group([0, 5]), ValueError,
           "Rank 5 is out of range. Valid ranks are 0 to 1"),  # torch's own check
    Misuse("destroyed_group_use", _destroyed_group, ValueError,
           "is not initialized in the world group map"),  # torch's own check
    Misuse("destroyed_group_object_use", _destroyed_group_direct, ValueError,
           "all_reduce on group ranks(0,1), which this rank destroyed"),
    Misuse("default_group_destroyed_then_used",
           lambda: (dist.destroy_process_group(), dist.barrier()), ValueError,
           "Default process group has not been initialized"),
    Misuse("init_process_group_twice", _init_twice, ValueError, "twice"),
    # -- point to point --------------------------------------------------------------------
    Misuse("send_to_self", lambda: dist.send(torch.ones(1), dst=_rank()), ValueError,
           "destination rank should not be the same"),  # torch's own check
    Misuse("recv_from_self", lambda: dist.recv(torch.empty(1), src=_rank()), ValueError,
           "is this rank itself"),
    Misuse("send_to_rank_out_of_range", lambda: dist.send(torch.ones(1), dst=7), ValueError,
           "out of range"),
    Misuse("recv_without_send", lambda: _on(1, lambda: dist.recv(torch.empty(1), src=0)),
           simpg.DeadlockError, "rank 1: waiting in recv"),
    Misuse("send_without_recv", lambda: _on(0, lambda: dist.send(torch.ones(1), dst=1)),
           simpg.DeadlockError, "was never received by group rank 1"),
    Misuse("message_shape_mismatch",
           lambda: _on(0, lambda: dist.send(torch.ones(2), dst=1),
                       lambda: dist.recv(torch.empty(3), src=0)),
           simpg.CollectiveMismatchError, "a message does not fit its receive buffer"),
    # -- async work ------------------------------------------------------------------------
    Misuse("unwaited_work_strict", _unwaited, UnwaitedWorkError, "never waited",
           run_kwargs={"strict_async": True}),
    Misuse("async_collective_one_rank_only", _one_sided_async, simpg.DeadlockError,
           "ranks [1] of the group never issued it"),
    Misuse("polling_is_completed", _poll, simpg.DeadlockError, "rank 0 ran for"),
    # -- the world itself -------------------------------------------------------------------
    Misuse("nested_run", _nested, simpg.SimpgError, "worlds do not nest"),
    Misuse("exception_in_a_rank", lambda: _on(1, lambda: int("x")), ValueError,
           "invalid literal for int()"),
    Misuse("busy_loop_on_every_rank", spin_forever, simpg.DeadlockError, "rank 0 ran for"),
    Misuse("sleep_past_the_timeout", lambda: _on(1, lambda: time.sleep(30), dist.barrier),
           simpg.DeadlockError, "rank 1 ran for"),
    Misuse("injected_stall", lambda: dist.barrier(), simpg.DeadlockError,
           "stalled by fault injection (call #1)", run_kwargs={"faults": [simpg.StallAt(1, 1)]}),
]


def _run_bounded(case: Misuse) -> BaseException | None:
    """Run the case; return what it raised (None: it returned), a hang included."""
    try:
        run_bounded(case.program, case.world_size, **{"timeout": TIMEOUT_S, **case.run_kwargs})
    except BaseException as e:  # noqa: BLE001 - the outcome is what is tested
        return e
    return None


def classify(case: Misuse) -> str:
    """One of: clear error, wrong error, hang, silent."""
    error = _run_bounded(case)
    if error is None:
        return "silent"
    if isinstance(error, TimeoutError) and "a hang" in str(error):
        return "hang"
    if isinstance(error, case.error) and case.message in str(error):
        return "clear error"
    return "wrong error"


def test_catalogue_is_big_and_names_are_unique():
    names = [c.name for c in CATALOGUE]
    assert len(names) >= 35 and len(set(names)) == len(names)


@pytest.mark.parametrize("case", CATALOGUE, ids=lambda c: c.name)
def test_misuse_gets_its_error(case: Misuse) -> None:
    error = _run_bounded(case)
    assert error is not None, f"{case.name}: no error (silent)"
    assert not (isinstance(error, TimeoutError) and "a hang" in str(error)), str(error)
    assert isinstance(error, case.error), f"{case.name}: {type(error).__name__}: {error}"
    assert case.message in str(error), f"{case.name}: {error}"


if __name__ == "__main__":  # the tally: python -m tests.simpg.test_misuse
    from collections import Counter

    outcomes = {c.name: classify(c) for c in CATALOGUE}
    for name, outcome in outcomes.items():
        if outcome != "clear error":
            print(f"{name}: {outcome}")
    tally = Counter(outcomes.values())
    print(f"{len(CATALOGUE)} misuses: " + ", ".join(
        f"{k} {tally.get(k, 0)}" for k in ("clear error", "wrong error", "hang", "silent")))
