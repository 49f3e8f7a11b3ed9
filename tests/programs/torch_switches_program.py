"""torch DTensor programs that flip process-wide switches, run unchanged on simpg and on real
gloo processes (4 ranks, a 1-d cpu mesh).

Each case enters a switch on every rank and does collectives inside it, so that on simpg one
rank leaves (or changes) the switch while the others are still inside: each rank must see
only its own switch, as each process does. ``tests/simpg/test_torch_switches.py`` runs the
cases with ``simpg.run`` under many schedules and, as this script, on 4 gloo processes:

    python tests/programs/torch_switches_program.py RANK WORLD_SIZE STORE_PORT OUT_PATH
"""

from __future__ import annotations

import sys
import warnings
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor, init_device_mesh
from torch.distributed.tensor import _random as dtensor_random
from torch.distributed.tensor.experimental import implicit_replication
from torch.distributed.tensor.parallel import loss_parallel

TIMEOUT = timedelta(seconds=60)
WORLD_SIZE = 4


def logits() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.randn(6, 10, generator=g, dtype=torch.float64)  # 10 classes on 4: 3, 3, 3, 1


TARGETS = torch.tensor([0, 9, 3, 2, 5, 7])


def loss_parallel_case() -> dict[str, Any]:
    """Vocabulary-parallel cross entropy, forward and backward inside ``loss_parallel()``, then
    the plain (gathering) cross entropy after it: ranks that left see no loss handlers while
    the ranks still inside see them."""
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    x = distribute_tensor(logits(), mesh, [Shard(-1)]).requires_grad_()
    with loss_parallel():
        loss = F.cross_entropy(x, TARGETS)
        loss.backward()
        summed = F.cross_entropy(x.detach(), TARGETS, reduction="sum")
    # no handlers: torch's own rule gathers the classes (other collectives than inside)
    plain = F.cross_entropy(x.detach(), distribute_tensor(TARGETS, mesh, [Replicate()]))
    return {"loss": loss.full_tensor().detach(), "grad": x.grad.full_tensor(),
            "summed": summed.full_tensor(), "plain": plain.full_tensor(),
            "grad placements": repr(x.grad.placements)}


def implicit_replication_case() -> dict[str, Any]:
    """A plain tensor mixed with a DTensor inside ``implicit_replication()`` is treated as
    replicated; outside it, torch refuses the mix."""
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    full = torch.arange(7 * 5, dtype=torch.float64).reshape(7, 5)  # 7 rows on 4: uneven
    d = distribute_tensor(full, mesh, [Shard(0)])
    bias = torch.arange(5, dtype=torch.float64)
    with implicit_replication():
        mixed = (d + bias).full_tensor()  # a collective inside the switch
        scaled = (d * bias).redistribute(mesh, [Shard(1)]).full_tensor()
    try:
        d + bias
        refused = False
    except RuntimeError as e:
        refused = "mixed torch.Tensor and DTensor" in str(e)
    return {"mixed": mixed, "scaled": scaled, "refused outside": refused}


def rng_case() -> dict[str, Any]:
    """DTensor's ``manual_seed`` and random ops on a sharded DTensor: on cpu torch keeps no
    RNG tracker (its ``manual_seed`` warns and returns), so each rank draws from its own
    generator, seeded differently per rank; then a rank-0-only draw between collectives."""
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    rank = dist.get_rank()
    torch.manual_seed(100 + rank)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "may not have complete support on cpu"
        dtensor_random.manual_seed(5, mesh)
        d = distribute_tensor(torch.ones(8, 6, dtype=torch.float64), mesh, [Shard(0)])
        dropped = F.dropout(d, 0.5)
        if rank == 0:
            torch.rand(3)  # only rank 0 advances its generator here
        dist.barrier()
        noise = torch.rand_like(distribute_tensor(torch.zeros(8, 6), mesh, [Shard(1)]))
    return {"dropout local": dropped.to_local(), "dropout full": dropped.full_tensor(),
            "rand_like local": noise.to_local(), "after": torch.rand(2),
            "tracker is None": dtensor_random._rng_tracker is None}


def default_dtype_case() -> dict[str, Any]:
    """``torch.set_default_dtype`` inside a rank: every rank switches to float64 for the
    DTensor work, then rank 0 alone goes back to float32 before a collective."""
    rank = dist.get_rank()
    torch.set_default_dtype(torch.float64)
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    d = distribute_tensor(torch.linspace(0, 1, 9).reshape(9, 1), mesh, [Shard(0)])
    total = (d * 3).sum().full_tensor()  # created in float64 on every rank
    if rank == 0:
        torch.set_default_dtype(torch.float32)
    dist.barrier()  # the others run while rank 0's default is float32
    made = torch.tensor([0.5])
    gathered = DTensor.from_local(torch.tensor([float(rank)]).double(), mesh,
                                  [Shard(0)]).full_tensor()
    out = {"total": total, "dtype after": str(torch.get_default_dtype()),
           "made dtype": str(made.dtype), "gathered": gathered}
    torch.set_default_dtype(torch.float32)  # the program leaves the process as it found it
    return out


CASES = {
    "loss_parallel": loss_parallel_case,
    "implicit_replication": implicit_replication_case,
    "rng": rng_case,
    "default_dtype": default_dtype_case,
}


def program() -> dict[str, dict[str, Any]]:
    return {name: case() for name, case in CASES.items()}


if __name__ == "__main__":
    from tests.support.gloo_runner import run_as_gloo_rank

    run_as_gloo_rank(program, sys.argv[1:], TIMEOUT)
