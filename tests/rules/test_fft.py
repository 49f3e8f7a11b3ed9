"""FFT rules: every strategy sound (r2c, c2r, c2c; several transformed dims; uneven and
tiny shapes); end to end on simpg against one device."""

from __future__ import annotations

import torch
from tests.support.cases import offered, soundness_test
from tests.support.mesh_world import run_on_mesh as _world

from dtensor import Shard, distribute_tensor, fallback_policy

aten = torch.ops.aten
_gen = torch.Generator().manual_seed(23)


def _r(*shape: int, dtype=torch.float64) -> torch.Tensor:
    return torch.randn(shape, generator=_gen, dtype=dtype)


C = torch.complex128
CASES = [
    (aten._fft_r2c.default, (_r(5, 8), [1], 0, True)),
    (aten._fft_r2c.default, (_r(4, 3, 6), [0, 2], 2, False)),
    (aten._fft_r2c.default, (_r(1, 2, 5), [2], 1, True)),
    (aten._fft_c2r.default, (_r(5, 5, dtype=C), [1], 0, 8)),
    (aten._fft_c2r.default, (_r(3, 4, 3, dtype=C), [1, 2], 2, 4)),
    (aten._fft_c2c.default, (_r(5, 6, dtype=C), [1], 0, True)),
    (aten._fft_c2c.default, (_r(3, 4, 5, dtype=C), [0], 1, False)),
    (aten._fft_c2c.default, (_r(2, 3, 4, dtype=C), [0, 1, 2], 2, True)),
]


test_every_strategy_is_sound = soundness_test(CASES, rtol=1e-9, atol=1e-9)


def test_only_untransformed_dims_shard_and_no_empty_piece():
    s = offered(aten._fft_c2c.default, (_r(4, 3, 6, dtype=C), [0, 2], 0, True))
    assert {"Strategy(S(1)->S(1))", "Strategy(P(sum)->P(sum))"} <= s
    assert not any("S(0)" in t or "S(2)" in t for t in s)
    # 3 rows over 4 ranks: one rank would transform an empty tensor, which MKL rejects
    s = offered(aten._fft_r2c.default, (_r(3, 8), [1], 0, True), mesh_shape=(4,))
    assert "Strategy(S(0)->S(0))" not in s


def test_fft_round_trip_end_to_end_forward_and_backward():
    x = _r(6, 8)

    def body(mesh):
        a = distribute_tensor(x, mesh, [Shard(0)]).requires_grad_()
        with fallback_policy("error"):
            f = torch.fft.rfft(a, dim=1)
            y = torch.fft.irfft(f * 2, n=8, dim=1)
            assert f.placements == (Shard(0),) and y.placements == (Shard(0),)
            y.sum().backward()
        return y.full_tensor(), a.grad.full_tensor()

    y, g = _world((2,), body)[0]
    ref = x.clone().requires_grad_()
    rf = torch.fft.rfft(ref, dim=1)
    ry = torch.fft.irfft(rf * 2, n=8, dim=1)
    ry.sum().backward()
    assert torch.allclose(y, ry) and torch.allclose(g, ref.grad)
