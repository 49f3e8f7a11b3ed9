"""Attention: ``_scaled_dot_product_flash_attention_for_cpu`` (what
``F.scaled_dot_product_attention`` runs on CPU, for every dtype, mask and grouped-query call)
and its backward.

Shapes: query (B, H, L, E), key (B, Hkv, S, E), value (B, Hkv, S, Ev) -> output (B, H, L, Ev),
logsumexp (B, H, L); H is a multiple of Hkv (grouped-query attention: q head h reads kv head
h // (H / Hkv)); an optional mask broadcasts to (B, H, L, S). The backward takes grad_out,
query, key, value, output, logsumexp (+ mask) and returns grad_query, grad_key, grad_value.

Per mesh dim:

- batch: every (b) is its own problem; all tensors and outputs S(0), uneven or empty pieces
  included.
- heads: every (b, h) is its own problem; all tensors S(1). Pieces may be uneven but not empty
  (Note [attention on empty pieces]). With grouped heads, a rank's q heads must read exactly
  its kv heads: the kv heads then split evenly (6 q heads over 3 kv heads on 2 ranks: q
  pieces 3, 3 but kv pieces 2, 1 would pair q head 2 with the wrong kv head).
- queries (L): each query row attends over all keys alone, unless causal (the kernel lays the
  causal mask out from each piece's local row 0, not the chunk's global offset). key, value R;
  a key/value gradient sums over every query, so grad_key/grad_value are P(sum).
- keys (S): not offered: the softmax normalizes over all keys (a split needs the ranks'
  logsumexps combined, which no local call does).
- linear in value: P(sum)/P(avg) value with the rest R gives that Partial output, and the same
  logsumexp on every rank (R): softmax(q k^T) (v1 + v2) = softmax(q k^T) v1 + softmax(q k^T) v2.
- the backward is linear in grad_out with the rest fixed: D = rowsum(dO * O), dP = dO V^T,
  dS = P * (dP - D), dQ = dS K, dK = dS^T Q, dV = P^T dO; so a Partial grad_out gives that
  Partial on every gradient.
- dropout: none (the kernel draws its mask from each rank's generator on its own piece).

Note [attention on empty pieces]
The CPU kernel dies of SIGFPE (torch 2.13) on zero heads or zero queries, so heads and queries
are split only where no piece is empty, whichever earlier mesh dims split the same dim
(``no_empty_piece``); 3 heads over 4 ranks stay whole. Zero batch rows are fine.
"""

from __future__ import annotations

from typing import Sequence

import torch

from dtensor.ops._common import even_pieces, no_empty_piece
from dtensor.ops.indexing import partials
from dtensor.ops.registry import OpSpec, Strategy, TensorSpec, sharding_rule
from dtensor.placements import Partial, Placement, Replicate, Shard

aten = torch.ops.aten
R = Replicate()
LINEAR = (Partial("sum"), Partial("avg"))
BATCH, HEADS, QUERIES = 0, 1, 2  # dims of query, output, logsumexp (and key/value's first two)

# each tensor's role: "q" lays out (B, H, L, ...) like the query, "kv" (B, Hkv, S, ...)
_FORWARD = ("q", "kv", "kv")  # query, key, value -> output, logsumexp
_FORWARD_OUT = ("q", "q")
_BACKWARD = ("q", "q", "kv", "kv", "q", "q")  # grad_out, query, key, value, output, logsumexp
_BACKWARD_OUT = ("q", "kv", "kv")  # grad_query, grad_key, grad_value


def _mask_placement(mask: TensorSpec, dim: int, size: int) -> Placement:
    """The mask's placement when dim ``dim`` of (B, H, L, S), of size ``size``, is split."""
    d = dim - (4 - mask.ndim)  # the mask broadcasts: its dims align to the right
    return Shard(d) if d >= 0 and mask.shape[d] == size else R


def _splits(op: OpSpec, q: TensorSpec, k: TensorSpec, causal: bool) -> list[int]:
    """The (B, H, L) dims this mesh dim may split (module docstring)."""
    dims = [BATCH]
    heads, kv_heads = q.shape[HEADS], k.shape[HEADS]
    if no_empty_piece(op, heads) and (heads == kv_heads or even_pieces(op, kv_heads)):
        dims.append(HEADS)
    if not causal and no_empty_piece(op, q.shape[QUERIES]):
        dims.append(QUERIES)
    return dims


def _attention(op: OpSpec, roles: Sequence[str], out_roles: Sequence[str], q_index: int,
               causal: bool, dropout_p: float, linear_in: int) -> list[Strategy]:
    if dropout_p != 0.0:
        return []  # dropout draws per element: the same call on two ranks draws differently
    tensors = op.tensors()
    mask = op.kwarg("attn_mask")
    q, k = tensors[q_index], tensors[q_index + 1]
    n_in, n_out = len(tensors), len(out_roles)
    found = [Strategy((R,) * n_in, (R,) * n_out)]
    for dim in _splits(op, q, k, causal):
        # splitting queries leaves key and value whole; batch and heads split them alike
        kv: Placement = R if dim == QUERIES else Shard(dim)
        ins = [Shard(dim) if role == "q" else kv for role in roles]
        if mask is not None:
            ins.append(_mask_placement(mask, dim, q.shape[dim]))
        # a key/value gradient sums over every query: split queries give one addend per rank
        outs = tuple(Shard(dim) if role == "q" else kv if dim != QUERIES else Partial("sum")
                     for role in out_roles)
        found.append(Strategy(tuple(ins), outs))
    lin = tensors[linear_in]
    for p in partials(lin, LINEAR):  # linear in value (forward) or grad_out (backward)
        ins = tuple(p if i == linear_in else R for i in range(n_in))
        # the forward's logsumexp does not read value: the same on every rank
        outs = (p, R) if n_out == 2 else (p,) * n_out
        found.append(Strategy(ins, outs))
    return found


@sharding_rule(aten._scaled_dot_product_flash_attention_for_cpu.default)
def sdpa_flash_cpu(op: OpSpec) -> list[Strategy]:
    """``(query, key, value, dropout_p, is_causal, *, attn_mask, scale) -> (output,
    logsumexp)``."""
    return _attention(op, _FORWARD, _FORWARD_OUT, 0, bool(op.arg(4, "is_causal", False)),
                      float(op.arg(3, "dropout_p", 0.0)), linear_in=2)


@sharding_rule(aten._scaled_dot_product_flash_attention_for_cpu_backward.default)
def sdpa_flash_cpu_backward(op: OpSpec) -> list[Strategy]:
    """``(grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, *, attn_mask,
    scale) -> (grad_query, grad_key, grad_value)``."""
    return _attention(op, _BACKWARD, _BACKWARD_OUT, 1, bool(op.arg(7, "is_causal", False)),
                      float(op.arg(6, "dropout_p", 0.0)), linear_in=0)
