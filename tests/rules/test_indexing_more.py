"""Indexed writes and searches (dtensor/ops/indexing_more.py): every strategy sound on even,
uneven, tiny and empty shapes over the meshes; sharded strategies offered; end to end."""

from __future__ import annotations

import pytest
import torch
from tests.support.mesh_world import run_on_mesh as _world

from dtensor import Partial, Replicate, Shard, distribute_tensor, fallback_policy
from dtensor.ops.propagate import per_dim_strategies
from dtensor.ops.soundness import check_op, op_spec

aten = torch.ops.aten
MESHES = [(2,), (3,), (2, 2), (4,)]
g = torch.Generator().manual_seed(13)


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=g)


def _idx(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.long)


SORTED = torch.sort(_r(6)).values
CASES = [
    (aten.index_copy.default, (_r(5, 4, 3), 1, _idx(3, 0), _r(5, 2, 3)), {}),
    (aten.index_copy.default, (_r(5, 3), 0, _idx(4, 1, 2), _r(3, 3)), {}),
    (aten.index_copy.default, (_r(), 0, _idx(0), _r()), {}),
    (aten.index_fill.int_Scalar, (_r(5, 4, 3), 1, _idx(0, 2), -1.5), {}),
    (aten.index_fill.int_Scalar, (_r(5, 3), 0, _idx(1, 4), 0.0), {}),
    (aten.index_fill.int_Tensor, (_r(5, 3), 1, _idx(2), _r()), {}),
    (aten.index_fill.int_Scalar, (torch.arange(15).view(5, 3), 1, _idx(0), 7), {}),
    (aten.take.default, (_r(5, 3), _idx(0, 14, 7, 3, 3)), {}),
    (aten.take.default, (_r(4, 2), torch.randint(0, 8, (5, 3), generator=g)), {}),
    (aten.put.default, (_r(5, 3), _idx(0, 14, 7), _r(3)), {}),
    (aten.put.default, (_r(5, 3), _idx(0, 14, 0), _r(3), True), {}),
    (aten.searchsorted.Tensor, (SORTED, _r(5, 3)), {}),
    (aten.searchsorted.Tensor, (SORTED, _r(5, 3)), {"right": True, "out_int32": True}),
    (aten.searchsorted.Tensor, (torch.sort(_r(5, 4)).values, _r(5, 3)), {}),
    (aten.searchsorted.Tensor, (_r(5, 4), _r(5, 2)), {"sorter": torch.argsort(_r(5, 4))}),
    (aten.bucketize.Tensor, (_r(5, 3), SORTED), {}),
    (aten.bucketize.Tensor, (_r(0, 3), SORTED), {"right": True}),
    (aten.isin.Tensor_Tensor, (torch.randint(0, 9, (5, 3), generator=g),
                               torch.randint(0, 9, (7,), generator=g)), {}),
    (aten.isin.Tensor_Tensor, (torch.randint(0, 9, (5, 3), generator=g),
                               torch.randint(0, 9, (2, 3), generator=g)), {"invert": True}),
    (aten.isin.Tensor_Scalar, (torch.randint(0, 4, (5, 3), generator=g), 2), {}),
    (aten.isin.Scalar_Tensor, (2, torch.randint(0, 4, (5, 3), generator=g)), {}),
]
for _red in ("amax", "amin", "mean", "prod"):
    for _self in (True, False):
        CASES.append((aten.index_reduce.default, (_r(5, 4, 3), 1, _idx(3, 0, 3), _r(5, 3, 3),
                                                  _red), {"include_self": _self}))
    CASES.append((aten.index_reduce.default, (_r(5, 3), 0, _idx(1, 1, 4), _r(3, 3), _red), {}))


def _id(case) -> str:
    op, args, kwargs = case
    shapes = ",".join(str(tuple(a.shape)) for a in args if isinstance(a, torch.Tensor))
    rest = [a for a in args if not isinstance(a, torch.Tensor)]
    return f"{op}{shapes}{rest}{list(kwargs)}"


@pytest.mark.parametrize("mesh_shape", MESHES, ids=str)
@pytest.mark.parametrize("op,args,kwargs", CASES, ids=[_id(c) for c in CASES])
def test_every_strategy_of_the_rule_is_sound(op, args, kwargs, mesh_shape):
    assert check_op(op, args, kwargs, mesh_shape) == []


def _strategies(op, args, kwargs=None) -> set[str]:
    return {repr(s) for s in per_dim_strategies(op_spec(op, args, kwargs or {}, (2,)))[0]}


def test_writes_shard_the_other_dims_and_keep_their_partials():
    s = _strategies(aten.index_copy.default, (_r(4, 4, 2), 1, _idx(0), _r(4, 1, 2)))
    assert {"Strategy(S(0),R,S(0)->S(0))", "Strategy(S(2),R,S(2)->S(2))",
            "Strategy(P(max),R,P(max)->P(max))"} <= s and not any("S(1)" in x for x in s)
    # a fill of 2.0 on every rank would add up to 2n under P(sum)
    s = _strategies(aten.index_fill.int_Scalar, (_r(4, 2), 1, _idx(0), 2.0))
    assert "Strategy(P(avg),R->P(avg))" in s and "Strategy(P(sum),R->P(sum))" not in s
    s = _strategies(aten.index_reduce.default, (_r(4, 2), 0, _idx(0), _r(1, 2), "amax"))
    assert "Strategy(P(max),R,P(max)->P(max))" in s and "Strategy(P(sum),R,P(sum)->P(sum))" \
        not in s
    s = _strategies(aten.isin.Tensor_Tensor, (_idx(1, 2, 3, 4), _idx(2, 5)))
    assert {"Strategy(S(0),R->S(0))", "Strategy(R,S(0)->P(max))"} <= s


def test_indexed_writes_and_searches_end_to_end_without_fallback():
    x, src, values = _r(5, 4, 3), _r(5, 2, 3), _r(7, 2)
    index = _idx(3, 1)

    def body(mesh):
        a = distribute_tensor(x, mesh, [Shard(0), Shard(2)]).requires_grad_()
        s = distribute_tensor(src, mesh, [Shard(0), Shard(2)]).requires_grad_()
        v = distribute_tensor(values, mesh, [Shard(0), Shard(1)])
        with fallback_policy("error"):
            y = a.index_copy(1, index, s).index_fill(1, _idx(0), 0.5)
            assert y.placements == (Shard(0), Shard(2))
            pos = torch.searchsorted(SORTED, v)
            assert pos.placements == (Shard(0), Shard(1))
            rows = distribute_tensor(values, mesh, [Shard(0), Replicate()])
            hit = torch.isin(rows, distribute_tensor(values[:3], mesh, [Replicate(), Shard(0)]))
            assert hit.placements == (Shard(0), Partial("max"))
            (y * y).sum().backward()
        return (y.full_tensor(), pos.full_tensor(), hit.full_tensor(), a.grad.full_tensor(),
                s.grad.full_tensor())

    y, pos, hit, ga, gs = _world((2, 2), body)[0]
    ra, rs = x.clone().requires_grad_(), src.clone().requires_grad_()
    ry = ra.index_copy(1, index, rs).index_fill(1, _idx(0), 0.5)
    (ry * ry).sum().backward()
    assert torch.allclose(y, ry) and torch.equal(pos, torch.searchsorted(SORTED, values))
    assert torch.equal(hit, torch.isin(values, values[:3]))
    assert torch.allclose(ga, ra.grad) and torch.allclose(gs, rs.grad)
