"""HSDP: fully_shard on a 2-d (replicate, shard) mesh (Note [HSDP] in
dtensor/parallel/fsdp.py): gathers and reduce-scatters on the shard dim, one all-reduce
across replicas per module; training equals one device, alone and with tensor parallel on
a third mesh dim; equal to torch's FSDP2 HSDP, with its collectives, at most its bytes."""

from __future__ import annotations

import pytest
import torch

import simpg
from dtensor import Replicate, Shard, fallback_policy, init_device_mesh
from dtensor.parallel import fully_shard
from tests.support.dropin_world import fresh_torch_caches
from tests.support.fsdp_net import Net, data_parallel_blocks, tensor_parallel_blocks, train

X = torch.randn(8, 5, 8, generator=torch.Generator().manual_seed(0))


def _rows(n: int) -> torch.Tensor:
    """The rows n data-parallel ranks share equally (6 of 8 over 6 ranks)."""
    return X[:len(X) // n * n]


def _hsdp_body(mesh_shape: tuple[int, int, int]) -> tuple[list[float], dict, list, tuple]:
    replicas, shards, tp = mesh_shape
    mesh = init_device_mesh("cpu", mesh_shape, mesh_dim_names=("rep", "shard", "tp"))
    torch.manual_seed(0)
    model = Net()
    if tp > 1:
        tensor_parallel_blocks(model, mesh["tp"])
    data_parallel_blocks(model, mesh["rep", "shard"])
    dp_rank = mesh.get_local_rank("rep") * shards + mesh.get_local_rank("shard")
    with simpg.trace() as t:
        model(_rows(replicas * shards).chunk(replicas * shards)[dp_rank]).sum().backward()
    model.zero_grad()
    ops = sorted({(r.op, len(r.ranks)) for r in t.records})
    with fallback_policy("error"):
        losses = train(model, _rows(replicas * shards).chunk(replicas * shards)[dp_rank], 3)
    full = {n: p.full_tensor() for n, p in model.named_parameters()}
    w1 = model.blocks[0].w1.weight
    return losses, full, ops, (w1.placements, w1.device_mesh.mesh_dim_names)


@pytest.mark.parametrize("mesh_shape", [(2, 2, 1), (2, 2, 2), (3, 2, 1)],
                         ids=["rep2xshard2", "rep2xshard2xtp2", "rep3xshard2-uneven"])
def test_hsdp_trains_like_one_device(mesh_shape):
    replicas, shards, tp = mesh_shape
    torch.manual_seed(0)
    ref = Net()
    ref_losses = train(ref, _rows(replicas * shards), 3)
    results = simpg.run(_hsdp_body, replicas * shards * tp, mesh_shape)
    for step, expected in enumerate(ref_losses):
        mean = sum(r[0][step] for r in results) / len(results)
        assert mean == pytest.approx(expected, rel=1e-5)
    for losses, full, ops, placements in results:
        for name, p in ref.named_parameters():
            torch.testing.assert_close(full[name], p.detach(), msg=name)
        # on the whole mesh; w1 is column-wise under tp: the shard dim cuts its dim 0 inside
        # each tp piece, on the mesh with the shard dim last (Note [nested dp inside tp])
        assert placements == (((Replicate(), Replicate(), Shard(0)), ("rep", "tp", "shard"))
                              if tp == 1 else
                              ((Replicate(), Shard(0), Shard(0)), ("rep", "tp", "shard")))
        # gathers and reduce-scatters over the shard dim, all-reduces across the replicas
        # (and tp's own all-reduces of activations)
        assert ("all_gather", shards) in ops and ("reduce_scatter", shards) in ops
        assert ("all_reduce", replicas) in ops
        assert not any(op in ("all_gather", "reduce_scatter") and n != shards for op, n in ops)


def _both_libraries(lib: str, accumulate: bool) -> tuple[dict, list]:
    """One rank of Net under HSDP on a 2x2 mesh with ``lib``'s fully_shard: two steps (each
    of two micro-batches synced on the last, with ``accumulate``); the last step's trace."""
    if lib == "torch":
        from torch.distributed.device_mesh import init_device_mesh as torch_mesh
        from torch.distributed.fsdp import fully_shard as torch_fully_shard
        fresh_torch_caches()
        shard, mesh = torch_fully_shard, torch_mesh("cpu", (2, 2),
                                                     mesh_dim_names=("rep", "shard"))
    else:
        shard, mesh = fully_shard, init_device_mesh("cpu", (2, 2),
                                                    mesh_dim_names=("rep", "shard"))
    torch.manual_seed(0)
    model = Net()
    for module in (*model.blocks, model):
        shard(module, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
    rows = X.chunk(4)[mesh.get_local_rank("rep") * 2 + mesh.get_local_rank("shard")]
    micro = rows.chunk(2) if accumulate else [rows]
    for _ in range(2):
        with simpg.trace() as t:
            for i, x in enumerate(micro):
                if accumulate:
                    model.set_requires_gradient_sync(i == len(micro) - 1)
                (model(x).pow(2).mean() / len(micro)).backward()
        opt.step()
        opt.zero_grad()
    names = {"all_gather_into_tensor": "all_gather", "reduce_scatter_tensor": "reduce_scatter"}
    records = [(names.get(r.op, r.op), len(r.ranks), r.total_bytes) for r in t.records]
    full = {n: p.full_tensor() for n, p in model.named_parameters()}
    if lib == "torch":
        fresh_torch_caches()
    return full, records


# torch warns that Net's output is a view (its head's over 3-d activations): no in-place op
@pytest.mark.filterwarnings("ignore:FSDP2-wrapped module")
@pytest.mark.parametrize("accumulate", [False, True], ids=["plain", "accumulate"])
def test_hsdp_matches_torch_fsdp2_with_its_collectives_and_at_most_its_bytes(accumulate):
    theirs = simpg.run(_both_libraries, 4, "torch", accumulate)
    ours = simpg.run(_both_libraries, 4, "ours", accumulate)
    for (o_params, o_records), (t_params, t_records) in zip(ours, theirs):
        for name, p in t_params.items():
            torch.testing.assert_close(o_params[name], p, rtol=1e-6, atol=1e-7, msg=name)
        # the same collectives on the same groups (torch issues the backward's next gather
        # before the reduce-scatter: it prefetches)
        assert sorted(r[:2] for r in o_records) == sorted(r[:2] for r in t_records)
        # torch pads the uneven pieces (the head's 3 rows over 2 shards); we send them as is
        assert sum(r[2] for r in o_records) <= sum(r[2] for r in t_records)
