"""Context parallelism (Note [context parallel] in dtensor.parallel.context): the Llama model
on a sequence split over 2 and 4 ranks, causal attention made whole across them by an
all-gather or by ring attention (Note [rotate method]), gives one device's logits, loss and
gradients; errors for what cannot be split."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

import dtensor
import simpg
from dtensor.experimental import (ContextParallelError, context_parallel, get_rotate_method,
                                  set_rotate_method)
from dtensor.parallel.context import shard_sequence
from examples.models import llama

SEQ = 16


def _model() -> llama.Llama:
    torch.manual_seed(0)
    return llama.Llama(llama.config("tiny", n_layers=2, vocab_size=64, max_seq_len=SEQ))


def _one_device(model, tokens, targets):
    model = copy.deepcopy(model)
    logits = model(tokens)
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(0, 1))
    loss.backward()
    return logits.detach(), loss.detach(), {n: p.grad for n, p in model.named_parameters()}


@pytest.fixture(params=["allgather", "alltoall"])
def rotate_method(request):
    """Each method in turn, set before the ranks start (it is process-wide), then restored."""
    before = get_rotate_method()
    set_rotate_method(request.param)
    yield request.param
    set_rotate_method(before)


@pytest.mark.parametrize("cp", [2, 4])
def test_llama_on_a_split_sequence_equals_one_device(cp, rotate_method):
    model = _model()
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 64, (2, SEQ), generator=g)
    targets = torch.randint(0, 64, (2, SEQ), generator=g)
    want_logits, want_loss, want_grads = _one_device(model, tokens, targets)

    def body():
        mesh = dtensor.init_device_mesh("cpu", (cp,), mesh_dim_names=("cp",))
        mine = copy.deepcopy(model)
        x, y = tokens.clone(), targets.clone()
        with context_parallel(mesh, buffers=[x, y, mine.freqs_cos, mine.freqs_sin],
                              buffer_seq_dims=[1, 1, 0, 0]):
            assert x.shape == (2, SEQ // cp)  # this rank's part, in place
            logits = mine(x)
            loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(0, 1))
            loss.backward()
        assert x.shape == (2, SEQ) and mine.freqs_cos.shape[0] == SEQ  # restored
        rank = dist.get_rank()
        torch.testing.assert_close(logits.detach(),
                                   shard_sequence(want_logits, 1, cp, rank), rtol=1e-5, atol=1e-5)
        total = loss.detach().clone()
        dist.all_reduce(total)
        torch.testing.assert_close(total / cp, want_loss, rtol=1e-5, atol=1e-6)
        for n, p in mine.named_parameters():
            grad = p.grad.clone()
            dist.all_reduce(grad)  # the mean over the context ranks, as data parallel does
            torch.testing.assert_close(grad / cp, want_grads[n], rtol=1e-4, atol=1e-6,
                                       msg=f"gradient of {n}")

    with simpg.trace() as trace:
        simpg.run(body, cp)
    moved = {rec.op for rec in trace.records} - {"all_reduce"}  # the test's own sums
    assert moved == ({"send"} if rotate_method == "alltoall" else
                     {"all_gather", "reduce_scatter"})


def test_each_rank_holds_an_early_and_a_late_chunk():
    t = torch.arange(8)
    assert [shard_sequence(t, 0, 2, r).tolist() for r in range(2)] == [[0, 1, 6, 7], [2, 3, 4, 5]]


def test_what_cannot_be_split_is_refused():
    def body():
        mesh = dtensor.init_device_mesh("cpu", (2,))
        with pytest.raises(ContextParallelError, match=r"a sequence of 6 over 2 ranks; expected "
                           r"a multiple of 4"):
            with context_parallel(mesh, buffers=[torch.zeros(1, 6)], buffer_seq_dims=[1]):
                pass
        with pytest.raises(ContextParallelError, match="2 buffers and 1 buffer_seq_dims"):
            with context_parallel(mesh, buffers=[torch.zeros(8), torch.zeros(8)],
                                  buffer_seq_dims=[0]):
                pass
        q = torch.zeros(1, 1, 4, 2)
        with context_parallel(mesh, buffers=[torch.zeros(8)], buffer_seq_dims=[0]):
            with pytest.raises(ContextParallelError, match="attn_mask and dropout_p"):
                F.scaled_dot_product_attention(q, q, q, dropout_p=0.1)
    simpg.run(body, 2)


def test_checkpointed_blocks_recompute_their_attention_across_the_ranks():
    """Note [context parallel in the backward]: ``loss.backward()`` inside the block keeps the
    context-parallel attention on for the recomputation of checkpointed blocks."""
    model = _model()
    g = torch.Generator().manual_seed(2)
    tokens, targets = (torch.randint(0, 64, (2, SEQ), generator=g) for _ in range(2))
    _, want_loss, want_grads = _one_device(model, tokens, targets)

    def body():
        mesh = dtensor.init_device_mesh("cpu", (2,), mesh_dim_names=("cp",))
        mine = copy.deepcopy(model)
        mine.checkpoint_activations = True
        x, y = tokens.clone(), targets.clone()
        with context_parallel(mesh, buffers=[x, y, mine.freqs_cos, mine.freqs_sin],
                              buffer_seq_dims=[1, 1, 0, 0]):
            loss = F.cross_entropy(mine(x).flatten(0, 1), y.flatten(0, 1))
            loss.backward()
        total = loss.detach().clone()
        dist.all_reduce(total)
        torch.testing.assert_close(total / 2, want_loss, rtol=1e-5, atol=1e-6)
        for n, p in mine.named_parameters():
            grad = p.grad.clone()
            dist.all_reduce(grad)
            torch.testing.assert_close(grad / 2, want_grads[n], rtol=1e-4, atol=1e-6,
                                       msg=f"gradient of {n}")

    simpg.run(body, 2)


def test_attention_on_tensor_parallel_heads():
    """Note [context parallel under tensor parallel]: q, k, v DTensors with their heads sharded
    over tp attend across the cp ranks; the output keeps their layout. A sharded sequence or
    feature dim is refused."""
    from dtensor import DTensor, Shard

    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 4, SEQ, 8, generator=g) for _ in range(3))
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def body():
        mesh = dtensor.init_device_mesh("cpu", (2, 2), mesh_dim_names=("cp", "tp"))
        tp = mesh.get_local_rank("tp")
        parts = [t.clone() for t in (q, k, v)]
        with context_parallel(mesh["cp"], buffers=parts, buffer_seq_dims=[2, 2, 2]):
            heads = [DTensor.from_local(t.chunk(2, dim=1)[tp], mesh["tp"], [Shard(1)])
                     for t in parts]
            out = F.scaled_dot_product_attention(*heads, is_causal=True)
            assert isinstance(out, DTensor) and tuple(out.placements) == (Shard(1),)
            torch.testing.assert_close(out.full_tensor(), shard_sequence(
                want, 2, 2, mesh.get_local_rank("cp")), rtol=1e-5, atol=1e-6)
            by_position = [DTensor.from_local(t.chunk(2, dim=2)[tp], mesh["tp"], [Shard(2)])
                           for t in parts]
            with pytest.raises(ContextParallelError, match="expected the positions and "
                               "features .* whole"):
                F.scaled_dot_product_attention(*by_position, is_causal=True)

    simpg.run(body, 4)
