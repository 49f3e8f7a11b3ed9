"""Order statistics (dtensor/ops/selection.py) and more reductions (dtensor/ops/
reductions_more.py): every strategy sound on even, uneven, tiny and empty shapes over the
meshes; the sharded strategies offered; end to end on simpg."""

from __future__ import annotations

import dataclasses
import math

import torch
from tests.support.cases import soundness_test, strategies
from tests.support.mesh_world import run_on_mesh as _world

from dtensor import Partial, Replicate, Shard, distribute_tensor, fallback_policy

aten = torch.ops.aten
g = torch.Generator().manual_seed(11)


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=g)


def _ints(*shape: int, hi: int = 3) -> torch.Tensor:
    return torch.randint(0, hi, shape, generator=g)


def _vsr_cases() -> list:
    cases = []
    for x, dim, keepdim in [(_r(5, 3, 4), 1, False), (_r(5, 3, 4), 2, True), (_r(3, 0, 2), 0,
                                                                                False)]:
        _, idx = aten.kthvalue(x, 1, dim, keepdim) if x.numel() else aten.mode(x, dim, keepdim)
        cases.append((aten.value_selecting_reduction_backward.default,
                      (_r(*idx.shape), dim, idx, list(x.shape), keepdim), {}))
    return cases


CASES = [
    (aten.median.dim, (_r(5, 3, 4), 1), {}),
    (aten.median.dim, (_r(5, 3), 0, True), {}),
    (aten.nanmedian.dim, (_r(3, 0, 2), -1), {}),
    (aten.nanmedian.dim, (torch.tensor([[1.0, float("nan")], [2.0, 3.0], [0.5, 1.0]]), 1), {}),
    (aten.kthvalue.default, (_r(5, 3, 4), 2, 1), {}),
    (aten.kthvalue.default, (_r(7, 2), 3, 0, True), {}),
    (aten.mode.default, (_ints(5, 3, 4).float(),), {}),
    (aten.mode.default, (_ints(6, 5), 0), {}),
    (aten.median.default, (_r(5, 3),), {}),
    (aten.nanmedian.default, (_r(4),), {}),
    (aten.aminmax.default, (_r(5, 3, 4),), {}),
    (aten.aminmax.default, (_r(5, 3, 4),), {"dim": 1, "keepdim": True}),
    (aten.aminmax.default, (_r(5, 3),), {"dim": 0}),
    (aten.aminmax.default, (_ints(8, 2, hi=100),), {"dim": 0}),
    (aten.count_nonzero.default, (_ints(5, 3, hi=2).float(),), {}),
    (aten.count_nonzero.default, (_ints(5, 3, hi=2), 1), {}),
    (aten.count_nonzero.dim_IntList, (_ints(5, 3, 2, hi=2).float(), [0, 2]), {}),
    (aten.trace.default, (_r(5, 3),), {}),
    (aten.trace.default, (_r(7, 7),), {}),
    (aten.trace.default, (torch.arange(12).view(3, 4),), {}),
    (aten.trace.default, (_r(0, 3),), {}),
    (aten.dist.default, (_r(5, 3), _r(3)), {}),
    (aten.dist.default, (_r(5, 3), _r(5, 3), 1), {}),
    (aten.dist.default, (_r(5, 3), _r(5, 1), float("inf")), {}),
    (aten.dist.default, (_r(5, 3), _r(5, 3), -float("inf")), {}),
    (aten.dist.default, (_r(5, 3), _r(5, 3), 0), {}),
    (aten.histc.default, (_r(5, 3), 7, -1.0, 1.0), {}),
    (aten.histc.default, (_r(6), 4, 0.0, 2.0), {}),
    (aten.histc.default, (_r(5, 3),), {}),
    (aten.renorm.default, (_r(5, 3, 4), 2, 1, 0.5), {}),
    (aten.renorm.default, (_r(5, 3), 1, 0, 1.0), {}),
    (aten.equal.default, (_r(5, 3), _r(5, 3)), {}),
    (aten.allclose.default, (_r(5, 3), _r(5, 3)), {"atol": 10.0}),
] + _vsr_cases()


test_every_strategy_is_sound = soundness_test(CASES)


def _strategies(op, args, kwargs=None, mesh_shape=(2,)) -> set[str]:
    """The reprs of ``strategies``, whatever local function each names."""
    return {repr(dataclasses.replace(s, local=None))
            for s in strategies(op, args, kwargs, mesh_shape)}


def test_the_ranked_dim_stays_whole_and_the_others_shard():
    s = _strategies(aten.kthvalue.default, (_r(5, 3, 4), 2, 1))
    assert {"Strategy(S(0)->S(0),S(0))", "Strategy(S(2)->S(1),S(1))"} <= s
    assert not any("S(1)->" in x or "P(" in x for x in s)


def test_reduced_dims_shard_into_partials():
    assert "Strategy(S(1)->P(min),P(max))" in _strategies(aten.aminmax.default, (_r(4, 6),))
    # an empty piece has no min: 3 rows over 4 ranks
    assert not any("P(" in x for x in _strategies(aten.aminmax.default, (_r(3, 1),),
                                                  mesh_shape=(4,)))
    assert "Strategy(S(0)->P(sum))" in _strategies(aten.count_nonzero.default, (_r(4, 6),))
    assert {"Strategy(S(0)->P(sum))", "Strategy(S(1)->P(sum))"} <= _strategies(
        aten.trace.default, (_r(4, 6),))
    assert "Strategy(S(1),S(1)->P(max))" in _strategies(aten.dist.default,
                                                        (_r(4, 6), _r(4, 6), math.inf))
    assert not any("S(" in x for x in _strategies(aten.dist.default, (_r(4, 6), _r(4, 6))))
    assert "Strategy(S(0)->P(sum))" in _strategies(aten.histc.default, (_r(4, 6), 5, 0.0, 1.0))
    assert not any("P(" in x for x in _strategies(aten.histc.default, (_r(4, 6),)))


def test_selection_and_reductions_end_to_end_without_fallback():
    x = _r(5, 7)

    def body(mesh):
        a = distribute_tensor(x, mesh, [Shard(0), Shard(1)]).requires_grad_()
        with fallback_policy("error"):
            med, idx = torch.median(a, dim=1)
            assert Partial() not in med.placements  # rows ranked whole, the output sharded
            assert med.placements[0] == Shard(0)
            lo, hi = torch.aminmax(a)
            assert (lo.placements, hi.placements) == ((Partial("min"),) * 2,
                                                      (Partial("max"),) * 2)
            tr = torch.trace(a)
            assert tr.placements == (Partial(),) * 2
            (med.sum() + tr).backward()
            # item() twice: the second call must not take the tensor-wrapping fast path
            one = distribute_tensor(torch.tensor(2.0), mesh, [Replicate(), Replicate()])
            assert one.item() == one.item() == 2.0
        return (med.full_tensor(), idx.full_tensor(), lo.full_tensor(), hi.full_tensor(),
                tr.full_tensor(), a.grad.full_tensor())

    got = _world((2, 2), body)[0]
    ref = x.clone().requires_grad_()
    r_med, r_idx = torch.median(ref, dim=1)
    r_tr = torch.trace(ref)
    (r_med.sum() + r_tr).backward()
    want = (r_med, r_idx, x.min(), x.max(), r_tr, ref.grad)
    for a, b in zip(got, want):
        assert torch.allclose(a, b.detach(), atol=1e-6)
