"""torch DTensor programs that flip process-wide switches, run unchanged on simpg and on real
gloo processes (4 ranks, a 1-d cpu mesh).

Each case enters a switch on every rank and does collectives inside it, so that on simpg one
rank leaves (or changes) the switch while the others are still inside: each rank must see
only its own switch, as each process does. ``tests/simpg/test_torch_switches.py`` runs the
cases with ``simpg.run`` under many schedules and, as this script, on 4 gloo processes:

    python tests/programs/torch_switches_program.py RANK WORLD_SIZE STORE_PORT OUT_PATH
"""

from __future__ import annotations

import functools
import sys
import warnings
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor, init_device_mesh
from torch.distributed.tensor import _random as dtensor_random
from torch.distributed.tensor.experimental import (context_parallel, implicit_replication,
                                                   register_sharding)
from torch.distributed.tensor.parallel import loss_parallel
from torch.nn.attention import SDPBackend, sdpa_kernel

TIMEOUT = timedelta(seconds=60)
WORLD_SIZE = 4


# class counts of the vocabulary-parallel loss on 4 ranks: pieces 3, 3, 3, 1; 12 each; and
# 13, 13, 12, 12 (torch's own uneven split)
VOCABULARIES = (10, 48, 50)


def logits(classes: int = 10) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.randn(6, classes, generator=g, dtype=torch.float64)


def targets(classes: int = 10) -> torch.Tensor:
    return torch.tensor([0, classes - 1, 3, 2, classes // 2, 7])


def loss_parallel_case(classes: int) -> dict[str, Any]:
    """Vocabulary-parallel cross entropy, forward and backward inside ``loss_parallel()``, then
    the plain (gathering) cross entropy after it: ranks that left see no loss handlers while
    the ranks still inside see them."""
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    x = distribute_tensor(logits(classes), mesh, [Shard(-1)]).requires_grad_()
    with loss_parallel():
        loss = F.cross_entropy(x, targets(classes))
        loss.backward()
        summed = F.cross_entropy(x.detach(), targets(classes), reduction="sum")
    # no handlers: torch's own rule gathers the classes (other collectives than inside)
    plain = F.cross_entropy(x.detach(),
                            distribute_tensor(targets(classes), mesh, [Replicate()]))
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


aten = torch.ops.aten
FLASH = aten._scaled_dot_product_flash_attention.default


def _cp_view() -> dict[str, Any]:
    """What context parallel changes, as this rank sees it."""
    from torch.distributed.tensor.experimental._context_parallel import _attention

    strategy = DTensor._op_dispatcher.sharding_propagator.op_strategy_funcs[FLASH]
    return {"sdpa patched": F.scaled_dot_product_attention
            is not torch._C._nn.scaled_dot_product_attention,
            "cp handlers": FLASH in DTensor._op_dispatcher._custom_op_handlers,
            "cp strategy": strategy.__name__, "load balance": _attention._cp_options.enable_load_balance}


def context_parallel_case() -> dict[str, Any]:
    """torch's ``context_parallel()`` (it monkey-patches SDPA, binds a new op-handler table,
    overwrites the flash-attention sharding strategies and sets its options, all process-wide;
    on cpu it cannot run SDPA itself): every rank enters it, rank 0 leaves first and computes
    a DTensor op and a plain SDPA outside while the others are still inside."""
    rank, size = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (size,))
    d = distribute_tensor(torch.arange(8.0, dtype=torch.float64), mesh, [Shard(0)])
    before = _cp_view()
    buffer = torch.arange(16.0, dtype=torch.float64).reshape(1, 1, 8, 2)
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 2, 4, 3, generator=g, dtype=torch.float64)
    with context_parallel(mesh, buffers=[buffer], buffer_seq_dims=[2]):
        summed = d.sum().full_tensor()  # a collective inside
        inside = _cp_view()
        if rank != 0:
            dist.barrier()  # rank 0 runs outside meanwhile
            inside_later = _cp_view()
    out = {"before": before, "inside": inside, "buffer": buffer.clone(), "summed": summed}
    if rank == 0:
        out["outside early"] = _cp_view()
        out["sdpa outside"] = F.scaled_dot_product_attention(q, q, q)
        out["doubled"] = (d * 2).to_local()  # propagated with this rank's tables, no collective
        dist.barrier()
    else:
        out["inside later"] = inside_later
    dist.barrier()
    out["after"] = _cp_view()
    out["gathered"] = (d * 2).full_tensor()
    return out


def sdpa_kernel_case() -> dict[str, Any]:
    """``sdpa_kernel()`` sets torch's SDPA backends (C++ globals): even ranks allow only the
    math kernel, odd ranks math and the fused cpu one, with collectives inside."""
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 6, 4, generator=g) for _ in range(3))
    backends = [SDPBackend.MATH] if rank % 2 == 0 else [SDPBackend.FLASH_ATTENTION,
                                                         SDPBackend.MATH]
    flags = torch.backends.cuda
    with sdpa_kernel(backends):
        dist.barrier()
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        # float64 so gloo's other adding order stays within the comparison's ulps
        total = distribute_tensor(out.double(), mesh, [Shard(2)]).sum().full_tensor()
        inside = (flags.flash_sdp_enabled(), flags.math_sdp_enabled())
    dist.barrier()
    return {"inside": inside, "after": (flags.flash_sdp_enabled(), flags.math_sdp_enabled()),
            "out": out, "total": total}


def _rows_or_replicated(x: Any, y: Any) -> list:
    return [([Shard(0)], [Shard(0), Shard(0)]), ([Replicate()], [Replicate(), Replicate()])]


def register_sharding_case() -> dict[str, Any]:
    """``register_sharding`` writes into the sharding propagator's process-wide table: rank 0
    registers a strategy for ``aten.special_xlog1py`` (torch has one; rank 0's replaces it) and
    uses it; the other ranks use torch's own, between the same collectives."""
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    op = aten.special_xlog1py.default
    table = DTensor._op_dispatcher.sharding_propagator.op_strategy_funcs
    d = distribute_tensor(torch.arange(1.0, 9.0, dtype=torch.float64), mesh, [Shard(0)])
    if rank == 0:
        register_sharding(op)(_rows_or_replicated)
    dist.barrier()
    result = torch.special.xlog1py(d, d)
    out = {"registered": isinstance(table.get(op), functools.partial),  # register_sharding's
           "placements": repr(result.placements)}
    dist.barrier()
    out["value"] = result.full_tensor()
    return out


CASES = {
    **{f"loss_parallel {classes} classes": functools.partial(loss_parallel_case, classes)
       for classes in VOCABULARIES},
    "implicit_replication": implicit_replication_case,
    "rng": rng_case,
    "default_dtype": default_dtype_case,
    "context_parallel": context_parallel_case,
    "sdpa_kernel": sdpa_kernel_case,
    "register_sharding": register_sharding_case,
}


def program() -> dict[str, dict[str, Any]]:
    return {name: case() for name, case in CASES.items()}


if __name__ == "__main__":
    from tests.support.gloo_runner import run_as_gloo_rank

    run_as_gloo_rank(program, sys.argv[1:], TIMEOUT)
