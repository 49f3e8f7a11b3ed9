"""A compiled dtensor program, run unchanged on simpg and on real gloo processes (2 ranks).

Each rank runs the same functions eagerly and compiled (aot_eager) and returns both, so the
test can check compiled == eager on each backend and the two backends against each other.
Integer-valued float64 data: results must agree bit for bit.

    python tests/programs/compile_program.py RANK WORLD_SIZE STORE_PORT OUT_PATH
"""

from __future__ import annotations

import sys
from datetime import timedelta

import torch
import torch.distributed as dist

from dtensor import DTensor, Replicate, Shard, distribute_tensor, init_device_mesh

TIMEOUT = timedelta(seconds=300)


def program() -> dict[str, torch.Tensor]:
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    x_full = torch.arange(35, dtype=torch.float64).reshape(7, 5) % 7
    w_full = torch.arange(15, dtype=torch.float64).reshape(5, 3) % 4

    def loss_fn(x: DTensor, w: DTensor) -> DTensor:  # S(1) @ S(0): Partial, all_reduce
        return (x @ w).redistribute(mesh, [Replicate()]).pow(2).sum()

    def slice_fn(x: torch.Tensor) -> torch.Tensor:  # R -> S(0): uneven local slices
        return DTensor.from_local(x, mesh, [Replicate()]).redistribute(mesh, [Shard(0)]).to_local()

    out = {}
    for name, compiled in (("eager", False), ("compiled", True)):
        f = torch.compile(loss_fn, backend="aot_eager", dynamic=False) if compiled else loss_fn
        g = torch.compile(slice_fn, backend="aot_eager", dynamic=False) if compiled else slice_fn
        w = distribute_tensor(w_full, mesh, [Shard(0)]).requires_grad_()
        loss = f(distribute_tensor(x_full, mesh, [Shard(1)]), w)
        loss.backward()
        out[f"{name} loss"] = loss.to_local().detach()
        out[f"{name} grad"] = w.grad.full_tensor()
        out[f"{name} slice"] = g(x_full)
    return out


if __name__ == "__main__":
    from tests.support.gloo_runner import run_as_gloo_rank

    run_as_gloo_rank(program, sys.argv[1:], TIMEOUT)
