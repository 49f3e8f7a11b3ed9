"""Padding rules: every strategy sound on even, uneven, tiny and empty shapes; end to end."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from tests.support.cases import offered, soundness_test
from tests.support.mesh_world import run_on_mesh as _world

from dtensor import Shard, distribute_tensor, fallback_policy

aten = torch.ops.aten
_gen = torch.Generator().manual_seed(5)


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=_gen)


def _bwd(fwd, x, pad):
    """(backward op, args): grad_out shaped like the padded output."""
    out = fwd(x, pad)
    name = str(fwd).split(".")[-2]
    return getattr(aten, f"{name}_backward").default, (_r(*out.shape), x, pad)


# shapes even over 2/4 ranks (4, ...), uneven over 3/4 (5, 3), tiny (1, 2) and empty batches
CASES = [
    (aten.constant_pad_nd.default, (_r(4, 6), [1, 2]), {}),
    (aten.constant_pad_nd.default, (_r(5, 3, 2), [1, 1, 0, 0, -1, 2]), {}),
    (aten.constant_pad_nd.default, (_r(1, 2, 3), [0, 0, 2, 1], 1.5), {}),
    (aten.constant_pad_nd.default, (_r(0, 3), [2, 2]), {}),
    (aten.constant_pad_nd.default, (torch.arange(15).view(5, 3), [1, 0], 7), {}),
    (aten.reflection_pad1d.default, (_r(5, 3, 4), [2, 1]), {}),
    (aten.reflection_pad1d.default, (_r(3, 4), [1, 3]), {}),
    (aten.reflection_pad1d.default, (_r(0, 2, 4), [1, 1]), {}),
    (aten.reflection_pad2d.default, (_r(5, 3, 4, 4), [1, 1, 0, 0]), {}),
    (aten.reflection_pad2d.default, (_r(2, 4, 5), [1, 2, 2, 1]), {}),
    (aten.reflection_pad3d.default, (_r(3, 1, 3, 3, 3), [1, 1, 1, 1, 0, 0]), {}),
    (aten.replication_pad1d.default, (_r(5, 3, 4), [2, 1]), {}),
    (aten.replication_pad2d.default, (_r(5, 2, 3, 4), [1, 1, 2, 0]), {}),
    (aten.replication_pad2d.default, (_r(1, 3, 3), [-1, 1, 0, 0]), {}),
    (aten.replication_pad3d.default, (_r(2, 3, 2, 3, 3), [1, 0, 0, 0, 1, 1]), {}),
]
for _fwd, _x, _pad in [(aten.reflection_pad1d, _r(5, 3, 4), [2, 1]),
                       (aten.reflection_pad2d, _r(3, 2, 4, 4), [1, 1, 0, 0]),
                       (aten.reflection_pad3d, _r(1, 3, 2, 3, 3), [1, 1, 1, 1, 0, 0]),
                       (aten.replication_pad1d, _r(0, 3, 4), [1, 2]),
                       (aten.replication_pad2d, _r(5, 3, 3), [1, 1, 1, 1]),
                       (aten.replication_pad3d, _r(2, 3, 2, 3, 3), [1, 0, 0, 0, 1, 1])]:
    _op, _args = _bwd(_fwd.default, _x, _pad)
    CASES.append((_op, _args, {}))


test_every_strategy_is_sound = soundness_test(CASES)


def test_only_unpadded_dims_shard_and_partials_follow_the_fill_value():
    s = offered(aten.constant_pad_nd.default, (_r(4, 3, 2), [1, 1, 0, 0, 0, 0]))
    assert {"Strategy(S(0)->S(0))", "Strategy(S(1)->S(1))", "Strategy(P(sum)->P(sum))"} <= s
    assert "Strategy(S(2)->S(2))" not in s
    # a nonzero fill would be summed once per rank
    s = offered(aten.constant_pad_nd.default, (_r(4, 3), [1, 1], 2.0))
    assert "Strategy(P(sum)->P(sum))" not in s and "Strategy(P(max)->P(max))" in s
    # the kernel rejects an empty channel piece (3 channels over 4 ranks): batch dim only
    s = offered(aten.reflection_pad1d.default, (_r(4, 3, 5), [1, 1]), mesh_shape=(4,))
    assert "Strategy(S(0)->S(0))" in s and "Strategy(S(1)->S(1))" not in s


def test_padding_end_to_end_forward_and_backward_without_fallback():
    x = _r(5, 4, 6, 4)  # 4 channels: no empty piece even if both mesh dims split them

    def body(mesh):
        a = distribute_tensor(x, mesh, [Shard(0), Shard(1)]).requires_grad_()
        with fallback_policy("error"):
            y = F.pad(a, (1, 2, 2, 1), mode="reflect") + F.pad(a, (1, 2, 2, 1),
                                                                 mode="replicate")
            z = F.pad(a, (1, 0, 0, 0, 0, 0, 1, 1), value=0.5)
            assert y.placements == (Shard(0), Shard(1))
            (y.sum() + (z * z).sum()).backward()
        return y.full_tensor(), z.full_tensor(), a.grad.full_tensor()

    y, z, g = _world((2, 2), body)[0]
    ref = x.clone().requires_grad_()
    ry = F.pad(ref, (1, 2, 2, 1), mode="reflect") + F.pad(ref, (1, 2, 2, 1), mode="replicate")
    rz = F.pad(ref, (1, 0, 0, 0, 0, 0, 1, 1), value=0.5)
    (ry.sum() + (rz * rz).sum()).backward()
    assert torch.allclose(y, ry) and torch.allclose(z, rz) and torch.allclose(g, ref.grad)
