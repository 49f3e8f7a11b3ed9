"""Async redistributes (Note [async redistribute] in dtensor/comm/handles.py), run unchanged on
simpg and on real gloo processes (4 ranks): each result is checked in flight when
``redistribute`` returns, then used after local work; integer-valued float64 data, so both
backends must agree bit for bit. ``tests/redistribute/test_async.py`` runs ``program()`` both
ways:

    python tests/programs/redistribute_async_program.py RANK WORLD_SIZE STORE_PORT OUT_PATH
"""

from __future__ import annotations

import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import dtensor
from dtensor import DTensor, Partial, Replicate, Shard
from dtensor.comm import AsyncCollectiveTensor

TIMEOUT = timedelta(seconds=60)


def program() -> dict[str, torch.Tensor]:
    mesh = dtensor.init_device_mesh("cpu", (2, 2))
    full = torch.arange(7 * 5, dtype=torch.float64).reshape(7, 5)  # uneven on both mesh dims
    a = dtensor.distribute_tensor(full, mesh, [Shard(0), Shard(1)])
    p = DTensor.from_local(torch.full((3, 4), float(dist.get_rank() + 1), dtype=torch.float64),
                           mesh, [Partial(), Replicate()])
    moves = {"a to R,R": (a, [Replicate(), Replicate()]),
             "a to S(1),S(0)": (a, [Shard(1), Shard(0)]),
             "p to R,R": (p, [Replicate(), Replicate()]),
             "p to S(0),R": (p, [Shard(0), Replicate()])}
    issued = {}
    for name, (x, dst) in moves.items():  # all issued before any is used
        issued[name] = x.redistribute(mesh, dst, async_op=True)
    out: dict[str, torch.Tensor] = {}
    out["in flight"] = torch.tensor([type(y._local_tensor) is AsyncCollectiveTensor
                                     and not y._local_tensor.completed()
                                     for y in issued.values()])
    work = torch.ones(64, 64, dtype=torch.float64)
    for _ in range(4):  # local work meanwhile
        work = torch.tanh(work @ work / 64)
    for name, y in reversed(issued.items()):  # used in another order than issued
        out[name] = (y + 0).to_local()
    x = dtensor.distribute_tensor(full.clone().requires_grad_(), mesh, [Shard(0), Replicate()])
    (x.redistribute(mesh, [Replicate(), Replicate()], async_op=True).to_local() * 3).sum() \
        .backward()
    out["grad"] = x.grad.full_tensor()
    return out


if __name__ == "__main__":
    from tests.support.gloo_runner import run_as_gloo_rank

    run_as_gloo_rank(program, sys.argv[1:], TIMEOUT)
