"""pdist forward and backward (dtensor/ops/distances.py): every strategy sound on even,
uneven and empty shapes over the meshes; the feature dim offered exactly for p = 0, 1, inf;
end to end on simpg."""

from __future__ import annotations

import math

import torch
from tests.support.cases import soundness_test, strategies
from tests.support.mesh_world import run_on_mesh

from dtensor import Partial, Shard, distribute_tensor, fallback_policy

aten = torch.ops.aten
PS = [0.0, 1.0, 2.0, 3.5, math.inf]
g = torch.Generator().manual_seed(5)


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=g)


def _backward(n: int, m: int, p: float) -> tuple:
    x = _r(n, m)
    d = aten._pdist_forward(x, p)
    return (_r(*d.shape), x, p, d)


CASES = ([(aten._pdist_forward.default, (_r(5, 3), p)) for p in PS]
         + [(aten._pdist_forward.default, (_r(4, 1), 1.0)),
            (aten._pdist_forward.default, (_r(5, 0), math.inf)),
            (aten._pdist_forward.default, (_r(1, 3), 0.0))]
         + [(aten._pdist_backward.default, _backward(5, 3, p)) for p in PS]
         + [(aten._pdist_backward.default, _backward(4, 2, 1.0)),
            (aten._pdist_backward.default, _backward(3, 0, 2.0))])


test_every_strategy_is_sound = soundness_test(CASES)


def _feature_outputs(p: float) -> list[str]:
    return [str(s.outputs[0]) for s in strategies(aten._pdist_forward.default, (_r(5, 3), p))
            if s.inputs[0] == Shard(1)]


def test_features_shard_where_the_norm_is_a_sum_or_a_max():
    assert _feature_outputs(0.0) == ["P(sum)"] and _feature_outputs(1.0) == ["P(sum)"]
    assert _feature_outputs(math.inf) == ["P(max)"]
    assert _feature_outputs(2.0) == [] and _feature_outputs(3.5) == []
    assert any(s.inputs[1] == Shard(1) and s.outputs == (Shard(1),)
               for s in strategies(aten._pdist_backward.default, _backward(5, 3, 2.0)))


def test_pdist_end_to_end_feature_sharded_forward_and_backward_without_fallback():
    x = _r(6, 5)

    def body(mesh):
        dx = distribute_tensor(x, mesh, [Shard(1)]).requires_grad_()
        with fallback_policy("error"):
            d = torch.nn.functional.pdist(dx, p=1.0)
            assert d.placements == (Partial("sum"),)
            (d * d).sum().backward()
        return d.full_tensor(), dx.grad.full_tensor()

    d, gx = run_on_mesh((2,), body)[0]
    rx = x.clone().requires_grad_()
    rd = torch.nn.functional.pdist(rx, p=1.0)
    (rd * rd).sum().backward()
    assert torch.allclose(d, rd, atol=1e-5) and torch.allclose(gx, rx.grad, atol=1e-4)
