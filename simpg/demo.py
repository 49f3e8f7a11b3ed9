"""The main job for now: a short data-parallel step on simulated ranks, traced and costed.

Run: ``bash scripts/main.sh`` (or ``python -m simpg.demo --ranks 8``).
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist

import simpg


def data_parallel_step(features: int) -> float:
    """Each rank computes a gradient on its own batch; an all_reduce averages them."""
    torch.manual_seed(dist.get_rank())
    model = torch.nn.Linear(features, features)
    torch.manual_seed(100 + dist.get_rank())  # a different batch per rank
    loss = model(torch.randn(16, features)).pow(2).mean()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
    dist.broadcast(model.weight.data, src=0)
    return float(model.weight.grad.norm())


def deadlocking_step() -> None:
    if dist.get_rank() != 1:  # rank 1 forgets the collective
        dist.all_reduce(torch.ones(4))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--features", type=int, default=256)
    args = parser.parse_args()

    start = time.perf_counter()
    with simpg.trace() as trace:
        norms = simpg.run(data_parallel_step, args.ranks, args.features)
    elapsed = time.perf_counter() - start
    assert len(set(norms)) == 1, "after the all_reduce every rank holds the same gradient"
    print(f"data-parallel step on {args.ranks} simulated ranks in {elapsed * 1e3:.1f} ms; "
          f"gradient norm {norms[0]:.4f} on every rank\n")
    print(trace, "\n")
    for model in (simpg.CostModel.nvlink_node(8),
                  simpg.CostModel.infiniband_cluster(ranks_per_node=2)):
        print(trace.estimate(model), "\n")

    print("a rank that skips a collective, diagnosed instead of hanging:")
    try:
        simpg.run(deadlocking_step, args.ranks)
    except simpg.DeadlockError as e:
        print(f"{type(e).__name__}: {e}")


if __name__ == "__main__":
    main()
