"""Legacy aten.norm rules: every strategy sound; pairwise_distance end to end on simpg."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from tests.support.cases import offered, soundness_test
from tests.support.mesh_world import run_on_mesh as _world

from dtensor import Shard, distribute_tensor, fallback_policy

aten = torch.ops.aten
_gen = torch.Generator().manual_seed(37)


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=_gen, dtype=torch.float64)


U = _r(5, 3)
CASES = [
    (aten.norm.Scalar, (U,), {}),
    (aten.norm.Scalar, (U, 1), {}),
    (aten.norm.ScalarOpt_dim, (U, 2, [1]), {}),
    (aten.norm.ScalarOpt_dim, (U, 1, [0], True), {}),
    (aten.norm.ScalarOpt_dim, (_r(4, 3, 2), math.inf, [0, 2]), {}),
    (aten.norm.ScalarOpt_dim, (_r(0, 3), 1, [0]), {}),
    (aten.norm.ScalarOpt_dim_dtype, (_r(5, 2), 3, [0], False), {"dtype": torch.float64}),
]


test_every_strategy_is_sound = soundness_test(CASES, rtol=1e-9, atol=1e-9)


def test_partials_only_for_p_1_and_inf():
    def s(p):
        return offered(aten.norm.ScalarOpt_dim, (U, p, [0]))

    assert "Strategy(S(0)->P(sum))" in s(1) and "Strategy(S(0)->P(max))" in s(math.inf)
    assert not any("P(" in t for t in s(2)) and "Strategy(S(1)->S(0))" in s(2)


def test_pairwise_distance_end_to_end_without_fallback():
    a, b = _r(5, 4), _r(5, 4)

    def body(mesh):
        da = distribute_tensor(a, mesh, [Shard(0)]).requires_grad_()
        db = distribute_tensor(b, mesh, [Shard(0)])
        with fallback_policy("error"):
            d = F.pairwise_distance(da, db)
            assert d.placements == (Shard(0),)
            d.sum().backward()
        return d.full_tensor(), da.grad.full_tensor()

    d, g = _world((2,), body)[0]
    ref = a.clone().requires_grad_()
    rd = F.pairwise_distance(ref, b)
    rd.sum().backward()
    assert torch.allclose(d, rd) and torch.allclose(g, ref.grad)
