"""Peak live bytes per rank from simpg.steprecorder (Note [peak live bytes]): hand-checked
sizes on plain tensors and collectives, then our fully_shard and torch's FSDP2 on one model,
whose peaks must hold the sharded state and one or two gathered layers, not all of them."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn

import simpg
from simpg.steprecorder import record_step

MiB = 2**20


def _bytes(n: int) -> torch.Tensor:
    t = torch.empty(n, dtype=torch.uint8)
    t.fill_(1)
    return t


def _peak(body, world_size: int = 1, **options) -> list[int]:
    def rank():
        with record_step(memory=True, **options) as rec:
            body()
        return rec.peak_live_bytes()
    return simpg.run(rank, world_size)


def test_a_freed_storage_stops_counting():
    def body():
        a = _bytes(MiB)
        del a
        b = _bytes(2 * MiB)  # noqa: F841
    assert _peak(body) == [2 * MiB]


def test_storages_alive_together_add_up():
    def body():
        a = _bytes(MiB)
        b = _bytes(2 * MiB)  # noqa: F841
        del a
        c = _bytes(MiB)  # noqa: F841
    assert _peak(body) == [3 * MiB]


def test_a_view_is_the_same_memory():
    def body():
        a = _bytes(2 * MiB)
        a[MiB:].add_(1)
        copy = a.view(2, MiB).t().contiguous()  # noqa: F841  a new 2 MiB storage
    assert _peak(body) == [4 * MiB]


def test_two_storages_over_the_same_memory_count_once():
    memory = bytearray(MiB)

    def body():
        a = torch.frombuffer(memory, dtype=torch.uint8)
        b = torch.frombuffer(memory, dtype=torch.uint8)
        assert a.untyped_storage()._cdata != b.untyped_storage()._cdata
        a.add_(1)
        b.add_(1)
    assert _peak(body) == [MiB]


def test_a_storage_resized_to_zero_stops_counting():
    def body():  # as torch's FSDP2 frees its unsharded parameters: outside the dispatcher
        a = _bytes(2 * MiB)
        a.untyped_storage().resize_(0)
        b = _bytes(MiB)  # noqa: F841
        a.untyped_storage().resize_(2 * MiB)  # and back, also outside: counts at the next op
        _bytes(1)
    assert _peak(body) == [3 * MiB + 1]


def test_live_tensors_count_from_the_start():
    state = torch.zeros(MiB, dtype=torch.uint8)

    def body():
        a = _bytes(MiB)
        del a
        state.add_(1)  # its first use: without live=, counted from here only
    assert _peak(body) == [MiB]
    assert _peak(body, live=[state]) == [2 * MiB]


def test_simpg_data_movement_is_not_the_rank_memory():
    # the last rank to arrive runs the gather for all: a scratch cat and copies into the
    # other ranks' outputs, on its thread; only its own input and output are its memory
    def body():
        x = torch.full((MiB // 4,), float(dist.get_rank()))
        out = torch.empty(2 * MiB // 4)
        dist.all_gather_single(out, x)
    assert _peak(body, 2) == [3 * MiB, 3 * MiB]


def test_a_ranks_output_is_freed_with_its_own_work_not_the_last_ranks():
    # rank 1 still holds its Work of the gather when rank 0 drops its output and its own:
    # the output stops counting on rank 0 then, as on a real backend
    def body():
        x = torch.full((MiB // 4,), float(dist.get_rank()))
        out = torch.empty(2 * MiB // 4)
        work = dist.all_gather_single(out, x, async_op=True)
        work.wait()
        if dist.get_rank() == 0:
            del out, work
            after = _bytes(2 * MiB)  # noqa: F841
        dist.barrier()  # rank 1's work is alive until here
    assert _peak(body, 2) == [3 * MiB, 3 * MiB]


def test_peak_needs_memory_and_an_ended_block():
    def body():
        with record_step() as rec:
            pass
        with pytest.raises(RuntimeError, match=r"record_step\(memory=True\)"):
            rec.peak_live_bytes()
        with record_step(memory=True) as rec:
            with pytest.raises(RuntimeError, match="has not ended"):
                rec.peak_live_bytes()
        return rec.peak_live_bytes()
    assert simpg.run(body, 1) == [0]


RANKS, LAYERS, WIDTH = 4, 16, 128
LAYER = (WIDTH * WIDTH + WIDTH) * 4  # one Linear's parameters, float32


def _fsdp_step(lib: str) -> tuple[int, int]:
    if lib == "ours":
        from dtensor import init_device_mesh
        from dtensor.parallel import fully_shard
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (RANKS,))
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(WIDTH, WIDTH) for _ in range(LAYERS)])
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    x = torch.randn(2, WIDTH)
    for _ in range(2):  # the second step is measured: the optimizer state exists by then
        state = [*model.parameters(), *(t for s in opt.state.values() for t in s.values())]
        with record_step(memory=True, live=state) as rec:
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
    return rec._samples[0][1], rec.peak_live_bytes()


@pytest.mark.parametrize("lib", ["ours", "torch"])
def test_fully_shard_peak_holds_a_few_gathered_layers_not_all(lib):
    shard = LAYERS * LAYER // RANKS  # the rank's share of the parameters
    for at_start, peak in simpg.run(_fsdp_step, RANKS, lib):
        # parameters and AdamW's two moments, sharded, and its step count: one float each
        assert at_start == 3 * shard + 2 * LAYERS * 4
        # and the gradients' shards, plus one layer gathered at least (its gather's output
        # or its unsharded parameters) ...
        assert peak > at_start + LAYER
        # ... but at most two layers in flight, each with its gather's output, its unsharded
        # parameters and gradients and its reduce-scatter's input (torch frees its unsharded
        # parameters by resizing their storages to 0: counted, all 16 would be 16 layers)
        assert peak <= at_start + shard + 2 * 4 * LAYER, (peak - at_start) / LAYER
