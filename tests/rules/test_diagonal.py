"""Diagonal-family rules: every strategy sound (offsets, negative and swapped dims, uneven
and empty shapes); end to end on simpg against one device."""

from __future__ import annotations

import torch
from tests.support.cases import offered, soundness_test
from tests.support.mesh_world import run_on_mesh as _world

from dtensor import Shard, distribute_tensor, fallback_policy

aten = torch.ops.aten
_gen = torch.Generator().manual_seed(19)


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=_gen)


CASES = [
    (aten.diagonal.default, (_r(5, 4, 3),), {}),
    (aten.diagonal.default, (_r(5, 4, 3), 1, 2, 0), {}),
    (aten.diagonal.default, (_r(3, 5, 2, 4), -1, -1, 1), {}),
    (aten.diagonal_copy.default, (_r(0, 3, 3), 0, 1, 2), {}),
    (aten.diagonal_copy.default, (torch.arange(30).view(5, 3, 2), 0, 0, 2), {}),
    (aten.diagonal_backward.default, (_r(5, 3), [5, 3, 4], 1, 1, 2), {}),
    (aten.diagonal_backward.default, (_r(4, 2, 2), [3, 4, 5, 2], -1, 0, 2), {}),
    (aten.diag_embed.default, (_r(5, 3),), {}),
    (aten.diag_embed.default, (_r(5, 4, 3), 1, 0, 2), {}),
    (aten.diag_embed.default, (_r(2, 5), -2, -1, 1), {}),
    (aten.diag_embed.default, (_r(7),), {}),
    (aten.tril.default, (_r(5, 3, 4),), {}),
    (aten.tril.default, (_r(3, 2, 4, 4), -1), {}),
    (aten.triu.default, (torch.arange(45).view(5, 3, 3), 1), {}),
    (aten.triu.default, (_r(0, 3, 2),), {}),
    (aten.tril_.default, (_r(5, 3, 4), 1), {}),
    (aten.triu_.default, (_r(3, 3, 3),), {}),
    (aten.diagonal_scatter.default, (_r(5, 3, 4), _r(5, 3), 0, 1, 2), {}),
    (aten.diagonal_scatter.default, (_r(4, 3, 5), _r(3, 3), -1, 0, 2), {}),
    (aten.diagonal_scatter.default, (_r(0, 2, 2), _r(0, 2)), {"dim1": 1, "dim2": 2}),
]


test_every_strategy_is_sound = soundness_test(CASES)


def test_carried_dims_are_renumbered_and_matrix_dims_stay_whole():
    s = offered(aten.diagonal.default, (_r(5, 4, 3), 0, 0, 2))
    assert "Strategy(S(1)->S(0))" in s and "Strategy(P(max)->P(max))" in s
    assert not any(t.startswith(("Strategy(S(0)", "Strategy(S(2)")) for t in s)


def test_diagonal_and_diag_embed_end_to_end_forward_and_backward():
    x = _r(5, 4, 4)

    def body(mesh):
        a = distribute_tensor(x, mesh, [Shard(0)]).requires_grad_()
        with fallback_policy("error"):
            d = torch.diagonal(a, 0, 1, 2)
            e = torch.diag_embed(d * d)
            assert d.placements == (Shard(0),) and e.placements == (Shard(0),)
            e.sum().backward()
        return e.full_tensor(), a.grad.full_tensor()

    e, g = _world((3,), body)[0]
    ref = x.clone().requires_grad_()
    re = torch.diag_embed(torch.diagonal(ref, 0, 1, 2) ** 2)
    re.sum().backward()
    assert torch.allclose(e, re) and torch.allclose(g, ref.grad)
