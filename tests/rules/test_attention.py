"""Attention rules: every strategy sound (harness sweep, forward and backward, uneven heads,
grouped heads, masks), which splits are offered, and F.scaled_dot_product_attention end to
end on simpg against one device."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import simpg
from tests.support.cases import soundness_test
from tests.support.mesh_world import run_on_mesh
from dtensor import Partial, Replicate, Shard, distribute_tensor, fallback_policy
from dtensor.ops.propagate import per_dim_strategies
from dtensor.ops.soundness import op_spec

aten = torch.ops.aten
SDPA = aten._scaled_dot_product_flash_attention_for_cpu.default
SDPA_BWD = aten._scaled_dot_product_flash_attention_for_cpu_backward.default
_gen = torch.Generator().manual_seed(7)


def _r(*shape: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(shape, generator=_gen, dtype=dtype)


def _qkv(b: int, h: int, q_len: int, s: int, e: int = 4, kv_heads: int | None = None,
         dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, ...]:
    g = kv_heads or h
    return (_r(b, h, q_len, e, dtype=dtype), _r(b, g, s, e, dtype=dtype),
            _r(b, g, s, e, dtype=dtype))


# name, (query, key, value), is_causal, kwargs
FORWARD = [
    ("mha-5-heads", _qkv(3, 5, 7, 6), False, {}),  # 5 heads: 3,2 on 2 ranks; 2,2,1,0 on 4
    ("7-heads", _qkv(2, 7, 6, 6), False, {}),  # 2,2,2,1 on 4 ranks: uneven, none empty
    ("causal", _qkv(3, 4, 8, 8), True, {}),
    ("gqa", _qkv(2, 8, 6, 6, kv_heads=4), True, {}),
    ("gqa-3-kv", _qkv(2, 6, 5, 5, kv_heads=3), False, {}),  # kv heads split evenly over 3 only
    ("one-row", _qkv(1, 4, 4, 4), False, {}),  # batch pieces empty on every rank but one
    ("mask-4d", _qkv(2, 4, 8, 6), False, {"attn_mask": _r(1, 4, 8, 6)}),
    ("mask-2d", _qkv(3, 4, 8, 6), False, {"attn_mask": _r(8, 6)}),
    ("scale", _qkv(2, 4, 4, 4), True, {"scale": 0.3}),
    ("f32", _qkv(2, 4, 8, 8, dtype=torch.float32), True, {}),
]


def _backward_case(name, qkv, causal, kwargs):
    q, k, v = qkv
    out, lse = SDPA(q, k, v, 0.0, causal, **kwargs)
    return (f"{name}-bwd", (_r(*out.shape, dtype=out.dtype), q, k, v, out, lse, 0.0, causal),
            kwargs)


BACKWARD = [_backward_case(*c) for c in FORWARD if c[0] != "one-row"]


test_every_forward_strategy_is_sound = soundness_test(
    [(name, SDPA, (*qkv, 0.0, causal), kwargs) for name, qkv, causal, kwargs in FORWARD])
test_every_backward_strategy_is_sound = soundness_test(
    [(name, SDPA_BWD, args, kwargs) for name, args, kwargs in BACKWARD])


# -- which splits are offered ----------------------------------------------------------------------
def _query_placements(op, args, mesh_shape, kwargs=None) -> list[set]:
    """Per mesh dim, the placements the rule asks of the query (first tensor after grad_out)."""
    spec = op_spec(op, args, kwargs or {}, mesh_shape)
    q_at = 1 if op is SDPA_BWD else 0
    return [{s.inputs[q_at] for s in dim} for dim in per_dim_strategies(spec)]


def test_heads_split_unevenly_but_never_into_an_empty_piece():
    # Note [attention on empty pieces]: 7 heads over 4 are 2,2,2,1; 3 heads over 4 are 1,1,1,0
    assert Shard(1) in _query_placements(SDPA, _qkv(2, 7, 4, 4), (4,))[0]
    assert Shard(1) not in _query_placements(SDPA, _qkv(2, 3, 4, 4), (4,))[0]
    # nested: 3 heads over (2, 2) are 2,1 by the first mesh dim, then 1,1 and 1,0
    first, second = _query_placements(SDPA, _qkv(2, 3, 4, 4), (2, 2))
    assert Shard(1) in first and Shard(1) not in second


def test_grouped_heads_split_only_where_kv_heads_split_evenly():
    qkv = _qkv(2, 6, 4, 4, kv_heads=3)  # 3 kv heads: 2,1 on 2 ranks would misalign q heads
    assert Shard(1) not in _query_placements(SDPA, qkv, (2,))[0]
    assert Shard(1) in _query_placements(SDPA, qkv, (3,))[0]


def test_causal_attention_keeps_queries_whole_and_keys_always_whole():
    assert Shard(2) in _query_placements(SDPA, (*_qkv(2, 4, 8, 8), 0.0, False), (2,))[0]
    assert Shard(2) not in _query_placements(SDPA, (*_qkv(2, 4, 8, 8), 0.0, True), (2,))[0]
    spec = op_spec(SDPA, _qkv(2, 4, 8, 8), {}, (2,))
    assert all(s.inputs[1] != Shard(2) for s in per_dim_strategies(spec)[0])  # key length


def test_partial_value_gives_partial_output_and_replicated_logsumexp():
    spec = op_spec(SDPA, _qkv(2, 4, 4, 4), {}, (2,))
    by_value = {s.inputs[2]: s for s in per_dim_strategies(spec)[0]}
    assert by_value[Partial("avg")].outputs == (Partial("avg"), Replicate())
    assert by_value[Partial("sum")].inputs[:2] == (Replicate(), Replicate())


def test_dropout_attention_has_no_strategy():
    spec = op_spec(SDPA, (*_qkv(2, 2, 4, 4), 0.1), {}, (2,))
    assert per_dim_strategies(spec) == [[]]


# -- end to end on simpg ---------------------------------------------------------------------------
def _reference(q, k, v, **kw):
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = F.scaled_dot_product_attention(*leaves, **kw)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    out.backward(grad)
    return out.detach(), grad, [t.grad for t in leaves]


def _sharded(q, k, v, placements, mesh_shape, **kw):
    want, grad, want_grads = _reference(q, k, v, **kw)

    def body(mesh):
        leaves = [distribute_tensor(t, mesh, p).requires_grad_()
                  for t, p in zip((q, k, v), placements)]
        with fallback_policy("error"), simpg.trace() as tr:
            out = F.scaled_dot_product_attention(*leaves, **kw)
        assert not tr.records  # the pieces line up: no collective
        grad_out = distribute_tensor(grad, mesh, out.placements)
        with fallback_policy("error"), simpg.trace() as tr:
            out.backward(grad_out)
        backward_ops = {r.op for r in tr.records}
        return (out.placements, out.full_tensor(), [t.grad.placements for t in leaves],
                [t.grad.full_tensor() for t in leaves], backward_ops)

    results = run_on_mesh(mesh_shape, body)
    for _, got, _, grads, _ in results:
        assert torch.allclose(got, want, atol=1e-5)
        for g, e in zip(grads, want_grads):
            assert torch.allclose(g, e, atol=1e-5)
    return results[0][0], results[0][2], results[0][4]


def test_causal_attention_on_uneven_head_shards():
    q, k, v = _qkv(2, 7, 6, 6, e=8, dtype=torch.float32)  # 7 heads: 2, 2, 2, 1
    out, grads, moved = _sharded(q, k, v, [[Shard(1)]] * 3, (4,), is_causal=True)
    assert out == (Shard(1),) and grads == [(Shard(1),)] * 3 and not moved


def test_grouped_query_attention_on_head_shards_of_a_2d_mesh():
    q, k, v = _qkv(3, 8, 5, 5, e=8, kv_heads=4, dtype=torch.float32)
    placements = [[Shard(0), Shard(1)]] * 3  # 3 rows over 2 (2, 1), heads over 2
    out, grads, moved = _sharded(q, k, v, placements, (2, 2), is_causal=True, enable_gqa=True)
    assert out == (Shard(0), Shard(1)) and grads == [(Shard(0), Shard(1))] * 3 and not moved


def test_query_shards_attend_to_whole_keys():
    q, k, v = _qkv(2, 4, 7, 6, e=8, dtype=torch.float32)
    out, grads, moved = _sharded(q, k, v, [[Shard(2)], [Replicate()], [Replicate()]], (3,))
    assert out == (Shard(2),) and grads[0] == (Shard(2),)
    # every rank's queries add to the key and value gradients: P(sum) addends, summed once
    # each as they land in the Replicate leaves
    assert grads[1:] == [(Replicate(),)] * 2 and moved == {"all_reduce"}
