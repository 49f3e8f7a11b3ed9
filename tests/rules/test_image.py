"""Image rules (dtensor/ops/image.py): every strategy of the rearrangements and of grid
sampling and its backward sound (batched and unbatched, uneven and empty batches, with and
without grad_input); batch, channel and output-point sharding of the backward offered; end to
end on simpg against one device."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from tests.support.cases import offered, soundness_test
from tests.support.mesh_world import run_on_mesh as _world

from dtensor import Shard, distribute_tensor, fallback_policy

aten = torch.ops.aten
_gen = torch.Generator().manual_seed(41)


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=_gen, dtype=torch.float64)  # exact sums: tight tolerance


CASES = [
    (aten.pixel_shuffle.default, (_r(5, 8, 2, 3), 2)),
    (aten.pixel_shuffle.default, (_r(3, 2, 4, 1, 1), 2)),
    (aten.pixel_unshuffle.default, (_r(0, 2, 4, 4), 2)),
    # pieces empty on most ranks: Note [empty pieces take the output's shape]
    (aten.pixel_unshuffle.default, (_r(1, 1, 6, 6), 3)),
    (aten.channel_shuffle.default, (_r(5, 6, 3, 2), 3)),
    (aten.im2col.default, (_r(5, 2, 4, 3), [2, 2], [1, 1], [1, 0], [1, 1])),
    (aten.im2col.default, (_r(3, 4, 4), [3, 3], [1, 1], [1, 1], [2, 2])),
    (aten.col2im.default, (_r(5, 8, 9), [4, 4], [2, 2], [1, 1], [0, 0], [1, 1])),
    (aten.grid_sampler_2d.default, (_r(5, 3, 4, 4), _r(5, 2, 3, 2), 0, 0, False)),
    (aten.grid_sampler_2d.default, (_r(2, 5, 3, 3), _r(2, 4, 4, 2), 1, 1, True)),
    (aten.grid_sampler_3d.default, (_r(3, 2, 3, 3, 3), _r(3, 2, 2, 2, 3), 0, 0, False)),
]


def _case2(n, c, h, w, ho, wo, mode=0, pad=0, align=False, mask=(True, True)):
    return (aten.grid_sampler_2d_backward.default,
            (_r(n, c, ho, wo), _r(n, c, h, w), _r(n, ho, wo, 2), mode, pad, align, list(mask)))


def _case3(n, c, d, h, w, do, ho, wo, mode=0, pad=0, align=False, mask=(True, True)):
    return (aten.grid_sampler_3d_backward.default,
            (_r(n, c, do, ho, wo), _r(n, c, d, h, w), _r(n, do, ho, wo, 3), mode, pad, align,
             list(mask)))


# the backward of grid sampling (Note [grid sampling's gradients])
CASES += [
    _case2(2, 3, 5, 4, 6, 7),
    _case2(3, 5, 4, 4, 3, 2, mode=1, pad=1, align=True),
    _case2(5, 2, 3, 3, 1, 5, mode=2, pad=2),  # bicubic, reflection
    _case2(3, 3, 4, 5, 5, 3, mask=(False, True)),
    _case2(1, 1, 3, 3, 2, 2),
    _case2(0, 2, 3, 3, 2, 2),
    _case3(2, 3, 4, 3, 3, 3, 2, 5),
    _case3(3, 2, 2, 3, 2, 2, 3, 1, mode=1, pad=1, align=True, mask=(False, True)),
]
test_every_strategy_is_sound = soundness_test(CASES, rtol=1e-9, atol=1e-9)


def test_pixel_shuffle_and_grid_sample_end_to_end():
    x, grid = _r(5, 8, 3, 3), _r(5, 4, 4, 2).clamp(-1, 1)

    def body(mesh):
        a = distribute_tensor(x, mesh, [Shard(0)]).requires_grad_()
        g = distribute_tensor(grid, mesh, [Shard(0)])
        with fallback_policy("error"):
            y = F.grid_sample(F.pixel_shuffle(a, 2), g, align_corners=False)
            assert y.placements == (Shard(0),)
            (F.pixel_shuffle(a, 2) ** 2).sum().backward()
        return y.full_tensor(), a.grad.full_tensor()

    y, ga = _world((3,), body)[0]
    ref = x.clone().requires_grad_()
    ry = F.grid_sample(F.pixel_shuffle(ref, 2), grid, align_corners=False)
    (F.pixel_shuffle(ref, 2) ** 2).sum().backward()
    assert torch.allclose(y, ry) and torch.allclose(ga, ref.grad)


def test_batch_channels_and_output_points_are_offered():
    found = offered(*_case2(2, 3, 5, 4, 6, 7))
    assert {"Strategy(S(0),S(0),S(0)->S(0),S(0))", "Strategy(S(1),S(1),R->S(1),P(sum))",
            "Strategy(S(2),R,S(1)->P(sum),S(1))", "Strategy(S(3),R,S(2)->P(sum),S(2))",
            "Strategy(P(sum),R,R->P(sum),P(sum))", "Strategy(R,P(sum),R->R,P(sum))"} <= found
    found = offered(*_case2(2, 3, 5, 4, 6, 7, mask=(False, True)))
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

    gx, gg = _world((2,), body)[0]
    rx, rg = x.clone().requires_grad_(), grid.clone().requires_grad_()
    ry = torch.nn.functional.grid_sample(rx, rg, align_corners=False)
    (ry * ry).sum().backward()
    assert torch.allclose(gx, rx.grad, atol=1e-4) and torch.allclose(gg, rg.grad, atol=1e-4)
