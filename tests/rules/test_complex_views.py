"""view_as_real / view_as_complex / complex / polar rules: every strategy sound; end to end."""

from __future__ import annotations

import torch
from tests.support.cases import soundness_test
from tests.support.mesh_world import run_on_mesh as _world

from dtensor import Shard, distribute_tensor, fallback_policy

aten = torch.ops.aten
_gen = torch.Generator().manual_seed(29)


def _r(*shape: int, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(shape, generator=_gen, dtype=dtype)


CASES = [
    (aten.view_as_real.default, (_r(5, 3, dtype=torch.complex64),)),
    (aten.view_as_real.default, (_r(0, 2, dtype=torch.complex64),)),
    (aten.view_as_complex.default, (_r(5, 3, 2),)),
    (aten.view_as_complex.default, (_r(1, 4, 2),)),
    (aten.complex.default, (_r(5, 3), _r(5, 3))),
    (aten.complex.default, (_r(5, 1), _r(3,))),
    (aten.polar.default, (_r(4, 3).abs(), _r(3,))),
    (aten._conj.default, (_r(5, 3, dtype=torch.complex64),)),
    (aten._conj_physical.default, (_r(3, 2, dtype=torch.complex64),)),
    (aten._neg_view.default, (_r(3, 4, dtype=torch.complex64),)),
]


test_every_strategy_is_sound = soundness_test(CASES)


def test_complex_views_end_to_end_forward_and_backward():
    x = _r(5, 3, 2)

    def body(mesh):
        a = distribute_tensor(x, mesh, [Shard(0)]).requires_grad_()
        with fallback_policy("error"):
            z = torch.view_as_complex(a)
            y = torch.view_as_real(z * z) * a  # the backward of z * z conjugates z
            assert y.placements == (Shard(0),)
            y.sum().backward()
        return y.full_tensor(), a.grad.full_tensor()

    y, g = _world((2,), body)[0]
    ref = x.clone().requires_grad_()
    rz = torch.view_as_complex(ref)
    ry = torch.view_as_real(rz * rz) * ref
    ry.sum().backward()
    assert torch.allclose(y, ry) and torch.allclose(g, ref.grad)
