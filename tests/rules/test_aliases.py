"""The *_copy views, unsafe_split and rsub take their twin's rule: every strategy sound on
even, uneven and empty shapes; end to end on simpg against one device."""

from __future__ import annotations

import torch
from tests.support.cases import soundness_test
from tests.support.mesh_world import run_on_mesh as _world

from dtensor import Shard, distribute_tensor, fallback_policy

aten = torch.ops.aten
_gen = torch.Generator().manual_seed(31)


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=_gen)


X, U = _r(4, 6), _r(5, 3, 2)
CASES = [
    (aten.t_copy.default, (X,), {}),
    (aten.transpose_copy.int, (U, 0, 2), {}),
    (aten.permute_copy.default, (U, [2, 0, 1]), {}),
    (aten.unsqueeze_copy.default, (U, 1), {}),
    (aten.squeeze_copy.dim, (_r(5, 1, 3), 1), {}),
    (aten.squeeze_copy.default, (_r(1, 4, 1),), {}),
    (aten.squeeze_copy.dims, (_r(5, 1, 2), [1, 2]), {}),
    (aten.expand_copy.default, (_r(5, 1), [5, 3]), {}),
    (aten.unbind_copy.int, (U, 1), {}),
    (aten.split_copy.Tensor, (U, 2, 1), {}),
    (aten.split_with_sizes_copy.default, (U, [1, 2], 1), {}),
    (aten.unsafe_split.Tensor, (U, 2, 0), {}),
    (aten.unsafe_split.Tensor, (X, 4, 1), {}),
    (aten.unsafe_split_with_sizes.default, (X, [2, 2], 0), {}),
    (aten.slice_copy.Tensor, (U, 1, 0, 2), {}),
    (aten.select_copy.int, (U, 2, 1), {}),
    (aten.alias_copy.default, (U,), {}),
    (aten.detach_copy.default, (_r(0, 3),), {}),
    (aten.rsub.Tensor, (U, _r(5, 3, 2)), {}),
    (aten.rsub.Tensor, (U, _r(2,)), {"alpha": 3}),
    (aten.rsub.Tensor, (X, torch.tensor(2.0)), {}),
]


test_every_strategy_is_sound = soundness_test(CASES)


def test_unsafe_split_and_rsub_end_to_end_without_fallback():
    x, y = _r(5, 4), _r(5, 4)

    def body(mesh):
        a = distribute_tensor(x, mesh, [Shard(0)]).requires_grad_()
        b = distribute_tensor(y, mesh, [Shard(0)])
        with fallback_policy("error"):
            p, q = torch.unsafe_split(torch.rsub(a, b), 2, dim=1)
            assert p.placements == (Shard(0),) and q.placements == (Shard(0),)
            (p * q).sum().backward()
        return p.full_tensor(), q.full_tensor(), a.grad.full_tensor()

    p, q, g = _world((3,), body)[0]
    ref = x.clone().requires_grad_()
    rp, rq = torch.unsafe_split(torch.rsub(ref, y), 2, dim=1)
    (rp * rq).sum().backward()
    assert torch.equal(p, rp) and torch.equal(q, rq) and torch.allclose(g, ref.grad)
