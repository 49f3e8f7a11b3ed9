"""Ring attention under context parallelism (Note [ring attention] in
dtensor.experimental._ring, Note [rotate method] in dtensor.experimental._attention): equal to
one device forward and backward on cp=1, 2, 4, causal or not, with grouped kv heads; its
traffic is cp-1 point-to-point kv blocks per rank in the forward and no all-gather; the
causal blocks it computes are exactly the unmasked ones.

Run as a script, it prints the bytes-per-rank table of docs/large-models.md:

    .venv/bin/python -m tests.parallel.test_context_parallel_ring
"""

from __future__ import annotations

import itertools
from collections import Counter

import pytest
import torch
import torch.nn.functional as F

import dtensor
import simpg
from dtensor.experimental import (ContextParallelError, context_parallel, get_rotate_method,
                                  set_rotate_method)
from dtensor.experimental._ring import block
from dtensor.parallel.context import _positions, shard_sequence
from tests.support.paths import DOCS, PROGRAMS

PROGRAM = PROGRAMS / "context_parallel_ring_program.py"


@pytest.fixture
def rotate_method():
    """Sets the process-wide method for a test (before its ranks start) and restores it."""
    before = get_rotate_method()
    yield set_rotate_method
    set_rotate_method(before)


def _inputs(heads: int, kv_heads: int, seq: int, dtype: torch.dtype = torch.float64):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, heads, seq, 8, generator=g, dtype=dtype)
    k = torch.randn(2, kv_heads, seq, 8, generator=g, dtype=dtype)
    v = torch.randn(2, kv_heads, seq, 8, generator=g, dtype=dtype)
    grad_out = torch.randn(2, heads, seq, 8, generator=g, dtype=dtype)
    return q, k, v, grad_out


def _attention_on_ranks(cp: int, q, k, v, grad_out, is_causal: bool, gqa: bool):
    """Each rank's (output, dq, dk, dv) of its part of the sequence, under context_parallel
    (forward only, the gradients None, when ``grad_out`` is None)."""
    seq = q.shape[-2]

    def body():
        mesh = dtensor.init_device_mesh("cpu", (cp,), mesh_dim_names=("cp",))
        rank = mesh.get_local_rank(0)
        mine = [shard_sequence(t, 2, cp, rank).requires_grad_() for t in (q, k, v)]
        with context_parallel(mesh, buffers=[torch.zeros(seq)], buffer_seq_dims=[0]):
            out = F.scaled_dot_product_attention(*mine, is_causal=is_causal, enable_gqa=gqa)
            if grad_out is not None:
                out.backward(shard_sequence(grad_out, 2, cp, rank))
        return out.detach(), *(t.grad for t in mine)

    return simpg.run(body, cp)


