"""grid_sampler_2d/3d backward (dtensor/ops/image_backward.py): every strategy sound over the
meshes, uneven and empty pieces included, with and without grad_input; batch, channel and
output-point sharding offered; end to end on simpg."""

from __future__ import annotations

import pytest
import torch
from tests.support.mesh_world import run_on_mesh

from dtensor import Shard, distribute_tensor, fallback_policy
from dtensor.ops.propagate import per_dim_strategies
from dtensor.ops.soundness import check_op, op_spec

aten = torch.ops.aten
MESHES = [(2,), (3,), (2, 2), (4,)]
g = torch.Generator().manual_seed(3)


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=g, dtype=torch.float64)  # exact sums: tight tolerance


def _case2(n, c, h, w, ho, wo, mode=0, pad=0, align=False, mask=(True, True)):
    return (aten.grid_sampler_2d_backward.default,
            (_r(n, c, ho, wo), _r(n, c, h, w), _r(n, ho, wo, 2), mode, pad, align, list(mask)))


def _case3(n, c, d, h, w, do, ho, wo, mode=0, pad=0, align=False, mask=(True, True)):
    return (aten.grid_sampler_3d_backward.default,
            (_r(n, c, do, ho, wo), _r(n, c, d, h, w), _r(n, do, ho, wo, 3), mode, pad, align,
             list(mask)))


CASES = [
    _case2(2, 3, 5, 4, 6, 7),
    _case2(3, 5, 4, 4, 3, 2, mode=1, pad=1, align=True),
    _case2(5, 2, 3, 3, 1, 5, mode=2, pad=2),  # bicubic, reflection
    _case2(3, 3, 4, 5, 5, 3, mask=(False, True)),
    _case2(1, 1, 3, 3, 2, 2),
    _case2(0, 2, 3, 3, 2, 2),
    _case3(2, 3, 4, 3, 3, 3, 2, 5),
    _case3(3, 2, 2, 3, 2, 2, 3, 1, mode=1, pad=1, align=True, mask=(False, True)),
]


@pytest.mark.parametrize("mesh_shape", MESHES, ids=str)
@pytest.mark.parametrize("op,args", CASES,
                         ids=[f"{op}{tuple(a[0].shape)},{a[3:]}" for op, a in CASES])
def test_every_strategy_of_the_rule_is_sound(op, args, mesh_shape):
    assert check_op(op, args, {}, mesh_shape, rtol=1e-9, atol=1e-9) == []


def test_batch_channels_and_output_points_are_offered():
    op, args = _case2(2, 3, 5, 4, 6, 7)
    spec = op_spec(op, args, {}, (2,))
    found = {repr(s) for s in per_dim_strategies(spec)[0]}
    assert {"Strategy(S(0),S(0),S(0)->S(0),S(0))", "Strategy(S(1),S(1),R->S(1),P(sum))",
            "Strategy(S(2),R,S(1)->P(sum),S(1))", "Strategy(S(3),R,S(2)->P(sum),S(2))",
            "Strategy(P(sum),R,R->P(sum),P(sum))", "Strategy(R,P(sum),R->R,P(sum))"} <= found
    op, args = _case2(2, 3, 5, 4, 6, 7, mask=(False, True))
    found = {repr(s) for s in per_dim_strategies(op_spec(op, args, {}, (2,)))[0]}
    assert "Strategy(S(0),S(0),S(0)->S(0))" in found


def test_grid_sample_end_to_end_batch_sharded_backward_without_fallback():
    x, grid = _r(3, 2, 5, 4), _r(3, 4, 6, 2).tanh()

    def body(mesh):
        dx = distribute_tensor(x, mesh, [Shard(0)]).requires_grad_()
        dg = distribute_tensor(grid, mesh, [Shard(0)]).requires_grad_()
        with fallback_policy("error"):
            y = torch.nn.functional.grid_sample(dx, dg, align_corners=False)
            (y * y).sum().backward()
            assert dx.grad.placements == (Shard(0),) and dg.grad.placements == (Shard(0),)
        return dx.grad.full_tensor(), dg.grad.full_tensor()

    gx, gg = run_on_mesh((2,), body)[0]
    rx, rg = x.clone().requires_grad_(), grid.clone().requires_grad_()
    ry = torch.nn.functional.grid_sample(rx, rg, align_corners=False)
    (ry * ry).sum().backward()
    assert torch.allclose(gx, rx.grad, atol=1e-4) and torch.allclose(gg, rg.grad, atol=1e-4)
