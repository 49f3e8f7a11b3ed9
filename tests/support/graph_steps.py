"""What the dtensor.graph tests share: the small models they capture and plan (seeded, so
every test sees the same weights), their loss, and the bytes a planned step moved over all
ranks, to compare with the plan's ``total_bytes``."""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.distributed as dist

import dtensor
import simpg
from dtensor.graph import run
from examples.models import llama


def mse(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((out - target) ** 2).mean()


def tiny_mlp() -> torch.nn.Module:
    """Linear(8, 32), GELU, Linear(32, 7), seeded 0."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.Linear(32, 7))


def tiny_llama(n_layers: int = 1, batch: int = 4) -> tuple[llama.Llama, torch.Tensor]:
    """The Llama the graph tests plan (dim 32, 4 heads over 2 kv heads, vocabulary 64),
    seeded 0, and ``batch`` sequences of 8 tokens drawn after it."""
    cfg = llama.config("tiny", dim=32, n_layers=n_layers, n_heads=4, n_kv_heads=2,
                       ffn_hidden=48, vocab_size=64, max_seq_len=8)
    torch.manual_seed(0)
    model = llama.Llama(cfg)
    return model, torch.randint(0, cfg.vocab_size, (batch, 8))


def bytes_received_everywhere(records: Iterable) -> int:
    """The bytes every rank received in ``records`` (a ``simpg.trace()``'s), summed over the
    ranks by an all_reduce: every rank calls it and gets the total."""
    rank = dist.get_rank()
    mine = torch.tensor([sum(r.bytes_received[r.ranks.index(rank)] for r in records)])
    dist.all_reduce(mine)
    return int(mine.item())


def run_moving_the_planned_bytes(plan, mesh_shape: tuple[int, ...], flat: list) -> list:
    """Run ``plan`` (``dtensor.graph.run``) on a new mesh of ``mesh_shape`` under a trace,
    check that the ranks received exactly the plan's ``total_bytes`` between them, and
    return the outputs. Every rank calls it."""
    mesh = dtensor.init_device_mesh("cpu", mesh_shape)
    with simpg.trace() as t:
        outs = run(plan, mesh, *flat)
    assert bytes_received_everywhere(t.records) == plan.total_bytes
    return outs
