"""The fast paths of simpg's collectives (Notes [one pass over memory], [hand-over without
preemption]) give exactly what the pure functions of ``simpg.collectives`` specify."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist

import simpg
from simpg import collectives as C
from simpg import kernels as K

DTYPES = [torch.bool, torch.int8, torch.int64, torch.float16, torch.bfloat16, torch.float32,
          torch.complex64]
SHAPES = {"small": (3, 4), "chunked": (2 * K.CHUNK + 5,)}  # the second crosses chunk edges


def _inputs(n: int, dtype: torch.dtype, shape: tuple[int, ...]) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(n)
    if dtype == torch.bool:
        return [torch.rand(shape, generator=g) > 0.5 for _ in range(n)]
    if dtype.is_floating_point or dtype.is_complex:
        return [torch.randn(shape, generator=g).to(dtype) for _ in range(n)]
    return [torch.randint(-3, 4, shape, generator=g).to(dtype) for _ in range(n)]


def _bitwise(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def _defined(op: str, dtype: torch.dtype) -> bool:
    try:
        C.check_reduce_op(op, dtype)
    except ValueError:
        return False
    return True


PAIRS = [(op, dtype) for op in C.REDUCE_OPS for dtype in DTYPES if _defined(op, dtype)]


@pytest.mark.parametrize("shape", list(SHAPES.values()), ids=list(SHAPES))
@pytest.mark.parametrize("op,dtype", PAIRS, ids=[f"{o}-{d}" for o, d in PAIRS])
@pytest.mark.parametrize("n", [1, 2, 3, 8])
def test_reduce_into_is_the_pure_fold_bitwise(n, op, dtype, shape) -> None:
    inputs = _inputs(n, dtype, shape)
    expected = C.reduce_tensors(inputs, op)
    outs = [torch.empty_like(t) for t in inputs]
    K.reduce_into(outs, inputs, op)
    assert all(_bitwise(o, expected) for o in outs)
    in_place = [t.clone() for t in inputs]  # an in-place all_reduce: outputs are the inputs
    K.reduce_into(in_place, in_place, op)
    assert all(_bitwise(o, expected) for o in in_place)


def test_reduce_into_handles_views_and_tensors_that_require_grad() -> None:
    base = [torch.randn(2 * K.CHUNK, 3) for _ in range(3)]
    views = [b[:, 1] for b in base]  # not contiguous: the whole-tensor path
    expected = C.reduce_tensors(views, "sum")
    K.reduce_into(views, views, "sum")
    assert all(torch.equal(v, expected) for v in views)
    leaves = [torch.ones(4, requires_grad=True) for _ in range(2)]
    K.reduce_into(leaves, leaves, "max")  # written as autograd cannot see it, no error
    assert all(torch.equal(t.detach(), torch.ones(4)) for t in leaves)


def test_gather_into_copies_every_source_to_every_rank() -> None:
    ins = [torch.full((2,), float(r)) for r in range(3)]
    outs = [[torch.empty(2) for _ in range(3)] for _ in range(3)]
    K.gather_into(outs, ins)
    expected = C.all_gather(ins)
    assert all(torch.equal(o, e) for row, erow in zip(outs, expected) for o, e in zip(row, erow))


def test_large_all_reduce_in_place_through_the_backend() -> None:
    def body() -> bool:
        r = dist.get_rank()
        t = torch.arange(3 * K.CHUNK + 1, dtype=torch.float64) * (r + 1)
        dist.all_reduce(t)
        return torch.equal(t, torch.arange(3 * K.CHUNK + 1, dtype=torch.float64) * 10)

    assert simpg.run(body, 4) == [True] * 4


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="no SCHED_BATCH off Linux")
def test_pinned_rank_threads_run_without_wakeup_preemption() -> None:
    def policy() -> int:
        return os.sched_getscheduler(0)

    assert simpg.run(policy, 2) == [os.SCHED_BATCH] * 2
    assert simpg.run(policy, 2, pin_threads=False) == [os.sched_getscheduler(0)] * 2


def test_a_reduce_op_checked_for_one_dtype_is_checked_again_for_another() -> None:
    """Note [lean issue]: the check is remembered per (reduce op, dtype), never per op alone."""
    def body() -> str:
        t = torch.ones(2)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)  # checked once, remembered
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        try:
            dist.all_reduce(torch.ones(2, dtype=torch.int64), op=dist.ReduceOp.AVG)
        except ValueError as e:
            return str(e)
        return "no error"

    out = simpg.run(body, 2)
    assert all("'avg' does not support dtype torch.int64" in msg for msg in out), out


def test_a_refused_reduce_op_is_refused_every_time() -> None:
    def body() -> list[str]:
        errors = []
        for _ in range(2):
            try:
                dist.all_reduce(torch.ones(2), op=dist.ReduceOp.AVG)
            except simpg.UnsupportedCollectiveError as e:
                errors.append(type(e).__name__)
        return errors

    assert simpg.run(body, 2, capabilities="portable") == [["UnsupportedCollectiveError"] * 2] * 2
