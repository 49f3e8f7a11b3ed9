"""The main job: train the Llama-style model on a dp x tp mesh, fully sharded + tensor +
sequence + loss parallel, and check every step's loss against one device.

    python -m examples.train                       # 2x4 mesh on 8 simulated ranks (simpg)
    python -m examples.train --mesh 2x2 --steps 20 --model small
    torchrun --nproc-per-node 2 -m examples.train --mesh 1x2          # real gloo processes
    torchrun --nproc-per-node 8 -m examples.train --mesh 2x4 --cuda   # NCCL, one GPU a rank
    python -m examples.train --steps 3 --save ck            # then resume on another mesh:
    python -m examples.train --steps 6 --resume ck --mesh 4x2

The same function, ``train_rank``, runs on every rank in both cases: nothing in it knows
whether the ranks are simulated. It prints the loss per step beside the single-device loss
(exit status 1 if they differ beyond ``--tolerance``), a table of every parameter's
placements, local shape and bytes per rank, per-rank state bytes, and (simulated) the
collectives per mesh dim with estimated times on an NVLink node and an InfiniBand cluster,
and a Perfetto trace.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.distributed as dist

import dtensor
import simpg
from dtensor import DTensor
from dtensor.parallel import (fully_shard, loss_parallel, parallelize_module, replicate,
                              state_bytes)
from examples.models import llama


@dataclass
class RankResult:
    """What one rank reports back."""

    rank: int
    coordinate: list[int]
    losses: list[float]  # the global loss of each step (averaged over dp)
    # name, placements, global shape, local shape, local bytes, bytes per element
    params: list[tuple[str, str, tuple, tuple, int, int]] = field(default_factory=list)
    state: dict[str, int] = field(default_factory=dict)
    records: list[Any] = field(default_factory=list)  # simulated runs: the traced collectives
    seconds: float = 0.0
    first_step: int = 0  # --resume: the step the checkpoint left off at (losses start there)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m examples.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mesh", default="2x4", help="dp x tp, e.g. 2x4 (default), 1x2, 4x1")
    p.add_argument("--model", default="tiny", choices=sorted(llama.PRESETS))
    p.add_argument("--n-heads", type=int, help="override the preset's heads (and kv heads)")
    p.add_argument("--vocab", type=int, help="override the preset's vocabulary size")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch", type=int, default=4, help="global batch (divisible by dp)")
    p.add_argument("--seq", type=int, default=32, help="tokens per sequence")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dp", choices=("fsdp", "replicate", "none"), default="fsdp",
                   help="data parallelism over the dp mesh dim (default fsdp)")
    p.add_argument("--no-tp", action="store_true", help="no tensor parallelism on the tp dim")
    p.add_argument("--no-sp", action="store_true", help="tensor parallel without sequence "
                   "parallel (norms and the residual stream replicated)")
    p.add_argument("--no-loss-parallel", action="store_true",
                   help="gather the logits instead of a class-sharded cross entropy")
    p.add_argument("--clip", type=float, default=1.0, help="clip_grad_norm_ max norm (0: off)")
    p.add_argument("--tolerance", type=float, default=1e-4,
                   help="largest allowed |loss - single-device loss| (relative)")
    p.add_argument("--cuda", action="store_true", help="cuda meshes (NCCL under torchrun)")
    p.add_argument("--trace-file", default="train_trace.json",
                   help="Perfetto trace of the simulated run's collectives ('' to skip)")
    p.add_argument("--json", default="", help="write the losses and tables here")
    p.add_argument("--quiet", action="store_true", help="only the loss table and the verdict")
    p.add_argument("--save", default="", metavar="DIR",
                   help="after the last step, save the model and optimizer state to DIR "
                   "(dtensor.checkpoint: sharded, atomic; loadable on any mesh)")
    p.add_argument("--resume", default="", metavar="DIR",
                   help="load the model and optimizer state saved in DIR (on any mesh) and "
                   "train from its step up to --steps")
    args = p.parse_args(argv)
    try:
        args.dp_size, args.tp_size = (int(x) for x in args.mesh.lower().split("x"))
    except ValueError:
        p.error(f"--mesh {args.mesh!r}: expected DPxTP, e.g. 2x4")
    if args.batch % args.dp_size:
        p.error(f"--batch {args.batch} must divide evenly over dp={args.dp_size}: each dp rank "
                f"averages its own rows, and the mean of equal shares is the global mean")
    return args


def model_config(args: argparse.Namespace) -> llama.LlamaConfig:
    overrides: dict[str, Any] = {"max_seq_len": max(args.seq, 1)}
    if args.n_heads:
        overrides.update(n_heads=args.n_heads, n_kv_heads=args.n_heads,
                         dim=args.n_heads * 16)
    if args.vocab:
        overrides["vocab_size"] = args.vocab
    return llama.config(args.model, **overrides)


def batch(args: argparse.Namespace, step: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The global batch of a step: the same on every rank and on the single device."""
    g = torch.Generator().manual_seed(args.seed * 1000 + step)
    tokens = torch.randint(0, vocab, (args.batch, args.seq + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def build_model(args: argparse.Namespace) -> llama.Llama:
    torch.manual_seed(args.seed)  # every rank and the single device build the same weights
    return llama.Llama(model_config(args))


def make_optimizer(params: Any, args: argparse.Namespace) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=args.lr, weight_decay=0.1, foreach=True)


def single_device_losses(args: argparse.Namespace,
                         model: torch.nn.Module | None = None) -> list[float]:
    """The reference: the same model (built from the seed unless given), data and optimizer
    on one device."""
    device = torch.device("cuda" if args.cuda else "cpu")
    model = (model if model is not None else build_model(args)).to(device)
    opt = make_optimizer(model.parameters(), args)
    losses = []
    for step in range(args.steps):
        vocab = model.config.vocab_size  # type: ignore[union-attr]
        inputs, targets = (t.to(device) for t in batch(args, step, vocab))
        loss = llama.loss_fn(model(inputs), targets)
        loss.backward()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.detach()))
    return losses


