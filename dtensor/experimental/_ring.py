"""Ring attention: keys and values pass around the context ranks (Note [ring attention]).

Note [ring attention]
Each of the cp ranks holds its queries, keys and values for chunks r and 2cp-1-r of the
sequence (Note [context parallel] in ``dtensor.parallel.context``). The ring takes cp steps;
at step i a rank holds the key/value block of rank ``r - i`` (mod cp), attends its queries
to it and, while it computes, sends that block to rank r+1 and receives the next from
rank r-1 (one ``batch_isend_irecv``: keys and values travel packed as one message, so a
forward moves cp-1 messages of one kv block per rank, the bytes an all-gather moves).

No mask tensor crosses ranks. With the load-balanced chunks, the block from
rank s against this rank's queries is (``block``):

- s == r: the local causal triangle (both hold positions in increasing order);
- s < r: every query against the block's first chunk (s, before both of ours), none against
  its second (2cp-1-s, after both of ours);
- s > r: the second query chunk (2cp-1-r) against the whole block, the first against none.

So every step after the diagonal is half a block of work on every rank, and nothing fully
masked is computed. Partial results merge by the log-sum-exp trick: a block gives
``out_b = softmax(S_b) V_b`` and ``lse_b = logsumexp(S_b)`` per query; two partials merge as
``lse = logaddexp(lse_1, lse_2)``, ``out = out_1 exp(lse_1 - lse) + out_2 exp(lse_2 - lse)``,
in float32 at least (torch's ``convert_to_f32``).

The backward is a ring too and recomputes each block's probabilities from the saved
``lse`` (``P = exp(S - lse)``, flash attention's backward): kv blocks travel the ring again,
and next to them an accumulator of the block's dk and dv. The owner keeps its own diagonal
share; the accumulator of block b starts at rank b+1, gains each rank's share, and its last
hop brings it home, so it moves cp-1 times (in float32 at least: twice a bf16 block). A
backward thus moves 2(cp-1) blocks per rank where the all-gather's reduce-scatter moves cp-1
(the all-gather path keeps the gathered keys and values, cp blocks per layer, for its
backward; the ring keeps one).

The blocks are computed with matmuls, not a fused kernel: a kernel that returns its
log-sum-exp (flash attention's) would drop in at ``_attend`` on a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

_KV, _DKV = 0, 1  # message tags: a step's kv block and, in the backward, a dk/dv accumulator


@dataclass(frozen=True, slots=True)
class Block:
    """Which local query rows attend to which rows of a kv block, and whether causally."""

    queries: slice
    keys: slice
    causal: bool


def block(rank: int, source: int, cp: int, is_causal: bool, local: int) -> Block:
    """The part of the kv block from ``source`` that this rank's ``local`` queries attend to
    (Note [ring attention]); ``local`` is the rows per rank (two chunks)."""
    every, first, second = slice(0, local), slice(0, local // 2), slice(local // 2, local)
    if not is_causal:
        return Block(every, every, False)
    if source == rank:
        return Block(every, every, True)
    if source < rank:
        return Block(every, first, False)
    return Block(second, every, False)


class Ring:
    """The cp ranks of ``group`` in a ring; this rank sends to the next and hears the last."""

    def __init__(self, group: Any, rank: int, size: int) -> None:
        self.group, self.rank, self.size = group, rank, size
        self.next, self.last = (rank + 1) % size, (rank - 1) % size

    def exchange(self, sends: list[tuple[torch.Tensor, int]],
                 recvs: list[tuple[torch.Tensor, int]]) -> list[Any]:
        """Post the sends (to the next rank) and receives (from the last), tagged; return the
        works to wait on. Sends and receives between one pair go in a fixed order (kv, then
        dk/dv) on both sides, which is what NCCL's untagged matching needs."""
        ops = [dist.P2POp(dist.isend, t, group=self.group, group_peer=self.next, tag=tag)
               for t, tag in sends]
        ops += [dist.P2POp(dist.irecv, b, group=self.group, group_peer=self.last, tag=tag)
                for b, tag in recvs]
        return dist.batch_isend_irecv(ops) if ops else []