@pytest.mark.parametrize("cp", [1, 2, 4])
@pytest.mark.parametrize("is_causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (4, 2)], ids=["mha", "gqa"])
def test_ring_attention_equals_one_device(rotate_method, cp, is_causal, heads, kv_heads):
    q, k, v, grad_out = _inputs(heads, kv_heads, seq=16)
    gqa = heads != kv_heads
    whole = [t.clone().requires_grad_() for t in (q, k, v)]
    want = F.scaled_dot_product_attention(*whole, is_causal=is_causal, enable_gqa=gqa)
    want.backward(grad_out)
    rotate_method("alltoall")
    for rank, got in enumerate(_attention_on_ranks(cp, q, k, v, grad_out, is_causal, gqa)):
        for name, g, w in zip(("output", "dq", "dk", "dv"), got,
                              (want.detach(), *(t.grad for t in whole))):
            torch.testing.assert_close(g, shard_sequence(w, 2, cp, rank),
                                       msg=lambda m: f"rank {rank} {name}: {m}")


def test_ring_attention_in_bfloat16_is_as_close_as_one_device(rotate_method):
    # both compute in float32 and round the result once: bf16 rounding apart at most
    q, k, v, grad_out = _inputs(4, 4, seq=16, dtype=torch.bfloat16)
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    rotate_method("alltoall")
    for rank, got in enumerate(_attention_on_ranks(2, q, k, v, grad_out, True, False)):
        assert got[0].dtype == torch.bfloat16
        torch.testing.assert_close(got[0].double(), shard_sequence(want, 2, 2, rank),
                                   rtol=1.6e-2, atol=1e-2)


@pytest.mark.parametrize("cp", [1, 2, 3, 4])
def test_each_causal_block_is_exactly_the_unmasked_part(cp):
    # the causal mask from global positions, block by block: what ``block`` computes is all
    # unmasked (or the local triangle) and what it skips is all masked
    seq, local = 4 * cp, 4
    for rank, source in itertools.product(range(cp), repeat=2):
        mask = (_positions(seq, cp, rank, "cpu")[:, None]
                >= _positions(seq, cp, source, "cpu")[None, :])
        b = block(rank, source, cp, True, local)
        computed = torch.zeros(local, local, dtype=torch.bool)
        computed[b.queries, b.keys] = True
        if b.causal:
            computed &= torch.ones(local, local, dtype=torch.bool).tril()
        assert torch.equal(computed, mask), f"rank {rank}, block of rank {source}"
        if source != rank:  # half a block of work on every step after the diagonal
            assert int(computed.sum()) == local * local // 2


def _traffic(records) -> dict[int, Counter]:
    """Per global rank: messages and bytes sent and received, by op."""
    per_rank: dict[int, Counter] = {}
    for rec in records:
        for i, rank in enumerate(rec.ranks):
            c = per_rank.setdefault(rank, Counter())
            if rec.bytes_sent[i]:
                c[f"{rec.op} out"] += 1
                c[f"{rec.op} bytes out"] += rec.bytes_sent[i]
            if rec.bytes_received[i]:
                c[f"{rec.op} in"] += 1
                c[f"{rec.op} bytes in"] += rec.bytes_received[i]
    return per_rank


def _traced(cp: int, q, k, v, backward: bool):
    """The collectives of causal attention on ``cp`` ranks (and of its backward)."""
    grad_out = torch.ones(q.shape[:-1] + v.shape[-1:], dtype=q.dtype) if backward else None
    with simpg.trace() as trace:
        _attention_on_ranks(cp, q, k, v, grad_out, True, q.shape[1] != k.shape[1])
    return trace.records


@pytest.mark.parametrize("cp", [2, 4])
def test_ring_forward_sends_one_kv_block_per_step_and_gathers_nothing(rotate_method, cp):
    q, k, v, _ = _inputs(4, 2, seq=32, dtype=torch.float32)
    block_bytes = 2 * (k.numel() // cp) * k.element_size()  # this rank's keys and values
    rotate_method("alltoall")
    forward = _traced(cp, q, k, v, backward=False)
    assert {rec.op for rec in forward} == {"send"}
    assert _traffic(forward) == {
        rank: Counter({"send out": cp - 1, "send bytes out": (cp - 1) * block_bytes,
                       "send in": cp - 1, "send bytes in": (cp - 1) * block_bytes})
        for rank in range(cp)}
    assert all(rec.ranks[1] == (rec.ranks[0] + 1) % cp for rec in forward)  # to the next
    # the backward: kv blocks again and one dk/dv accumulator per step, each one block
    both = _traffic(_traced(cp, q, k, v, backward=True))
    assert all(c["send out"] == 3 * (cp - 1) and c["send bytes out"] == 3 * (cp - 1)
               * block_bytes for c in both.values())
    rotate_method("allgather")
    gathered = _traffic(_traced(cp, q, k, v, backward=False))
    assert all(c["all_gather bytes in"] == (cp - 1) * block_bytes for c in gathered.values())


def test_uneven_sequences_are_refused_as_by_the_all_gather(rotate_method):
    def refused() -> str:
        def body():
            mesh = dtensor.init_device_mesh("cpu", (2,))
            with pytest.raises(ContextParallelError) as e:
                with context_parallel(mesh, buffers=[torch.zeros(1, 6)], buffer_seq_dims=[1]):
                    pass
            return str(e.value)
        return simpg.run(body, 2)[0]

    rotate_method("allgather")
    gathered = refused()
    rotate_method("alltoall")
    assert refused() == gathered
    assert "a sequence of 6 over 2 ranks; expected a multiple of 4" in gathered


def test_what_the_ring_cannot_run_is_refused(rotate_method):
    with pytest.raises(NotImplementedError, match=r"set_rotate_method\('ring'\): expected one "
                       r"of 'allgather', 'alltoall'"):
        set_rotate_method("ring")
    rotate_method("alltoall")

    def body():
        mesh = dtensor.init_device_mesh("cpu", (2,))
        q, kv = torch.zeros(1, 4, 4, 2), torch.zeros(1, 3, 4, 2)
        with context_parallel(mesh, buffers=[torch.zeros(8)], buffer_seq_dims=[0]):
            with pytest.raises(ContextParallelError, match="attn_mask and dropout_p"):
                F.scaled_dot_product_attention(q, q, q, dropout_p=0.1)
            with pytest.raises(ContextParallelError, match=r"4 query heads and 3 key heads "
                               r"\(enable_gqa=True\); expected equal heads"):
                F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
            with pytest.raises(ContextParallelError, match=r"hold 4, 2 and 2 positions, "
                               r"expected 4 each"):
                F.scaled_dot_product_attention(q, q[..., :2, :], q[..., :2, :])
    simpg.run(body, 2)


@pytest.mark.gloo
def test_ring_attention_on_gloo_equals_one_device(tmp_path):
    from tests.support.gloo_runner import run_program_on_gloo

    results = run_program_on_gloo(PROGRAM, 2, tmp_path, timeout_s=120.0)
    for rank, got in enumerate(results):
        # forward: 1 kv block; backward: 1 kv block and 1 dk/dv accumulator (cp=2)
        assert got["ops"] == ["send"] and got["sends"] == 3, got
        for name in ("output", "dq", "dk", "dv"):
            torch.testing.assert_close(got[name], got[f"want {name}"],
                                       msg=lambda m: f"rank {rank} {name}: {m}")


# -- the bytes-per-rank table in docs/large-models.md ---------------------------------------
def test_the_docs_table_is_current():
    # the cp=2 rows (the whole table takes 20 s); bytes and modelled times are deterministic
    page = (DOCS / "large-models.md").read_text()
    for line in bytes_table(cps=(2,)).splitlines():
        assert line in page, f"docs/large-models.md lacks {line!r}: rerun this file as a script"


def _comm_seconds(records, model: simpg.CostModel) -> float:
    """The busiest rank's communication time without overlap: the model's time of each
    collective it joins, and of each message it sends. A message is not charged to its
    receiver: links are full duplex, so a rank's receive runs during its own send (simpg's
    ``estimate_trace`` serializes them, which would charge a ring step cp times)."""
    per_rank: Counter = Counter()
    for rec in records:
        for rank in rec.ranks[:1] if rec.op == "send" else rec.ranks:
            per_rank[rank] += model.estimate(rec)
    return max(per_rank.values())


def bytes_table(cps=(2, 4, 8), batch=1, heads=8, seq=2048, head_dim=64) -> str:
    """Per rank, MiB sent for one causal attention (forward; forward and backward) by each
    method, and its communication time on one NVLink node of simpg's cost model."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(batch, heads, seq, head_dim, generator=g) for _ in range(3))
    model = simpg.CostModel.nvlink_node(8)
    lines = [f"causal attention, q/k/v ({batch}, {heads}, {seq}, {head_dim}) float32; per rank "
             f"(sent = received)",
             f"time: simpg CostModel.{model.name}, communication only, no overlap",
             f"{'cp':>3} {'method':<10} {'fwd MiB':>8} {'fwd+bwd MiB':>12} {'fwd calls':>9} "
             f"{'fwd time':>10} {'fwd+bwd time':>13}"]
    before = get_rotate_method()
    try:
        for cp, method in itertools.product(cps, ("allgather", "alltoall")):
            set_rotate_method(method)
            sent, seconds, calls = [], [], 0
            for backward in (False, True):
                records = _traced(cp, q, k, v, backward)
                per_rank = _traffic(records).values()
                sent.append(max(sum(n for key, n in c.items() if key.endswith("bytes out"))
                                for c in per_rank) / 2**20)
                seconds.append(_comm_seconds(records, model) * 1e6)
                if not backward:  # collectives joined or messages sent by rank 0
                    calls = sum(1 for rec in records if rec.ranks[0] == 0 or rec.op != "send")
            lines.append(f"{cp:>3} {method:<10} {sent[0]:>8.2f} {sent[1]:>12.2f} {calls:>9} "
                         f"{seconds[0]:>7.1f} us {seconds[1]:>10.1f} us")
    finally:
        set_rotate_method(before)
    return "\n".join(lines)


if __name__ == "__main__":
    print(bytes_table())
