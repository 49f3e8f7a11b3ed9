"""Pointwise rules (dtensor/ops/pointwise.py): the generic rule of ops tagged pointwise, and the
elementwise ops the tag misses (floor_divide, prelu, glu; _safe_softmax's rule is softmax's,
in norms), with _trilinear (dtensor/ops/trilinear.py, bilinear's kernel): every strategy sound
on even, uneven, tiny and empty shapes over the meshes; the contraction gives Partial; end to
end on simpg."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from tests.support.cases import offered, soundness_test
from tests.support.mesh_world import run_on_mesh as _world

from dtensor import Partial, Shard, distribute_tensor, fallback_policy

aten = torch.ops.aten
g = torch.Generator().manual_seed(17)


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=g)


def _ints(high: int, *shape: int) -> torch.Tensor:
    return torch.randint(0, high, shape, generator=g)


# the generic rule of ops tagged pointwise: broadcasting, scalars, Partial
CASES = [
    (aten.add.Tensor, (_r(5, 3), _r(3))),
    (aten.sub.Tensor, (_r(5, 1), _r(5, 4))),
    (aten.mul.Tensor, (_r(5, 3), 2.5)),
    (aten.div.Tensor, (_r(2, 5, 3), torch.rand(5, 1, generator=g) + 1)),
    (aten.add.Scalar, (_r(7), 1.0)),
    (aten.neg.default, (_r(3, 4),)),
    (aten.exp.default, (_r(5, 2),)),
    (aten.where.self, (_r(5, 3) > 0, _r(5, 3), _r(3))),
    (aten.bitwise_and.Tensor, (_ints(9, 5, 3), _ints(9, 5, 3))),
    (aten.eq.Tensor, (_ints(3, 4, 3), _ints(3, 3))),
    (aten.clone.default, (_r(3, 5),)),
    (aten.ones_like.default, (_r(3, 5),)),
    (aten.new_zeros.default, (_r(3, 2), [5, 3])),
    (aten.new_ones.default, (_r(3, 2), [7])),
    (aten.new_full.default, (_r(3, 2), [2, 5], 1.5)),
]


# the elementwise ops the tag misses, and _trilinear
X1, X2, W, G = _r(6, 3), _r(6, 4), _r(5, 3, 4), _r(6, 5)
CASES += [
    (aten.floor_divide.default, (_r(5, 3), _r(3))),
    (aten.floor_divide.default, (torch.randint(-9, 9, (5, 3), generator=g),
                                 torch.randint(1, 4, (5, 1), generator=g))),
    (aten.floor_divide.Scalar, (_r(5, 3), 0.7)),
    (aten._prelu_kernel.default, (_r(5, 3, 2), _r(3, 1))),
    (aten._prelu_kernel.default, (_r(0, 3), _r(3))),
    (aten._prelu_kernel_backward.default, (_r(5, 3, 2), _r(5, 3, 2), _r(3, 1))),
    (aten.glu.default, (_r(5, 4, 3), 1)),
    (aten.glu.default, (_r(5, 6),)),
    (aten.glu_backward.default, (_r(5, 2, 3), _r(5, 4, 3), 1)),
    (aten._safe_softmax.default, (_r(5, 3, 4), 1)),
    (aten._safe_softmax.default, (torch.full((3, 4), float("-inf")), -1)),
    # bilinear forward and both its backward contractions
    (aten._trilinear.default, (X1, W, X2, [1, 3], [0], [1, 2], [2, 3])),
    (aten._trilinear.default, (G, W, X2, [2, 3], [0], [1, 2], [1, 3])),
    (aten._trilinear.default, (X1, G, X2, [1, 3], [2, 3], [1, 2], [0])),
    (aten._trilinear.default, (_r(3), W, _r(4), [0, 2], [], [0, 1], [1, 2])),
    (aten._trilinear.default, (_r(0, 3), W, _r(0, 4), [1, 3], [0], [1, 2], [2, 3])),
]


test_every_strategy_is_sound = soundness_test(CASES)


def test_glu_keeps_its_dim_whole_and_trilinear_contracts_into_partial():
    s = offered(aten.glu.default, (_r(4, 6), 1))
    assert "Strategy(S(0)->S(0))" in s and "Strategy(S(1)->S(1))" not in s
    s = offered(aten._trilinear.default, (X1, W, X2, [1, 3], [0], [1, 2], [2, 3]))
    # batch rows of both inputs; output features of W; the summed in1 / in2 dims: P(sum)
    assert {"Strategy(S(0),R,S(0)->S(0))", "Strategy(R,S(0),R->S(1))",
            "Strategy(S(1),S(1),R->P(sum))", "Strategy(R,S(2),S(1)->P(sum))"} <= s


def test_bilinear_and_glu_end_to_end_forward_and_backward_without_fallback():
    bias = _r(5)

    def body(mesh):
        a = distribute_tensor(X1, mesh, [Shard(0), Shard(1)]).requires_grad_()
        b = distribute_tensor(X2, mesh, [Shard(0), Shard(1)]).requires_grad_()
        w = distribute_tensor(W, mesh, [Shard(0), Shard(2)]).requires_grad_()
        with fallback_policy("error"):
            y = F.bilinear(a, b, w)
            assert Partial() in y.placements or Shard(0) in y.placements
            z = F.glu(torch.cat([y, y], 1) + bias.repeat(2), 1)
            (z * z).sum().backward()
        return z.full_tensor(), a.grad.full_tensor(), w.grad.full_tensor()

    z, ga, gw = _world((2, 2), body)[0]
    ra, rb, rw = (t.clone().requires_grad_() for t in (X1, X2, W))
    ry = F.bilinear(ra, rb, rw)
    rz = F.glu(torch.cat([ry, ry], 1) + bias.repeat(2), 1)
    (rz * rz).sum().backward()
    assert torch.allclose(z, rz, atol=1e-5) and torch.allclose(ga, ra.grad, atol=1e-4)
    assert torch.allclose(gw, rw.grad, atol=1e-4)