def parallelize(model: llama.Llama, mesh: dtensor.DeviceMesh,
                args: argparse.Namespace) -> llama.Llama:
    if not args.no_tp:
        plan = llama.tp_plan(model.config, sequence_parallel=not args.no_sp,
                             loss_parallel=not args.no_loss_parallel)
        # every rank built the same weights from the seed: no broadcast needed
        parallelize_module(model, mesh["tp"], plan, src_data_rank=None)
    if args.dp == "fsdp":
        for layer in model.layers:
            fully_shard(layer, mesh["dp"])
        fully_shard(model, mesh["dp"])
    elif args.dp == "replicate":
        replicate(model, mesh["dp"])
    return model


def train_rank(args: argparse.Namespace, trace_steps: bool = False) -> RankResult:
    """One rank's training run (simulated or real: the same code)."""
    device = "cuda" if args.cuda else "cpu"
    mesh = dtensor.init_device_mesh(device, (args.dp_size, args.tp_size),
                                    mesh_dim_names=("dp", "tp"))
    model = parallelize(build_model(args).to(device), mesh, args)
    opt = make_optimizer(model.parameters(), args)
    dp_rank, dp_size = mesh.get_local_rank("dp"), args.dp_size
    first_step = load_checkpoint(model, opt, args.resume) if args.resume else 0
    local_losses: list[torch.Tensor] = []
    records: list[Any] = []
    start = time.perf_counter()
    state: dict[str, int] = {}
    for step in _progress(range(first_step, args.steps), args):
        inputs, targets = batch(args, step, model.config.vocab_size)
        rows = slice(dp_rank * args.batch // dp_size, (dp_rank + 1) * args.batch // dp_size)
        inputs, targets = inputs[rows].to(device), targets[rows].to(device)
        # simulated: the collectives this rank takes part in
        with simpg.trace() if trace_steps else contextlib.nullcontext() as trace:
            with loss_parallel():
                loss = llama.loss_fn(model(inputs), targets)
                loss.backward()
            if args.clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            opt.step()
            if step == args.steps - 1:  # measured with gradients and optimizer state alive
                state = state_bytes(list(model.parameters()), opt)
            opt.zero_grad()
        if trace is not None:
            records.extend(trace.records)
        value = loss.full_tensor() if isinstance(loss, DTensor) else loss
        local_losses.append(value.detach().reshape(1))
    seconds = time.perf_counter() - start
    if args.save:
        save_checkpoint(model, opt, max(args.steps, first_step), args.save)
    losses = torch.cat(local_losses) if local_losses else torch.zeros(0)
    if dp_size > 1:  # each dp rank's loss is the mean of its share: average the shares
        dist.all_reduce(losses, op=dist.ReduceOp.SUM, group=mesh.get_group("dp"))
        losses /= dp_size
    params = [(name, _fmt(p), tuple(p.shape), tuple(_local(p).shape),
               _local(p).numel() * _local(p).element_size(), p.element_size())
              for name, p in model.named_parameters()]
    return RankResult(dist.get_rank(), mesh.get_coordinate() or [], losses.tolist(), params,
                      state, records, seconds, first_step)


def _checkpoint_state(model: torch.nn.Module, opt: torch.optim.Optimizer, step: int) -> dict:
    # keep_vars: the parameters themselves, so a load fills them in place
    return {"model": model.state_dict(keep_vars=True), "optim": opt.state_dict(),
            "step": step}


def save_checkpoint(model: torch.nn.Module, opt: torch.optim.Optimizer, step: int,
                    path: str) -> None:
    """--save: every rank writes its own pieces; published atomically (dtensor.checkpoint)."""
    from dtensor import checkpoint

    checkpoint.save(_checkpoint_state(model, opt, step), path)


def load_checkpoint(model: torch.nn.Module, opt: torch.optim.Optimizer, path: str) -> int:
    """--resume: fill the model and optimizer, in this run's layout, from a checkpoint saved
    on any mesh; returns the step it was saved after."""
    from dtensor import checkpoint

    checkpoint.init_optimizer_state(opt)  # AdamW makes its moments at the first step
    state = _checkpoint_state(model, opt, 0)
    checkpoint.load(state, path)
    opt.load_state_dict(state["optim"])
    return int(state["step"])


def _local(p: torch.Tensor) -> torch.Tensor:
    return p._local_tensor if isinstance(p, DTensor) else p


def _fmt(p: torch.Tensor) -> str:
    if isinstance(p, DTensor):
        return "[" + ", ".join(str(x) for x in p.placements) + "]"
    return "plain"


def _progress(steps: range, args: argparse.Namespace) -> Any:
    if args.quiet or len(steps) < 20 or (dist.is_initialized() and dist.get_rank() != 0):
        return steps
    try:
        from tqdm import tqdm
    except ImportError:  # the progress bar is an optional extra
        return steps
    return tqdm(steps, desc="training", unit="step", leave=False)


# -- entry points ----------------------------------------------------------------------------
def run_simulated(args: argparse.Namespace) -> list[RankResult]:
    world = args.dp_size * args.tp_size
    return simpg.run(train_rank, world, args, True, timeout=600)


def run_torchrun(args: argparse.Namespace) -> list[RankResult] | None:
    """Under torchrun: join the launcher's process group and train; rank 0 gets every
    rank's result."""
    backend = "nccl" if args.cuda else "gloo"
    dist.init_process_group(backend)
    try:
        world = dist.get_world_size()
        if world != args.dp_size * args.tp_size:
            raise SystemExit(f"--mesh {args.mesh} needs {args.dp_size * args.tp_size} ranks, "
                             f"torchrun started {world}")
        result = train_rank(args)
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, result)
        return gathered if dist.get_rank() == 0 else None
    finally:
        dist.barrier()
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    from examples.train_report import report

    args = parse_args(argv)
    under_torchrun = "TORCHELASTIC_RUN_ID" in os.environ or "LOCAL_RANK" in os.environ
    start = time.perf_counter()
    results = run_torchrun(args) if under_torchrun else run_simulated(args)
    elapsed = time.perf_counter() - start
    if results is None:
        return 0  # not rank 0
    first = results[0].first_step
    reference = single_device_losses(args)[first:]
    if first:  # the reference trained from scratch: the same weights, up to float rounding
        print(f"resumed from {args.resume} after step {first}: the loss table's step 0 is "
              f"step {first}")
    ok = report(args, results, reference, elapsed, simulated=not under_torchrun)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"losses": results[0].losses, "reference": reference,
                       "ranks": [asdict(r) | {"records": len(r.records)} for r in results]},
                      f, indent=1, default=str)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
