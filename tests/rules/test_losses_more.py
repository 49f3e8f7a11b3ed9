"""Elementwise and per-row loss rules (dtensor/ops/losses_more.py): every strategy sound on
even, uneven, tiny and empty shapes over the meshes; sharded strategies offered; end to end."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tests.support.mesh_world import run_on_mesh as _world

from dtensor import Partial, Shard, distribute_tensor, fallback_policy
from dtensor.ops.propagate import per_dim_strategies
from dtensor.ops.soundness import check_op, op_spec

aten = torch.ops.aten
MESHES = [(2,), (3,), (2, 2), (4,)]
g = torch.Generator().manual_seed(3)


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=g)


def _p(*shape: int) -> torch.Tensor:  # probabilities for binary_cross_entropy
    return torch.rand(shape, generator=g).clamp(0.05, 0.95)


def _grad(shape: tuple[int, ...], reduction: int) -> torch.Tensor:
    return _r(*shape) if reduction == 0 else _r()


def _cases() -> list:
    cases = []
    for red in (0, 1, 2):
        for shape in [(5, 3), (8, 4), (1, 2), (0, 3)]:
            x, t = _r(*shape), _r(*shape)
            cases += [
                (aten.huber_loss.default, (x, t, red, 0.5)),
                (aten.smooth_l1_loss.default, (x, t, red, 0.7)),
                (aten.soft_margin_loss.default, (x, t.sign(), red)),
                (aten.binary_cross_entropy.default, (_p(*shape), _p(*shape), None, red)),
                (aten.huber_loss_backward.default, (_grad(shape, red), x, t, red, 0.5)),
                (aten.smooth_l1_loss_backward.default, (_grad(shape, red), x, t, red, 0.7)),
                (aten.soft_margin_loss_backward.default, (_grad(shape, red), x, t.sign(), red)),
                (aten.binary_cross_entropy_backward.default,
                 (_grad(shape, red), _p(*shape), _p(*shape), _p(*shape), red)),
            ]
        # weights and pos_weight broadcast over the batch
        cases += [
            (aten.binary_cross_entropy.default, (_p(5, 3), _p(5, 3), _p(5, 3), red)),
            (aten.binary_cross_entropy_with_logits.default,
             (_r(5, 3), _p(5, 3), _r(1, 3).abs(), _r(3).abs(), red)),
            (aten.binary_cross_entropy_with_logits.default, (_r(6, 2, 3), _p(6, 2, 3), None,
                                                             None, red)),
        ]
        for n in (5, 4, 1):
            x, y = _r(n, 4), torch.randint(0, 4, (n,), generator=g)
            labels = torch.tensor([[1, 2, -1, 0], [0, -1, 2, 3], [3, -1, 0, 0], [2, 1, 0, -1],
                                   [0, -1, 1, 1]])[:n]
            w = torch.rand(4, generator=g)
            cases += [
                (aten.multi_margin_loss.default, (x, y, 1, 1.0, None, red)),
                (aten.multi_margin_loss.default, (x, y, 2, 0.5, w, red)),
                (aten.multi_margin_loss_backward.default,
                 (_grad((n,), red), x, y, 1, 1.0, w, red)),
                (aten.multilabel_margin_loss_forward.default, (x, labels, red)),
            ]
            _, is_target = aten.multilabel_margin_loss_forward(x, labels, red)
            cases.append((aten.multilabel_margin_loss_backward.default,
                          (_grad((n,), red), x, labels, red, is_target)))
    return cases


CASES = _cases()


def _id(case) -> str:
    op, args = case
    shapes = ",".join(str(tuple(a.shape)) for a in args if isinstance(a, torch.Tensor))
    return f"{str(op).split('.')[1]}{shapes}r{args[-1] if isinstance(args[-1], int) else ''}"


@pytest.mark.parametrize("mesh_shape", MESHES, ids=str)
@pytest.mark.parametrize("op,args", CASES, ids=[_id(c) for c in CASES])
def test_every_strategy_of_the_rule_is_sound(op, args, mesh_shape):
    assert check_op(op, args, {}, mesh_shape) == []


def _strategies(op, args, mesh_shape=(2,)) -> set[str]:
    return {str(s) for s in per_dim_strategies(op_spec(op, args, {}, mesh_shape))[0]}


def test_sharded_terms_reduce_to_the_right_partial():
    x, t = _r(8, 4), _r(8, 4)
    assert {"Strategy(S(0),S(0)->S(0))", "Strategy(S(1),S(1)->S(1))"} <= _strategies(
        aten.huber_loss.default, (x, t, 0, 1.0))
    assert "Strategy(S(1),S(1)->P(sum))" in _strategies(aten.huber_loss.default, (x, t, 2, 1.0))
    assert "Strategy(S(0),S(0)->P(avg))" in _strategies(aten.huber_loss.default, (x, t, 1, 1.0))
    # 5 rows over 2 ranks: unequal counts, so the mean of local means is not the mean
    odd = _strategies(aten.huber_loss.default, (_r(5, 3), _r(5, 3), 1, 1.0))
    assert not any("P(avg)" in s for s in odd)
    # a per-row loss shards only the batch
    rows = _strategies(aten.multi_margin_loss.default,
                       (x, torch.zeros(8, dtype=torch.long), 1, 1.0, None, 2))
    assert "Strategy(S(0),S(0)->P(sum))" in rows and not any("S(1)" in s for s in rows)


def test_losses_end_to_end_forward_and_backward_without_fallback():
    x, t, p = _r(6, 5), _r(6, 5), _p(6, 5)

    def body(mesh):
        a = distribute_tensor(x, mesh, [Shard(0), Shard(1)]).requires_grad_()
        b = distribute_tensor(t, mesh, [Shard(0), Shard(1)])
        q = distribute_tensor(p, mesh, [Shard(0), Shard(1)])
        with fallback_policy("error"):
            none = F.smooth_l1_loss(a, b, reduction="none", beta=0.5)
            huber = F.huber_loss(a, b, reduction="sum", delta=0.5)
            bce = F.binary_cross_entropy_with_logits(a, q, reduction="sum")
            assert none.placements == (Shard(0), Shard(1))
            assert huber.placements == bce.placements == (Partial(), Partial())
            total = huber + bce
            (none.sum() + total).backward()
        return none.full_tensor(), total.full_tensor(), a.grad.full_tensor()

    none, total, grad = _world((2, 2), body)[0]
    ref = x.clone().requires_grad_()
    r_none = F.smooth_l1_loss(ref, t, reduction="none", beta=0.5)
    r_total = (F.huber_loss(ref, t, reduction="sum", delta=0.5)
               + F.binary_cross_entropy_with_logits(ref, p, reduction="sum"))
    (r_none.sum() + r_total).backward()
    assert torch.allclose(none, r_none, atol=1e-6) and torch.allclose(total, r_total, atol=1e-5)
    assert torch.allclose(grad, ref.grad, atol=1e-6)
