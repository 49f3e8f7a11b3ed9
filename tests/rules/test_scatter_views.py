"""Copying views and scatters (dtensor/ops/scatter_views.py): every strategy sound on even,
uneven, tiny and empty shapes over the meshes; the dims each op keeps are offered sharded;
end to end on simpg."""

from __future__ import annotations

import pytest
import torch
from tests.support.mesh_world import run_on_mesh as _world

from dtensor import Shard, distribute_tensor, fallback_policy
from dtensor.ops.propagate import per_dim_strategies
from dtensor.ops.soundness import check_op, op_spec

aten = torch.ops.aten
MESHES = [(2,), (3,), (2, 2), (4,)]
g = torch.Generator().manual_seed(7)


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=g)


CASES = [
    (aten.view_copy.default, (_r(5, 3, 4), [15, 4])),
    (aten.view_copy.default, (_r(4, 6), [4, 2, 3])),
    (aten.view_copy.default, (_r(8, 3), [-1])),
    (aten.view_copy.default, (_r(0, 3), [3, 0])),
    (aten.view_copy.dtype, (_r(5, 4), torch.int32)),
    (aten.view_copy.dtype, (_r(5, 4), torch.float16)),
    (aten.narrow_copy.default, (_r(5, 3, 4), 1, 1, 2)),
    (aten.narrow_copy.default, (_r(5, 3), 0, 0, 5)),
    (aten.unfold.default, (_r(5, 7), 1, 3, 2)),
    (aten.unfold.default, (_r(6, 3, 4), 0, 2, 1)),
    (aten.unfold_copy.default, (_r(5, 3, 4), 2, 2, 2)),
    (aten.unfold_copy.default, (_r(), 0, 1, 1)),
    (aten.unfold_backward.default, (_r(5, 3, 3), [5, 7], 1, 3, 2)),
    (aten.unfold_backward.default, (_r(3, 3, 4, 2), [6, 3, 4], 0, 2, 2)),
    (aten.rot90.default, (_r(5, 3, 4),)),
    (aten.rot90.default, (_r(5, 3, 4), 2, [1, 2])),
    (aten.rot90.default, (_r(5, 3, 4), -1, [2, 0])),
    (aten.rot90.default, (_r(5, 3), 4)),
    (aten.select_scatter.default, (_r(5, 3, 4), _r(5, 4), 1, 2)),
    (aten.select_scatter.default, (_r(5, 3), _r(3), 0, -1)),
    (aten.slice_scatter.default, (_r(5, 6), _r(5, 2), 1, 1, 5, 2)),
    (aten.slice_scatter.default, (_r(5, 3, 2), _r(5, 3, 2), 0, None, None, 1)),
    (aten.slice_scatter.default, (_r(7, 3), _r(3, 3), 0, 2, 5, 1)),
    (aten.slice_scatter.default, (_r(0, 3), _r(0, 1), 1, 0, 1, 1)),
    (aten.narrow_copy.default, (torch.arange(20).view(5, 4), 1, 1, 2)),
    (aten.select_scatter.default, (torch.arange(15).view(5, 3), torch.arange(5), 1, 0)),
    (aten.block_diag.default, ([_r(2, 3), _r(1, 2), _r(3)],)),
    (aten.block_diag.default, ([_r(0, 2), _r(4, 1)],)),
]


def _id(case) -> str:
    op, args = case
    flat = [t for a in args for t in (a if isinstance(a, list) else [a])]
    shapes = ",".join(str(tuple(a.shape)) for a in flat if isinstance(a, torch.Tensor))
    return f"{op}{shapes}{[a for a in flat if not isinstance(a, torch.Tensor)]}"


@pytest.mark.parametrize("mesh_shape", MESHES, ids=str)
@pytest.mark.parametrize("op,args", CASES, ids=[_id(c) for c in CASES])
def test_every_strategy_of_the_rule_is_sound(op, args, mesh_shape):
    assert check_op(op, args, {}, mesh_shape) == []


def _sharded_dims(op, args, mesh_shape=(2,)) -> set[int]:
    spec = op_spec(op, args, {}, mesh_shape)
    return {s.inputs[0].dim for s in per_dim_strategies(spec)[0]
            if hasattr(s.inputs[0], "dim")}


def test_only_the_dims_the_op_moves_along_stay_whole():
    assert _sharded_dims(aten.rot90.default, (_r(5, 3, 4), 1, [0, 2])) == {1}
    assert _sharded_dims(aten.rot90.default, (_r(5, 3, 4), 4, [0, 2])) == {0, 1, 2}
    assert _sharded_dims(aten.unfold.default, (_r(5, 3, 4), 1, 2, 1)) == {0, 2}
    assert _sharded_dims(aten.select_scatter.default, (_r(5, 3, 4), _r(5, 4), 1, 0)) == {0, 2}
    # a slice of all of the dim: each rank writes its own rows
    assert _sharded_dims(aten.slice_scatter.default, (_r(4, 3), _r(4, 3), 0)) == {0, 1}
    assert _sharded_dims(aten.slice_scatter.default, (_r(4, 3), _r(2, 3), 0, 1, 3)) == {1}
    assert _sharded_dims(aten.narrow_copy.default, (_r(4, 3), 0, 1, 2)) == {1}


def test_scatter_views_end_to_end_forward_and_backward_without_fallback():
    x, src = _r(5, 6, 3), _r(5, 3)

    def body(mesh):
        a = distribute_tensor(x, mesh, [Shard(0), Shard(2)]).requires_grad_()
        s = distribute_tensor(src, mesh, [Shard(0), Shard(1)]).requires_grad_()
        with fallback_policy("error"):
            y = torch.select_scatter(a, s, 1, 4)
            assert y.placements == (Shard(0), Shard(2))
            z = torch.rot90(y, 1, [1, 2])
            w = z.unfold(1, 2, 1)
            (w * w).sum().backward()
        return w.full_tensor(), a.grad.full_tensor(), s.grad.full_tensor()

    w, ga, gs = _world((2, 2), body)[0]
    ra, rs = x.clone().requires_grad_(), src.clone().requires_grad_()
    rw = torch.rot90(torch.select_scatter(ra, rs, 1, 4), 1, [1, 2]).unfold(1, 2, 1)
    (rw * rw).sum().backward()
    assert torch.allclose(w, rw) and torch.allclose(ga, ra.grad) and torch.allclose(gs, rs.grad)
