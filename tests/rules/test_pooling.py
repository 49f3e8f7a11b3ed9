"""Pooling rules: every strategy sound (forward and backward ops, batched and unbatched, even,
uneven and empty batches); end to end on simpg against one device."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from tests.support.cases import offered, soundness_test
from tests.support.mesh_world import run_on_mesh as _world

from dtensor import Shard, distribute_tensor, fallback_policy

aten = torch.ops.aten
_gen = torch.Generator().manual_seed(11)


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=_gen)


def _max_pool(k, x, *args):
    fwd = getattr(aten, f"max_pool{k}d_with_indices").default
    bwd = getattr(aten, f"max_pool{k}d_with_indices_backward").default
    out, idx = fwd(x, *args)
    kernel, stride, pad = args
    return [(fwd, (x, *args)),
            (bwd, (_r(*out.shape), x, kernel, stride, pad, [1] * k, False, idx))]


def _avg_pool(k, x, kernel):
    fwd, bwd = getattr(aten, f"avg_pool{k}d").default, getattr(aten, f"avg_pool{k}d_backward")
    out = fwd(x, kernel)
    return [(fwd, (x, kernel)),
            (bwd.default, (_r(*out.shape), x, kernel, kernel, [0] * k, False, True, None))]


def _adaptive(k, x, size):
    avg = getattr(aten, f"_adaptive_avg_pool{k}d")
    mx = getattr(aten, f"adaptive_max_pool{k}d")
    out, idx = mx(x, size)
    return [(avg.default, (x, size)),
            (getattr(aten, f"_adaptive_avg_pool{k}d_backward").default, (_r(*out.shape), x)),
            (mx.default, (x, size)),
            (getattr(aten, f"adaptive_max_pool{k}d_backward").default, (_r(*out.shape), x, idx))]


def _unpool(x):
    out, idx = aten.max_pool2d_with_indices(x, [2, 2], [2, 2])
    return [(aten.max_unpool2d.default, (out, idx, list(x.shape[-2:])))]


# batch 4 (even), 5 (uneven over 3/4 ranks), 1 and 0; channels 3; unbatched (C, H, W)
CASES = (_max_pool(2, _r(5, 3, 6, 5), [2, 2], [2, 1], [1, 0])
         + _max_pool(2, _r(3, 4, 4), [3, 3], [1, 1], [1, 1])
         + _max_pool(2, _r(0, 2, 4, 4), [2, 2], [2, 2], [0, 0])
         + _max_pool(3, _r(4, 3, 4, 4, 3), [2, 2, 2], [2, 2, 1], [0, 1, 0])
         + _avg_pool(2, _r(5, 3, 6, 4), [2, 2]) + _avg_pool(2, _r(1, 2, 4, 4), [3, 3])
         + _avg_pool(3, _r(2, 5, 4, 4, 2), [2, 2, 2])
         + _adaptive(2, _r(5, 3, 7, 5), [3, 2]) + _adaptive(2, _r(3, 6, 4), [4, 3])
         + _adaptive(3, _r(2, 3, 4, 5, 3), [2, 2, 2])
         + [(aten._adaptive_avg_pool2d.default, (_r(0, 3, 4, 4), [2, 2]))]
         + _unpool(_r(5, 3, 4, 4)) + _unpool(_r(2, 4, 4)))


test_every_strategy_is_sound = soundness_test(CASES)


def test_batch_and_channel_shard_spatial_dims_do_not():
    x = _r(4, 4, 6, 6)
    s = offered(aten.avg_pool2d.default, (x, [2, 2]), mesh_shape=(4,))
    assert {"Strategy(S(0)->S(0))", "Strategy(S(1)->S(1))", "Strategy(P(sum)->P(sum))"} <= s
    assert not any("S(2)" in t or "S(3)" in t for t in s)
    # 3 channels over 4 ranks leave one rank none, which the kernel rejects
    s = offered(aten.max_pool2d_with_indices.default, (_r(4, 3, 6, 6), [2, 2]), mesh_shape=(4,))
    assert "Strategy(S(0)->S(0),S(0))" in s and "Strategy(S(1)->S(1),S(1))" not in s


def test_pooling_end_to_end_forward_and_backward_without_fallback():
    x = _r(5, 4, 8, 6)

    def body(mesh):
        a = distribute_tensor(x, mesh, [Shard(0), Shard(1)]).requires_grad_()
        with fallback_policy("error"):
            y = F.max_pool2d(a, 2) + F.avg_pool2d(a, 2) + F.adaptive_avg_pool2d(a, (4, 3))
            z = F.max_pool1d(a.flatten(2), 3)  # the 1-d op runs the 2-d one
            assert y.placements == (Shard(0), Shard(1))
            (y.sum() + z.sum()).backward()
        return y.full_tensor(), z.full_tensor(), a.grad.full_tensor()

    y, z, g = _world((2, 2), body)[0]
    ref = x.clone().requires_grad_()
    ry = F.max_pool2d(ref, 2) + F.avg_pool2d(ref, 2) + F.adaptive_avg_pool2d(ref, (4, 3))
    rz = F.max_pool1d(ref.flatten(2), 3)
    (ry.sum() + rz.sum()).backward()
    assert torch.allclose(y, ry) and torch.allclose(z, rz) and torch.allclose(g, ref.grad)
