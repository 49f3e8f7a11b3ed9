"""The matmul family: every strategy sound (harness), then a few runs end to end on simpg."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import simpg
from tests.support.cases import soundness_test, strategies
from tests.support.mesh_world import run_on_mesh as _world
from dtensor import (Partial, Replicate, Shard, distribute_tensor, fallback_policy)
from dtensor.ops.matmul import einsum_strategies
from dtensor.ops.registry import TensorSpec

aten = torch.ops.aten
SDPA = aten._scaled_dot_product_flash_attention_for_cpu.default
SDPA_BWD = aten._scaled_dot_product_flash_attention_for_cpu_backward.default


def _r(*shape, dtype=torch.float64):
    g = torch.Generator().manual_seed(sum(shape) + len(shape))
    if dtype.is_floating_point:
        return torch.randn(*shape, generator=g, dtype=dtype)
    return torch.randint(-4, 5, shape, generator=g, dtype=dtype)


CASES = [
    ("mm", aten.mm.default, (_r(5, 3), _r(3, 4)), {}),
    ("mm-f32", aten.mm.default, (_r(7, 2, dtype=torch.float32), _r(2, 3, dtype=torch.float32)),
     {}),
    ("mm-int", aten.mm.default, (_r(5, 3, dtype=torch.int64), _r(3, 1, dtype=torch.int64)), {}),
    ("mm-tiny", aten.mm.default, (_r(1, 1), _r(1, 3)), {}),
    ("mm-empty", aten.mm.default, (_r(1, 0), _r(0, 3)), {}),
    ("bmm", aten.bmm.default, (_r(3, 5, 2), _r(3, 2, 1)), {}),
    ("mv", aten.mv.default, (_r(5, 3), _r(3)), {}),
    ("dot", aten.dot.default, (_r(7), _r(7)), {}),
    ("addmm-row", aten.addmm.default, (_r(4), _r(5, 3), _r(3, 4)), {}),
    ("addmm-kw", aten.addmm.default, (_r(5, 1), _r(5, 3), _r(3, 4)), {"beta": 0.5, "alpha": 2}),
    ("addmm-full", aten.addmm.default, (_r(5, 4), _r(5, 3), _r(3, 4)), {}),
    ("baddbmm", aten.baddbmm.default, (_r(1, 5, 4), _r(3, 5, 2), _r(3, 2, 4)), {"beta": 2.0}),
    ("addbmm", aten.addbmm.default, (_r(5, 4), _r(3, 5, 2), _r(3, 2, 4)), {}),
    ("addmv", aten.addmv.default, (_r(5), _r(5, 3), _r(3)), {"alpha": -1.0}),
    ("addr", aten.addr.default, (_r(5, 3), _r(5), _r(3)), {}),
    ("sdpa", SDPA, (_r(3, 5, 7, 4), _r(3, 5, 6, 4), _r(3, 5, 6, 4)), {}),
    ("sdpa-even", SDPA, (_r(2, 4, 8, 4), _r(2, 4, 8, 4), _r(2, 4, 8, 4)), {"scale": 0.3}),
    ("sdpa-causal", SDPA, (_r(3, 4, 8, 4), _r(3, 4, 8, 4), _r(3, 4, 8, 4), 0.0, True), {}),
    ("sdpa-mask4", SDPA, (_r(2, 4, 8, 4), _r(2, 4, 6, 4), _r(2, 4, 6, 4)),
     {"attn_mask": _r(1, 4, 8, 6)}),
    ("sdpa-mask2", SDPA, (_r(3, 4, 8, 4), _r(3, 4, 6, 4), _r(3, 4, 6, 4)),
     {"attn_mask": _r(8, 6)}),
]


test_every_strategy_is_sound = soundness_test(CASES)


def _sdpa_backward_args(causal: bool) -> tuple:
    q, k, v = _r(2, 4, 8, 4), _r(2, 4, 6 + 2 * causal, 4), _r(2, 4, 6 + 2 * causal, 4)
    out, lse = SDPA(q, k, v, 0.0, causal)
    return (_r(2, 4, 8, 4), q, k, v, out, lse, 0.0, causal)


ATTENTION_BACKWARD_CASES = [(f"sdpa_bwd-causal={c}", SDPA_BWD, _sdpa_backward_args(c))
                            for c in (False, True)]
test_attention_backward_strategies_are_sound = soundness_test(ATTENTION_BACKWARD_CASES,
                                                              meshes=[(2,), (2, 2), (4,)])


def test_attention_splits_heads_and_queries_only_into_nonempty_equal_chunks():
    # the CPU kernel dies of SIGFPE on zero heads or queries: 3 heads over 4 ranks never split
    placed = {s.inputs[0] for s in strategies(SDPA, (_r(5, 3, 6, 4),) * 3, mesh_shape=(4,))}
    assert placed == {Replicate(), Shard(0)}


def test_dropout_attention_has_no_strategy():
    assert strategies(SDPA, (_r(2, 2, 4, 4),) * 3 + (0.1,)) == []


def test_einsum_strategies_name_each_letter():
    a = TensorSpec((4, 3), (3, 1), torch.float32, (Replicate(),))
    got = {str(s) for s in einsum_strategies("mk,kn->mn", [a, a])}
    assert {"Strategy(R,R->R)", "Strategy(S(0),R->S(0))", "Strategy(S(1),S(0)->P(sum))",
            "Strategy(R,S(1)->S(1))", "Strategy(P(sum),R->P(sum))",
            "Strategy(R,P(avg)->P(avg))"} <= got
    with pytest.raises(ValueError, match="has 2 operands, got 1"):
        einsum_strategies("mk,kn->mn", [a])


# -- end to end on simpg -------------------------------------------------------------------------


def test_mm_row_by_col_shards_needs_no_communication_2d_mesh():
    a, b = torch.randn(5, 6), torch.randn(6, 7)

    def body(mesh):
        da = distribute_tensor(a, mesh, [Shard(0), Replicate()])
        db = distribute_tensor(b, mesh, [Replicate(), Shard(1)])
        with simpg.trace() as t:
            out = torch.mm(da, db)
        assert out.placements == (Shard(0), Shard(1)) and not t.records
        return out.full_tensor()

    for got in _world((2, 2), body):
        assert torch.allclose(got, a @ b, atol=1e-6)


def test_mm_contracted_shards_give_partial_then_one_all_reduce():
    a, b = torch.randn(4, 7), torch.randn(7, 3)

    def body(mesh):
        da = distribute_tensor(a, mesh, [Shard(1)])
        db = distribute_tensor(b, mesh, [Shard(0)])
        with simpg.trace() as t:
            out = da @ db
        assert out.placements == (Partial(),) and not t.records
        with simpg.trace() as t:
            full = out.full_tensor()
        assert [r.op for r in t.records] == ["all_reduce"]
        return full

    for got in _world((3,), body):
        assert torch.allclose(got, a @ b, atol=1e-6)


def _grads_single(fn, tensors):
    leaves = [t.clone().requires_grad_() for t in tensors]
    out = fn(*leaves)
    (out * torch.linspace(-1, 1, out.numel()).reshape(out.shape)).sum().backward()
    return out.detach(), [t.grad for t in leaves]


def _grads_dist(fn, tensors, placements, mesh):
    leaves = [distribute_tensor(t.clone().requires_grad_(), mesh, p)
              for t, p in zip(tensors, placements)]
    out = fn(*leaves)
    weight = torch.linspace(-1, 1, out.numel()).reshape(out.shape)
    (out * weight).sum().backward()
    return out, [t.grad.full_tensor() for t in leaves]


def _assert_every_rank_matches(results, want, want_grads, atol_out: float) -> None:
    for got, grads in results:
        assert torch.allclose(got, want, atol=atol_out)
        for g, e in zip(grads, want_grads):
            assert torch.allclose(g, e, atol=1e-5)


def test_linear_forward_and_backward_match_single_device():
    x, w, b = torch.randn(6, 4), torch.randn(5, 4), torch.randn(5)
    want, want_grads = _grads_single(F.linear, (x, w, b))

    def body(mesh):
        # rows of x (data parallel) and rows of w (column parallel): addmm S(0) x S(1)
        out, grads = _grads_dist(F.linear, (x, w, b),
                                 ([Shard(0), Replicate()], [Replicate(), Shard(0)],
                                  [Replicate(), Shard(0)]), mesh)
        assert out.placements == (Shard(0), Shard(1))
        return out.full_tensor(), grads

    _assert_every_rank_matches(_world((2, 2), body), want, want_grads, 1e-6)


def test_batched_matmul_forward_and_backward_match_single_device():
    a, b = torch.randn(3, 5, 4), torch.randn(3, 4, 2)
    want, want_grads = _grads_single(torch.matmul, (a, b))

    def body(mesh):
        out, grads = _grads_dist(torch.matmul, (a, b), ([Shard(0)], [Shard(0)]), mesh)
        return out.full_tensor(), grads

    _assert_every_rank_matches(_world((2,), body), want, want_grads, 1e-6)


def test_attention_sharded_on_heads_runs_locally_forward_and_backward():
    q, k, v = (torch.randn(2, 4, 6, 8) for _ in range(3))

    def attn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    want, want_grads = _grads_single(attn, (q, k, v))

    def body(mesh):
        with simpg.trace() as t:
            out = attn(*(distribute_tensor(x, mesh, [Shard(1)]) for x in (q, k, v)))
        assert out.placements == (Shard(1),)
        assert {r.op for r in t.records} <= {"broadcast", "scatter"}  # only distribute_tensor
        # the backward's new_empty_strided belongs to the factory family; gathered if unruled
        with fallback_policy("silent"):
            _, grads = _grads_dist(attn, (q, k, v), ([Shard(1)],) * 3, mesh)
        return out.full_tensor(), grads

    _assert_every_rank_matches(_world((2,), body), want, want_grads, 1e-5)


def test_vector_times_matrix_through_in_place_squeeze():
    v, w = torch.randn(3), torch.randn(3, 4)

    def body(mesh):
        with fallback_policy("error"):  # squeeze_ has a rule: no fallback
            out = distribute_tensor(v, mesh, [Replicate()]) @ distribute_tensor(w, mesh,
                                                                                [Shard(1)])
        assert out.shape == (4,) and out.placements == (Shard(0),)
        return out.full_tensor()

    for got in _world((2,), body):
        assert torch.allclose(got, v @ w)


def test_in_place_view_ops_update_shape_and_placements():
    def body(mesh):
        x = distribute_tensor(torch.arange(6.0).reshape(1, 6), mesh, [Shard(1)])
        x.squeeze_(0)
        assert x.shape == (6,) and x.placements == (Shard(0),)
        x.unsqueeze_(1)
        assert x.shape == (6, 1) and x.placements == (Shard(0),)
        x.t_()
        assert x.shape == (1, 6) and x.placements == (Shard(1),)
        return x.full_tensor()

    for got in _world((2,), body):
        assert torch.equal(got, torch.arange(6.0).reshape(1, 6))
