"""Upsampling rules: every strategy sound (forward, and backward through the local function
that hands each rank its own input_size); end to end on simpg against one device."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from tests.support.cases import offered, soundness_test
from tests.support.mesh_world import run_on_mesh as _world

from dtensor import Shard, distribute_tensor, fallback_policy

aten = torch.ops.aten
_gen = torch.Generator().manual_seed(13)


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=_gen)


def _pair(name, x, size, *extra):
    """The forward call and its backward on a grad shaped like the output."""
    fwd, bwd = getattr(aten, name).default, getattr(aten, f"{name}_backward").default
    out = fwd(x, size, *extra)
    return [(fwd, (x, size, *extra)), (bwd, (_r(*out.shape), size, list(x.shape), *extra))]


# batch 5 (uneven over 2/3/4 ranks), 4 (even), 0; unbatched (C, ...) forms too
CASES = (_pair("upsample_nearest1d", _r(5, 3, 4), [7])
         + _pair("upsample_nearest2d", _r(4, 3, 3, 2), [6, 5])
         + _pair("upsample_nearest3d", _r(2, 3, 2, 2, 2), [3, 4, 2])
         + _pair("_upsample_nearest_exact1d", _r(0, 3, 4), [9])
         + _pair("_upsample_nearest_exact2d", _r(5, 2, 3, 3), [5, 4])
         + _pair("upsample_linear1d", _r(5, 3, 4), [7], False)
         + _pair("upsample_bilinear2d", _r(5, 4, 3, 3), [6, 5], True)
         + _pair("upsample_bicubic2d", _r(3, 2, 4, 4), [5, 7], False)
         + _pair("upsample_trilinear3d", _r(2, 3, 2, 3, 2), [3, 4, 4], False)
         + _pair("_upsample_bilinear2d_aa", _r(5, 3, 6, 6), [3, 4], False)
         + _pair("_upsample_bicubic2d_aa", _r(1, 2, 4, 4), [6, 3], True))


test_every_strategy_is_sound = soundness_test(CASES)


def test_nearest_keeps_every_partial_interpolation_only_linear_ones():
    x = _r(4, 4, 3, 3)

    near = offered(aten.upsample_nearest2d.default, (x, [6, 6]))
    bil = offered(aten.upsample_bilinear2d.default, (x, [6, 6], False))
    assert {"Strategy(S(1)->S(1))", "Strategy(P(max)->P(max))"} <= near
    assert "Strategy(P(sum)->P(sum))" in bil and "Strategy(P(max)->P(max))" not in bil
    assert not any("S(2)" in s or "S(3)" in s for s in near | bil)


def test_upsampling_end_to_end_forward_and_backward_without_fallback():
    x = _r(5, 4, 3, 4)

    def body(mesh):
        a = distribute_tensor(x, mesh, [Shard(0), Shard(1)]).requires_grad_()
        with fallback_policy("error"):
            y = (F.interpolate(a, scale_factor=2, mode="nearest")
                 + F.interpolate(a, size=(6, 8), mode="bilinear"))
            assert y.placements == (Shard(0), Shard(1))
            (y * y).sum().backward()
        return y.full_tensor(), a.grad.full_tensor()

    y, g = _world((2, 2), body)[0]
    ref = x.clone().requires_grad_()
    ry = (F.interpolate(ref, scale_factor=2, mode="nearest")
          + F.interpolate(ref, size=(6, 8), mode="bilinear"))
    (ry * ry).sum().backward()
    assert torch.allclose(y, ry, atol=1e-6) and torch.allclose(g, ref.grad, atol=1e-5)
