"""The dispatcher's fast path (Note [fast path] in dtensor/dispatch/entry.py): a repeated
call takes it and gives what the general path gives; calls it must not take stay off it.
Every test runs through both entries: the compiled one (Note [native fast path] in
dtensor.dispatch.native) and the Python one."""

from __future__ import annotations

import pytest
import torch

from dtensor import DTensor, Replicate, Shard, distribute_tensor
from dtensor.dispatch import native
from dtensor.debug import explain_ops
from tests.support.mesh_world import run_on_mesh as _world

aten = torch.ops.aten


@pytest.fixture(autouse=True, params=["native", "python"])
def entry(request):
    """Which ``__torch_dispatch__`` the test runs through."""
    if request.param == "python":
        with native.python_entry_only(DTensor):
            yield request.param
    else:
        if native.MODULE is None:
            pytest.skip(f"the compiled entry is not available: {native.REASON}")
        yield request.param


def _fast_entries(mesh) -> int:
    return len(mesh.__dict__.get("_fast_plans", {}))


def test_repeated_calls_take_the_fast_path_and_agree_with_the_general_path():
    full = torch.arange(24.0).reshape(6, 4)

    def body(mesh):
        a = distribute_tensor(full, mesh, [Shard(0)])
        r = distribute_tensor(full.t().contiguous(), mesh, [Replicate()])
        calls = [lambda: a + a, lambda: torch.mm(a, r), lambda: a.view(6, 2, 2),
                 lambda: a.split(2, 1), lambda: aten.mul.Scalar(a, 3),
                 lambda: torch.cat([a, a, a], 1), lambda: torch.stack((a, a))]
        first = [f() for f in calls]
        entries = _fast_entries(mesh)
        again = [f() for f in calls]
        same = all(
            all(x.placements == y.placements and torch.equal(x.full_tensor(), y.full_tensor())
                for x, y in zip(u if isinstance(u, (list, tuple)) else [u],
                                v if isinstance(v, (list, tuple)) else [v]))
            for u, v in zip(first, again))
        listed = {k[0] for k in mesh.__dict__["_fast_plans"]} >= {aten.cat.default._op,
                                                                  aten.stack.default._op}
        return entries >= len(calls), same, type(again[3]).__name__, listed

    assert _world((3,), body) == [(True, True, "tuple", True)] * 3


def test_scalars_equal_as_keys_but_not_as_arguments_get_their_own_plans():
    # 2 == 2.0 == True: an int tensor times 2.0 is float, times True is int
    def body(mesh):
        x = distribute_tensor(torch.arange(4), mesh, [Shard(0)])
        out = []
        for _ in range(2):
            for s in (2, 2.0, True):
                y = aten.mul.Scalar(x, s)
                out.append((y.dtype, y.to_local().dtype))
        return out

    int_, flt = torch.int64, torch.float32
    expected = [(int_, int_), (flt, flt), (int_, int_)] * 2
    assert _world((2,), body) == [expected] * 2


def test_in_place_ops_return_the_callers_dtensor_on_the_fast_path():
    def body(mesh):
        a = distribute_tensor(torch.zeros(5), mesh, [Shard(0)])
        b = distribute_tensor(torch.ones(5), mesh, [Shard(0)])
        results = [a.add_(b) is a for _ in range(3)]
        return results, a.full_tensor().tolist()

    assert _world((2,), body) == [([True] * 3, [3.0] * 5)] * 2


def test_explain_sees_every_call_even_when_the_fast_path_could_take_it():
    def body(mesh):
        a = distribute_tensor(torch.ones(4, 4), mesh, [Shard(0)])
        a + a
        a + a
        with explain_ops() as log:
            a + a
            a + a
        return len([r for r in log if "add" in str(r)])

    assert _world((2,), body) == [2, 2]


def test_keyword_arguments_ride_the_fast_path_keyed_by_value_and_type():
    def body(mesh):
        a = distribute_tensor(torch.arange(8.0).reshape(4, 2), mesh, [Shard(0)])
        out = []
        for _ in range(2):
            for dtype in (None, torch.float64, torch.int32):
                y = torch.ones_like(a, dtype=dtype)
                out.append((y.dtype, y.to_local().dtype, y.placements, y.full_tensor().sum()))
        keyed = sum(1 for k in mesh.__dict__["_fast_plans"] if k[0] is aten.ones_like.default._op)
        return out[:3] == out[3:], [o[:2] for o in out[:3]], keyed >= 3

    flt, dbl, i32 = torch.float32, torch.float64, torch.int32
    assert _world((2,), body) == [(True, [(flt, flt), (dbl, dbl), (i32, i32)], True)] * 2


def test_inputs_moved_without_communication_ride_the_fast_path():
    # Note [local moves]: mm(S(1), R) wants its R argument as S(0), a slice of each piece;
    # on a 2-D mesh with uneven pieces, and the result equals one device's on every call
    full_a = torch.arange(35.0).reshape(5, 7)
    full_b = torch.arange(21.0).reshape(7, 3)

    def body(mesh):
        a = distribute_tensor(full_a, mesh, [Replicate(), Shard(1)])
        b = distribute_tensor(full_b, mesh, [Replicate(), Replicate()])
        before = _fast_entries(mesh)
        outs = [torch.mm(a, b) for _ in range(3)]
        moved = _fast_entries(mesh) - before
        again = b.to_local()
        return (moved, [o.placements for o in outs],
                all(torch.equal(o.full_tensor(), full_a @ full_b) for o in outs),
                torch.equal(again, full_b))  # the cut is a copy: b's piece is untouched

    p = (Replicate(), __import__("dtensor").Partial())
    assert _world((2, 3), body) == [(1, [p] * 3, True, True)] * 6


def test_local_moves_of_empty_pieces_give_the_new_pieces_shape():
    # a tensor with no elements moves S(3) -> R without communication, but its new piece
    # (all of dim 3) is not inside the old one (half of it): no cut, a redistribute
    def body(mesh):
        x = distribute_tensor(torch.ones(0, 8, 1, 8), mesh, [Shard(3)])
        outs = [torch.nn.functional.adaptive_avg_pool2d(x, (1, 5)) for _ in range(3)]
        return [tuple(o.to_local().shape) for o in outs], _fast_entries(mesh) > 0

    assert _world((2,), body) == [([(0, 8, 1, 5)] * 3, True)] * 2


def test_pinned_inputs_and_moves_with_communication_stay_on_the_general_path():
    def body(mesh):
        a = distribute_tensor(torch.ones(4, 4), mesh, [Shard(0)])
        b = distribute_tensor(torch.ones(4, 4), mesh, [Shard(1)])  # moved for the add
        before = _fast_entries(mesh)
        for _ in range(2):
            a + b
        pinned = distribute_tensor(torch.ones(4, 4), mesh, [Shard(0)]).pin()
        for _ in range(2):
            pinned * 2.0
        return _fast_entries(mesh) - before

    assert _world((2,), body) == [0, 0]


def test_plain_tensors_ride_the_fast_path_and_check_replicated_still_checks():
    import pytest
    import torch.distributed as dist

    from dtensor.dispatch import check_replicated

    def body(mesh):
        a = distribute_tensor(torch.ones(4, 3), mesh, [Shard(0)])
        plain = torch.arange(3.0)
        first = a * plain
        entries = _fast_entries(mesh)
        again = a * plain
        with check_replicated(), pytest.raises(ValueError, match="differs across ranks"):
            a * (plain + dist.get_rank())
        return (entries > 0, torch.equal(first.full_tensor(), again.full_tensor()),
                again.placements)

    assert _world((2,), body) == [(True, True, (Shard(0),))] * 2