def _repeat(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """kv heads -> query heads: head h of the queries uses kv head h // n_rep (enable_gqa)."""
    return x if n_rep == 1 else x.repeat_interleave(n_rep, dim=-3)


def _fold(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """A gradient over query heads summed back onto the kv head each group shares."""
    return x if n_rep == 1 else x.unflatten(-3, (-1, n_rep)).sum(-3)


def _scores(q: torch.Tensor, k: torch.Tensor, b: Block, scale: float) -> torch.Tensor:
    s = (q[..., b.queries, :] @ k[..., b.keys, :].transpose(-2, -1)) * scale
    if b.causal:
        n_q, n_k = s.shape[-2:]
        s = s.masked_fill(~torch.ones(n_q, n_k, dtype=torch.bool, device=s.device).tril(),
                          float("-inf"))
    return s


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, b: Block,
            scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of the block's queries to its keys: (out, log-sum-exp)."""
    s = _scores(q, k, b, scale)
    lse = s.logsumexp(-1)
    return torch.exp(s - lse.unsqueeze(-1)) @ v[..., b.keys, :], lse


def _merge(out: torch.Tensor, lse: torch.Tensor, part: torch.Tensor, part_lse: torch.Tensor,
           rows: slice) -> None:
    """Fold a block's partial result into the running one, in place (log-sum-exp trick)."""
    old = lse[..., rows]
    new = torch.logaddexp(old, part_lse)
    out[..., rows, :] = (out[..., rows, :] * torch.exp(old - new).unsqueeze(-1)
                         + part * torch.exp(part_lse - new).unsqueeze(-1))
    lse[..., rows] = new


def _accumulation(dtype: torch.dtype) -> torch.dtype:
    """float32 for half types (torch's convert_to_f32), float64 stays float64."""
    return torch.promote_types(dtype, torch.float32)


def _pack(k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.cat([k.reshape(-1), v.reshape(-1)])


def _unpack(kv: torch.Tensor, k_shape: torch.Size,
            v_shape: torch.Size) -> tuple[torch.Tensor, torch.Tensor]:
    n = k_shape.numel()
    return kv[:n].view(k_shape), kv[n:].view(v_shape)


def ring_forward(ring: Ring, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                 is_causal: bool, scale: float, n_rep: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of the local queries to every rank's keys and values: (out, lse), in float32
    or wider."""
    local, acc = q.shape[-2], _accumulation(q.dtype)
    q_acc = q.to(acc)
    out = q_acc.new_zeros((*q.shape[:-1], v.shape[-1]))
    lse = q_acc.new_full(q.shape[:-1], float("-inf"))
    kv = _pack(k, v)
    for step in range(ring.size):
        incoming, pending = None, []
        if step < ring.size - 1:  # the next block travels while this one is computed
            incoming = torch.empty_like(kv)
            pending = ring.exchange([(kv, _KV)], [(incoming, _KV)])
        b = block(ring.rank, (ring.rank - step) % ring.size, ring.size, is_causal, local)
        kb, vb = (_repeat(t.to(acc), n_rep) for t in _unpack(kv, k.shape, v.shape))
        part, part_lse = _attend(q_acc, kb, vb, b, scale)
        _merge(out, lse, part, part_lse, b.queries)
        for work in pending:
            work.wait()
        if incoming is not None:
            kv = incoming
    return out, lse


def _attend_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grad_out: torch.Tensor,
                     lse: torch.Tensor, delta: torch.Tensor, b: Block,
                     scale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One block's share of dq (the block's query rows), dk and dv (its key rows),
    from probabilities recomputed with the final ``lse``."""
    p = torch.exp(_scores(q, k, b, scale) - lse[..., b.queries].unsqueeze(-1))
    g = grad_out[..., b.queries, :]
    dv = p.transpose(-2, -1) @ g
    ds = p * (g @ v[..., b.keys, :].transpose(-2, -1) - delta[..., b.queries].unsqueeze(-1))
    dq = (ds @ k[..., b.keys, :]) * scale
    dk = (ds.transpose(-2, -1) @ q[..., b.queries, :]) * scale
    return dq, dk, dv


def ring_backward(ring: Ring, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  out: torch.Tensor, lse: torch.Tensor, grad_out: torch.Tensor, is_causal: bool,
                  scale: float, n_rep: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv of the local queries, keys and values (Note [ring attention])."""
    local, acc = q.shape[-2], _accumulation(q.dtype)
    q_acc, g_acc = q.to(acc), grad_out.to(acc)
    delta = (g_acc * out).sum(-1)
    dq = torch.zeros_like(q_acc)
    kv = _pack(k, v)
    own = shared = None  # this rank's share of its own dk/dv; the accumulator passing through
    for step in range(ring.size):
        sends, recvs, incoming, shared_in = [], [], None, None
        if step < ring.size - 1:
            incoming = torch.empty_like(kv)
            sends.append((kv, _KV))
            recvs.append((incoming, _KV))
        if step >= 2:  # last step's accumulator moves on; the one for this block arrives
            shared_in = torch.empty_like(shared)
            sends.append((shared, _DKV))
            recvs.append((shared_in, _DKV))
        pending = ring.exchange(sends, recvs)
        b = block(ring.rank, (ring.rank - step) % ring.size, ring.size, is_causal, local)
        k_acc, v_acc = (t.to(acc) for t in _unpack(kv, k.shape, v.shape))
        dq_b, dk_b, dv_b = _attend_backward(q_acc, _repeat(k_acc, n_rep),
                                            _repeat(v_acc, n_rep), g_acc, lse, delta, b, scale)
        dq[..., b.queries, :] += dq_b
        dk, dv = torch.zeros_like(k_acc), torch.zeros_like(v_acc)
        dk[..., b.keys, :] = _fold(dk_b, n_rep)
        dv[..., b.keys, :] = _fold(dv_b, n_rep)
        mine = _pack(dk, dv)
        for work in pending:
            work.wait()
        if step == 0:
            own = mine
        else:
            shared = mine if shared_in is None else shared_in + mine
        if incoming is not None:
            kv = incoming
    if ring.size > 1:  # the last accumulator goes home; ours comes back from the last rank
        home = torch.empty_like(shared)
        for work in ring.exchange([(shared, _DKV)], [(home, _DKV)]):
            work.wait()
        own = own + home
    dk, dv = _unpack(own, k.shape, v.shape)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


class RingAttention(torch.autograd.Function):
    """Ring attention forward and backward (Note [ring attention]); returns the output in the
    queries' dtype."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ring: Ring,
                is_causal: bool, scale: float, n_rep: int) -> torch.Tensor:
        out, lse = ring_forward(ring, q, k, v, is_causal, scale, n_rep)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.ring, ctx.is_causal, ctx.scale, ctx.n_rep = ring, is_causal, scale, n_rep
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> Any:
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = ring_backward(ctx.ring, q, k, v, out, lse, grad_out, ctx.is_causal,
                                   ctx.scale, ctx.n_rep)
        return dq, dk, dv, None, None, None, None
