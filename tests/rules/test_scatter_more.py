"""_chunk_cat and whole-view as_strided_scatter (dtensor/ops/scatter_more.py): every
strategy sound on even, uneven and empty shapes over the meshes; the leading dims of
_chunk_cat and every dim of an identity as_strided_scatter offered; end to end on simpg."""

from __future__ import annotations

import pytest
import torch
from tests.support.mesh_world import run_on_mesh

from dtensor import Shard, distribute_tensor, fallback_policy
from dtensor.ops.propagate import per_dim_strategies
from dtensor.ops.soundness import check_op, op_spec

aten = torch.ops.aten
MESHES = [(2,), (3,), (2, 2), (4,)]
g = torch.Generator().manual_seed(13)


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=g, dtype=torch.float64)


CASES = [
    (aten._chunk_cat.default, ([_r(3, 2, 3), _r(3, 2, 5)], 2, 2)),
    (aten._chunk_cat.default, ([_r(5, 2, 3), _r(5, 1, 5)], 1, 3)),
    (aten._chunk_cat.default, ([_r(4, 3, 2, 1), _r(4, 3, 2, 2)], -1, 5)),
    (aten._chunk_cat.default, ([_r(3, 3, 2, 1), _r(1, 4, 2, 2)], 0, 2)),
    (aten._chunk_cat.default, ([_r(1, 2, 7)], 2, 4)),
    (aten.as_strided_scatter.default, (_r(5, 3), _r(5, 3), [5, 3], [3, 1], 0)),
    (aten.as_strided_scatter.default, (_r(4, 3, 2), _r(4, 3, 2), [4, 3, 2], [6, 2, 1], None)),
    (aten.as_strided_scatter.default, (_r(0, 3), _r(0, 3), [0, 3], [3, 1], 0)),
    (aten.as_strided_scatter.default, (_r(1), _r(1), [1], [1], 0)),
    (aten.as_strided_scatter.default, (_r(3, 3), _r(2, 2), [2, 2], [1, 2], 1)),  # general: R
    (aten.as_strided_scatter.default, (_r(1), _r(), [], [], 0)),
]


def _id(case) -> str:
    op, args = case
    flat = [t for a in args for t in (a if isinstance(a, list) else [a])]
    shapes = ",".join(str(tuple(a.shape)) for a in flat if isinstance(a, torch.Tensor))
    return f"{op}{shapes}{[a for a in flat if not isinstance(a, torch.Tensor)]}"


@pytest.mark.parametrize("mesh_shape", MESHES, ids=str)
@pytest.mark.parametrize("op,args", CASES, ids=[_id(c) for c in CASES])
def test_every_strategy_of_the_rule_is_sound(op, args, mesh_shape):
    assert check_op(op, args, {}, mesh_shape, rtol=1e-12, atol=1e-12) == []


def _sharded_dims(op, args, mesh_shape=(2,)) -> set[int]:
    spec = op_spec(op, args, {}, mesh_shape)
    return {s.inputs[0].dim for s in per_dim_strategies(spec)[0]
            if isinstance(s.inputs[0], Shard)}


def test_leading_dims_and_identity_views_shard():
    assert _sharded_dims(aten._chunk_cat.default, ([_r(3, 2, 3), _r(3, 2, 5)], 2, 2)) == {0, 1}
    assert _sharded_dims(aten._chunk_cat.default, ([_r(3, 2, 3), _r(3, 2, 5)], -2, 2)) == {0}
    # a piece of 1 row on 2 ranks would be empty: the kernel rejects it
    assert _sharded_dims(aten._chunk_cat.default, ([_r(1, 2, 3)], 2, 2)) == {1}
    whole = (_r(4, 3), _r(4, 3), [4, 3], [3, 1], 0)
    assert _sharded_dims(aten.as_strided_scatter.default, whole) == {0, 1}
    shifted = (_r(4, 3), _r(4, 3), [4, 3], [3, 1], 1)
    assert _sharded_dims(aten.as_strided_scatter.default, shifted) == set()
    transposed = (_r(3, 3), _r(3, 3), [3, 3], [1, 3], 0)
    assert _sharded_dims(aten.as_strided_scatter.default, transposed) == set()


def test_chunk_cat_and_as_strided_scatter_end_to_end_without_fallback():
    a, b, x = _r(5, 2, 3), _r(5, 3, 2), _r(5, 4)

    def body(mesh):
        da = distribute_tensor(a, mesh, [Shard(0)])
        db = distribute_tensor(b, mesh, [Shard(0)])
        dx = distribute_tensor(x, mesh, [Shard(1)])
        with fallback_policy("error"):
            c = torch._chunk_cat([da, db], 1, 2)
            assert c.placements == (Shard(0),)
            y = torch.as_strided_scatter(dx, dx * 2, (5, 4), (4, 1))
            assert y.placements == (Shard(1),)
        return c.full_tensor(), y.full_tensor()

    c, y = run_on_mesh((3,), body)[0]
    assert torch.equal(c, torch._chunk_cat([a, b], 1, 2))
    assert torch.equal(y, torch.as_strided_scatter(x, x * 2, (5, 4), (4, 1)))
