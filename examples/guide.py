"""The user guide's program (docs/user-guide.md): shard a model, train it, save a checkpoint,
and resume on another mesh, checking each step against one device.

    .venv/bin/python -m examples.guide                          # 8 simulated ranks (simpg)
    .venv/bin/torchrun --standalone --nproc-per-node 4 -m examples.guide   # 4 gloo processes

It trains a small MLP with tensor parallelism (column- then row-wise linear layers) and
fully-sharded data parallelism on a dp x tp mesh, saves model and optimizer state, then builds
the same model on a 1-D mesh of all ranks (fully sharded only), loads the checkpoint into it
and trains on. The losses equal one device's that trains without stopping.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import torch
import torch.distributed as dist
from torch import nn

import dtensor
import dtensor.checkpoint as dcp
from dtensor.parallel import ColwiseParallel, RowwiseParallel, fully_shard, parallelize_module

STEPS_BEFORE, STEPS_AFTER = 3, 3


def make_model() -> nn.Module:
    torch.manual_seed(0)  # the same initial weights on every rank and in the reference
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 8))


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(step)  # the same global batch on every rank
    return torch.randn(32, 16, generator=g), torch.randn(32, 8, generator=g)


def train(model: nn.Module, opt: torch.optim.Optimizer, steps: range) -> list[float]:
    losses = []
    for step in steps:
        x, y = batch(step)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if isinstance(loss, dtensor.DTensor):  # a loss left sharded or Partial: its value
            loss = loss.full_tensor()
        losses.append(loss.item())
    return losses


def first_job(world: int, path: str) -> list[float]:
    """Tensor parallel inside each pair of ranks, fully sharded across the pairs."""
    mesh = dtensor.init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("dp", "tp"))
    model = make_model()
    parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    fully_shard(model, mesh["dp"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = train(model, opt, range(STEPS_BEFORE))
    dcp.save({"model": model.state_dict(keep_vars=True), "optim": opt.state_dict()}, path)
    return losses


def second_job(world: int, path: str) -> list[float]:
    """Another layout: fully sharded over all ranks, no tensor parallelism."""
    mesh = dtensor.init_device_mesh("cpu", (world,))
    model = fully_shard(make_model(), mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    dcp.init_optimizer_state(opt)  # the state to load into, in the new layout
    state = {"model": model.state_dict(keep_vars=True), "optim": opt.state_dict()}
    dcp.load(state, path)  # each rank reads only its pieces
    opt.load_state_dict(state["optim"])
    return train(model, opt, range(STEPS_BEFORE, STEPS_BEFORE + STEPS_AFTER))


def one_device() -> list[float]:
    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    return train(model, opt, range(STEPS_BEFORE + STEPS_AFTER))


def rank_program(world: int, path: str) -> list[float]:
    return first_job(world, path) + second_job(world, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=8, help="simulated ranks (even; default 8)")
    p.add_argument("--dir", default=None, help="checkpoint directory (default: a temporary one)")
    args = p.parse_args(argv)
    under_torchrun = "LOCAL_RANK" in os.environ
    path = os.path.join(args.dir or tempfile.mkdtemp(prefix="guide-"), "ck")
    if under_torchrun:
        dist.init_process_group("gloo")
        world = dist.get_world_size()
        if args.dir is None:  # every process must write to the same place
            p.error("under torchrun, give --dir (a directory every rank can reach)")
    else:
        world = args.ranks
    if world % 2 or world < 2:
        p.error(f"{world} ranks: expected an even number (the first job's mesh is dp x 2)")
    if under_torchrun:
        losses = rank_program(world, path)
        dist.destroy_process_group()
        if int(os.environ["RANK"]) != 0:
            return 0
    else:
        import simpg
        losses = simpg.run(rank_program, world, world, path)[0]
    want = one_device()
    print(f"{'step':>4}  {'sharded':>10}  {'one device':>10}")
    for step, (got, ref) in enumerate(zip(losses, want)):
        note = "  <- resumed on a 1-D mesh" if step == STEPS_BEFORE else ""
        print(f"{step:>4}  {got:10.6f}  {ref:10.6f}{note}")
    ok = all(abs(a - b) <= 1e-5 * max(1.0, abs(b)) for a, b in zip(losses, want))
    print("PASS: the resumed run continues one device's" if ok else "FAIL: losses differ")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
