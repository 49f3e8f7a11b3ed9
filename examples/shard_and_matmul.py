"""Shard a matmul over N ranks with our dtensor: the same file runs on simulated ranks and
under torchrun on real GPUs (NCCL) or CPUs (gloo).

    python examples/shard_and_matmul.py --simulate 4                # simpg, one process
    torchrun --nproc-per-node 2 examples/shard_and_matmul.py         # gloo on CPU
    torchrun --nproc-per-node 8 examples/shard_and_matmul.py --cuda  # NCCL, one GPU per rank
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist

import dtensor
from dtensor import Replicate, Shard


def step(device_type: str) -> float:
    n = dist.get_world_size()
    mesh = dtensor.init_device_mesh(device_type, (n,))
    torch.manual_seed(0)  # every rank draws the same full tensors
    x = dtensor.randn(37, 64, device_mesh=mesh, placements=[Shard(0)])  # uneven rows
    w = dtensor.distribute_tensor(torch.randn(64, 16, device=device_type), mesh, [Replicate()])
    y = torch.mm(x, w)  # row-sharded output, no communication
    total = y.sum()  # Partial(sum): each rank holds its rows' share
    return float(total.full_tensor())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--simulate", type=int, metavar="N", help="run on N simpg ranks")
    parser.add_argument("--cuda", action="store_true", help="cuda meshes (NCCL under torchrun)")
    args = parser.parse_args()
    if args.simulate:
        import simpg

        print(simpg.run(step, args.simulate, "cpu"))
        return
    device = "cuda" if args.cuda else "cpu"
    dist.init_process_group("nccl" if args.cuda else "gloo")
    try:
        result = step(device)
        if dist.get_rank() == 0:
            print(result)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
