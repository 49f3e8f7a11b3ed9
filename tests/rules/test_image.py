"""Image-rearrangement rules: every strategy sound (batched and unbatched, uneven and empty
batches); end to end on simpg against one device."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tests.support.mesh_world import run_on_mesh as _world

from dtensor import Shard, distribute_tensor, fallback_policy
from dtensor.ops.soundness import check_op

aten = torch.ops.aten
MESHES = [(2,), (3,), (2, 2), (4,)]
_gen = torch.Generator().manual_seed(41)


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=_gen, dtype=torch.float64)


CASES = [
    (aten.pixel_shuffle.default, (_r(5, 8, 2, 3), 2)),
    (aten.pixel_shuffle.default, (_r(3, 2, 4, 1, 1), 2)),
    (aten.pixel_unshuffle.default, (_r(0, 2, 4, 4), 2)),
    (aten.pixel_unshuffle.default, (_r(1, 1, 6, 6), 3)),  # Note [empty pieces take the o.. shape]
    (aten.channel_shuffle.default, (_r(5, 6, 3, 2), 3)),
    (aten.im2col.default, (_r(5, 2, 4, 3), [2, 2], [1, 1], [1, 0], [1, 1])),
    (aten.im2col.default, (_r(3, 4, 4), [3, 3], [1, 1], [1, 1], [2, 2])),
    (aten.col2im.default, (_r(5, 8, 9), [4, 4], [2, 2], [1, 1], [0, 0], [1, 1])),
    (aten.grid_sampler_2d.default, (_r(5, 3, 4, 4), _r(5, 2, 3, 2), 0, 0, False)),
    (aten.grid_sampler_2d.default, (_r(2, 5, 3, 3), _r(2, 4, 4, 2), 1, 1, True)),
    (aten.grid_sampler_3d.default, (_r(3, 2, 3, 3, 3), _r(3, 2, 2, 2, 3), 0, 0, False)),
]


@pytest.mark.parametrize("mesh_shape", MESHES, ids=str)
@pytest.mark.parametrize("op,args", CASES,
                         ids=[f"{op}{tuple(args[0].shape)}" for op, args in CASES])
def test_every_strategy_of_the_rule_is_sound(op, args, mesh_shape):
    assert check_op(op, args, {}, mesh_shape, rtol=1e-9, atol=1e-9) == []


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
