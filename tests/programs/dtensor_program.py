"""One dtensor program, run unchanged on simpg and on real gloo processes (4 ranks).

Uses only ``dtensor`` and ``torch.distributed``; integer-valued float64 data, so results must
agree bit for bit between any two correct backends. ``tests/test_dtensor_gloo.py`` runs
``program()`` with ``simpg.run`` and, as a script, on 4 gloo processes:

    python tests/programs/dtensor_program.py RANK WORLD_SIZE STORE_PORT OUT_PATH
"""

from __future__ import annotations

import sys
from datetime import timedelta

import torch
import torch.distributed as dist

import dtensor
from dtensor import DTensor, Partial, Replicate, Shard

TIMEOUT = timedelta(seconds=60)


def program() -> dict[str, torch.Tensor]:
    mesh = dtensor.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    full = torch.arange(7 * 5, dtype=torch.float64).reshape(7, 5)  # uneven on both mesh dims
    out: dict[str, torch.Tensor] = {}
    a = dtensor.distribute_tensor(full, mesh, [Shard(0), Shard(1)])
    out["local S(0),S(1)"] = a.to_local()
    for name, dst in {"R,S(0)": [Replicate(), Shard(0)], "S(1),S(0)": [Shard(1), Shard(0)],
                      "S(0),S(0)": [Shard(0), Shard(0)], "R,R": [Replicate(), Replicate()]}.items():
        moved = a.redistribute(mesh, dst)
        out[f"to {name}"] = moved.to_local()
        out[f"back from {name}"] = moved.redistribute(mesh, [Shard(0), Shard(1)]).to_local()
    r = dist.get_rank()
    p = DTensor.from_local(torch.full((3, 4), float(r + 1), dtype=torch.float64), mesh,
                           [Partial(), Replicate()])
    out["partial reduced"] = p.full_tensor()
    out["partial to S(1)"] = p.redistribute(mesh, [Shard(1), Replicate()]).to_local()
    rows = (2, 2, 2, 1)[r]  # 7 rows over 4 ranks, as torch.chunk cuts them
    local = torch.full((rows, 2), float(r), dtype=torch.float64)
    flat_mesh = dtensor.init_device_mesh("cpu", (4,))
    checked = DTensor.from_local(local, flat_mesh, [Shard(0)], run_check=True)
    out["run_check shape"] = torch.tensor(checked.shape)
    out["run_check full"] = checked.full_tensor()
    out["add and mul"] = (a * 2 + a).full_tensor()
    x = dtensor.distribute_tensor(full.clone().requires_grad_(), mesh, [Shard(0), Replicate()])
    y = x.redistribute(mesh, [Replicate(), Replicate()])
    (y.to_local(grad_placements=[Partial(), Replicate()]) * 3).sum().backward()
    out["grad"] = x.grad.full_tensor()
    torch.manual_seed(0)
    rand = dtensor.rand(5, 3, device_mesh=mesh, placements=[Shard(1), Shard(0)])
    out["rand"] = rand.full_tensor()
    return out


if __name__ == "__main__":
    from tests.support.gloo_runner import run_as_gloo_rank

    run_as_gloo_rank(program, sys.argv[1:], TIMEOUT)
