"""The main job: train the Llama-style model with the whole large-model stack (fully sharded
data + context + tensor + sequence + loss parallel, bf16 compute, gradient accumulation,
checkpointed activations) on a simulated mesh, and check every step's loss and the trained
weights against one device.

    python -m examples.train                       # dp x cp x tp = 2x2x2 on 8 simulated ranks
    python -m examples.train --mesh 2x2x2x2 --batch 8   # HSDP: rep x shard x cp x tp
    python -m examples.train --mesh 2x4            # dp x tp: the f32 job without cp
    python -m examples.train --mesh 2x2 --steps 20 --model small
    torchrun --nproc-per-node 4 -m examples.train --mesh 1x2x2        # real gloo processes
    torchrun --nproc-per-node 8 -m examples.train --mesh 2x2x2 --cuda # NCCL, one GPU a rank
    python -m examples.train --mesh 2x4 --steps 3 --save ck    # then resume on another mesh:
    python -m examples.train --mesh 4x2 --steps 6 --resume ck
    python -m examples.train --pp 2 --mesh 2x2x2 --model small   # pp x dp x cp x tp, 16 ranks
    torchrun --nproc-per-node 4 -m examples.train --pp 2 --mesh 1x1x2   # pp on gloo

The mesh's form picks the defaults: 3 numbers (DPxCPxTP) or 4 (REPxSHARDxCPxTP, HSDP) run the
whole stack: bf16 compute, 2 micro-batches a step, checkpointed blocks; 2 numbers (DPxTP) run
the f32 job with one batch a step and no cp, as before. ``--dtype``, ``--accumulate`` and
``--[no-]checkpoint-activations`` override either. ``--pp N`` adds a pipeline dim in front of
any of them (Note [pipeline stages]).

The same function, ``train_rank``, runs on every rank in every case (simpg, gloo, NCCL):
nothing in it knows whether the ranks are simulated. It prints the loss per step beside the
single-device loss (exit status 1 if they differ beyond ``--tolerance``), a table of every
parameter's placements, local shape and bytes per rank, per-rank state bytes, and (simulated)
the collectives per mesh dim with estimated times on an NVLink node and an InfiniBand
cluster, and a Perfetto trace.

Note [the whole stack]
- Meshes. ``fully_shard`` takes a 1-d mesh or a 2-d (replicate, shard) one, and the
  gradients of context-parallel ranks (each holds part of every sequence) must be averaged
  too, so it shards over dp x cp together (torchtitan's ``dp_shard_cp``). There is no mesh
  flattening here; a second mesh over the same ranks does it: in row-major order, dp x cp x
  tp and (dp*cp) x tp put every rank at the same place, so the ``dp_cp`` dim of the second
  is dp and cp of the first flattened. Tensor parallelism and ``fully_shard`` use the second
  (their meshes must be cut from one mesh); ``context_parallel`` takes ``mesh["cp"]`` of the
  first. HSDP: rep x shard x cp x tp and rep x (shard*cp) x tp, ``fully_shard`` over
  ``["rep", "shard_cp"]``.
- bf16: ``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)``; weights,
  gradients and AdamW stay f32. The loss is taken on f32 logits (bf16 holds a loss near 7
  to 1/32). The reference is one device with the same casts (bf16 copies of the weights,
  bf16 block inputs, f32 gradients, Note [bf16 reference]).
- Accumulation: the dp rank's rows in ``--accumulate`` micro-batches, each loss divided by
  their number, ``set_requires_gradient_sync(False)`` on all but the last.
- Context parallel: each micro-batch's tokens, targets and the rotary tables are cut along
  the sequence inside ``context_parallel`` (forward and backward, so the checkpointed
  blocks' recomputation attends across the cp ranks too).

Note [pipeline stages]
``--pp N`` puts a ``pp`` dim of N in front of the mesh (a flag, not a mesh number: four
numbers already mean HSDP): N x the mesh's ranks, torchtitan's pp x dp x cp x tp. Every rank
builds the model on the meta device and materializes only its stage (``llama.LlamaStage``:
the model's own blocks under their own names) with the values the single device's CPU build
from the seed gives them (``build_stage``; no other stage's weight is ever allocated). Each
stage is tensor-parallel and fully sharded on the data mesh of its pp coordinate, exactly as the whole model is without pp, and ``--accumulate`` is the
micro-batch count of the schedule (``--pp-schedule``, 1F1B by default), which reduces the
gradients once per step. Context parallel and loss parallel are entered around the
schedule's step, so every micro-batch's forward and backward runs inside them. The
gradient-norm clip adds the squared norms of the stages over pp. The loss is the last
stage's; the others report it after the step (one all-reduce over pp). A checkpoint holds
each parameter and its AdamW moments under the parameter's name, so a run saved with pp
resumes without it and the other way round.

Note [stages a rank]
``--pp-stages-per-rank V`` cuts the model into pp x V stages: rank r holds stages r, r + pp,
... (``interleaved``, ``looped-bfs``, ``zb``), or, for the V schedules (``zbv``,
``dualpipev``: V is 2), stages r and 2 pp - 1 - r, so rank 0 holds the first and the last.
Each stage is built on the meta device, materialized, tensor-parallel and fully sharded on
its own (fully_shard's root is the stage, whose forward the schedule calls), exactly as one
stage a rank is. For what sees the rank's parameters at once (the optimizer, the clip,
checkpoints, the weight report), ``llama.RankStages`` holds the rank's stages as one module
under the whole model's names, so checkpoints move between any of these layouts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
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
from dtensor.experimental import context_parallel, get_rotate_method, set_rotate_method
from dtensor.parallel import (FSDPModule, MixedPrecisionPolicy, fully_shard, loss_parallel,
                              parallelize_module, replicate, state_bytes)
from dtensor.pipelining import (PipelineScheduleSingle, PipelineStage, Schedule1F1B,
                                ScheduleDualPipeV, ScheduleGPipe, ScheduleInterleaved1F1B,
                                ScheduleInterleavedZeroBubble, ScheduleLoopedBFS,
                                ScheduleZBVZeroBubble)
from examples.models import llama
from examples.models.meta_init import meta_build
from examples.train_report import WEIGHT_TOLERANCE
from simpg.steprecorder import record_step

# the dims of a --mesh of 2, 3 or 4 numbers
MESH_DIM_NAMES = {2: ("dp", "tp"), 3: ("dp", "cp", "tp"), 4: ("rep", "shard", "cp", "tp")}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# Note [stages a rank]: --pp-schedule -> (the schedule, stages a rank it takes: None for any)
PP_SCHEDULES = {"gpipe": (ScheduleGPipe, 1), "1f1b": (Schedule1F1B, 1),
                "interleaved": (ScheduleInterleaved1F1B, None),
                "looped-bfs": (ScheduleLoopedBFS, None),
                # ZB1P's order, each backward in an input and a weight half
                "zb": (ScheduleInterleavedZeroBubble, None),
                "zbv": (ScheduleZBVZeroBubble, 2), "dualpipev": (ScheduleDualPipeV, 2)}
V_SHAPED = {"zbv", "dualpipev"}  # rank r holds stages r and 2 pp - 1 - r
# Note [bf16 reference]: the default --tolerance per compute dtype
TOLERANCE = {"float32": 1e-4, "bfloat16": 1e-3}


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
    # rank 0: every parameter gathered whole after the last step (checked against one device)
    weights: dict[str, torch.Tensor] = field(default_factory=dict)
    # simulated runs: the last step's kernels and collectives (simpg.steprecorder)
    timeline: Any = None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m examples.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mesh", default="2x2x2",
                   help="DPxCPxTP (default 2x2x2: the whole stack), REPxSHARDxCPxTP (HSDP, "
                   "e.g. 2x2x2x2) or DPxTP (e.g. 2x4: the f32 job without cp)")
    p.add_argument("--pp", type=int, default=1, metavar="N",
                   help="pipeline stages: a pp dim of N in front of --mesh (N x its ranks; "
                   "Note [pipeline stages]); at most the model's blocks")
    p.add_argument("--pp-schedule", choices=sorted(PP_SCHEDULES), default="1f1b",
                   help="the pipeline schedule (default 1f1b; interleaved, looped-bfs and "
                   "zb take several stages a rank, zbv and dualpipev two; zb, zbv, "
                   "dualpipev split backwards into input and weight halves); --accumulate "
                   "micro-batches")
    p.add_argument("--pp-stages-per-rank", type=int, metavar="V",
                   help="pipeline stages each pp rank holds (Note [stages a rank]; default 2 "
                   "for zbv and dualpipev, else 1): the model is cut into pp x V stages")
    p.add_argument("--model", default="tiny", choices=sorted(llama.PRESETS))
    p.add_argument("--n-heads", type=int, help="override the preset's heads (and kv heads)")
    p.add_argument("--vocab", type=int, help="override the preset's vocabulary size")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch", type=int, default=4,
                   help="global batch (divisible by the data-parallel ranks x --accumulate)")
    p.add_argument("--seq", type=int, default=32,
                   help="tokens per sequence (a multiple of 2 x cp under context parallel)")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dp", choices=("fsdp", "replicate", "none"), default="fsdp",
                   help="data parallelism over the dp (and cp) mesh dims (default fsdp)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default=None,
                   help="compute dtype; bfloat16 is fully_shard's MixedPrecisionPolicy("
                   "param_dtype=bfloat16, reduce_dtype=float32), weights and optimizer f32 "
                   "(default: bfloat16 on a 3- or 4-number --mesh, float32 on DPxTP)")
    p.add_argument("--accumulate", type=int, default=None, metavar="N",
                   help="micro-batches per step, gradients reduced after the last only "
                   "(default: 2 on a 3- or 4-number --mesh, 1 on DPxTP)")
    p.add_argument("--checkpoint-activations", action=argparse.BooleanOptionalAction,
                   default=None, help="recompute each transformer block in the backward "
                   "(torch.utils.checkpoint, non-reentrant; default: on with a 3- or 4-number "
                   "--mesh, off on DPxTP)")
    p.add_argument("--cp-rotate", choices=("allgather", "alltoall"), default="allgather",
                   help="how context-parallel attention moves keys and values: one all-gather "
                   "(default) or ring attention (dtensor.experimental.set_rotate_method)")
    p.add_argument("--no-tp", action="store_true", help="no tensor parallelism on the tp dim")
    p.add_argument("--no-sp", action="store_true", help="tensor parallel without sequence "
                   "parallel (norms and the residual stream replicated)")
    p.add_argument("--no-loss-parallel", action="store_true",
                   help="gather the logits instead of a class-sharded cross entropy")
    p.add_argument("--clip", type=float, default=1.0, help="clip_grad_norm_ max norm (0: off)")
    p.add_argument("--tolerance", type=float, default=None,
                   help="largest allowed |loss - single-device loss| (relative; default "
                   + ", ".join(f"{v:g} for {k}" for k, v in TOLERANCE.items()) + ")")
    p.add_argument("--weight-tolerance", type=float, default=None,
                   help="largest allowed |W - W_1dev| / |W_1dev - W_init| of any trained "
                   "parameter (default " + ", ".join(f"{v:g} for {k}" for k, v in
                                                      WEIGHT_TOLERANCE.items()) + ")")
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
        args.mesh_shape = tuple(int(x) for x in args.mesh.lower().split("x"))
    except ValueError:
        args.mesh_shape = ()
    if len(args.mesh_shape) not in MESH_DIM_NAMES or min(args.mesh_shape) < 1:
        p.error(f"--mesh {args.mesh!r}: expected DPxTP, DPxCPxTP or REPxSHARDxCPxTP of "
                f"positive numbers, e.g. 2x4, 2x2x2 or 2x2x2x2")
    args.mesh_dim_names = MESH_DIM_NAMES[len(args.mesh_shape)]
    size = dict(zip(args.mesh_dim_names, args.mesh_shape))
    args.rep_size, args.shard_size = size.get("rep", 1), size.get("shard", size.get("dp"))
    args.dp_size = args.rep_size * args.shard_size  # the ranks that take different rows
    args.cp_size, args.tp_size = size.get("cp", 1), size["tp"]
    whole_stack = len(args.mesh_shape) > 2
    if args.dtype is None:
        args.dtype = "bfloat16" if whole_stack and args.dp == "fsdp" else "float32"
    if args.accumulate is None:
        args.accumulate = 2 if whole_stack else 1
    if args.checkpoint_activations is None:
        args.checkpoint_activations = whole_stack
    if args.pp_stages_per_rank is None:
        args.pp_stages_per_rank = PP_SCHEDULES[args.pp_schedule][1] or 1
    if args.tolerance is None:
        args.tolerance = TOLERANCE[args.dtype]
    _check_args(p, args)
    return args


def _check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    blocks = model_config(args).n_layers
    v = args.pp_stages_per_rank
    if not 1 <= args.pp <= blocks:
        p.error(f"--pp {args.pp} with --model {args.model} ({blocks} blocks): expected 1 to "
                f"{blocks} stages, each at least one block (--model small has 4)")
    takes = PP_SCHEDULES[args.pp_schedule][1]
    if v < 1 or (takes is not None and v != takes):
        p.error(f"--pp-stages-per-rank {v} with --pp-schedule {args.pp_schedule}: expected "
                + (f"{takes}" if takes is not None else "at least 1")
                + " (gpipe and 1f1b run one stage a rank; interleaved, looped-bfs or zb take "
                  "several; zbv and dualpipev two)")
    if args.pp * v > blocks:
        p.error(f"--pp {args.pp} x --pp-stages-per-rank {v} stages with --model {args.model} "
                f"({blocks} blocks): each stage needs at least one block")
    if args.pp > 1 and args.pp_schedule == "dualpipev" and args.accumulate < 2 * args.pp:
        p.error(f"--pp-schedule dualpipev with --accumulate {args.accumulate}: expected at "
                f"least 2 x --pp = {2 * args.pp} micro-batches")
    if args.pp > 1 and args.dp == "replicate":
        p.error("--pp with --dp replicate: a pipeline stage is fully sharded (--dp fsdp) or "
                "not data parallel (--dp none)")
    if args.accumulate < 1:
        p.error(f"--accumulate {args.accumulate}: expected at least 1 micro-batch a step")
    shares = args.dp_size * args.accumulate
    if args.batch % shares:
        p.error(f"--batch {args.batch} must divide evenly over dp={args.dp_size} x "
                f"--accumulate {args.accumulate}: each dp rank averages its own rows, in "
                f"equal micro-batches, and the mean of equal shares is the global mean")
    if args.seq % (2 * args.cp_size):
        p.error(f"--seq {args.seq} over cp={args.cp_size}: context parallel cuts the sequence "
                f"in 2 x cp equal chunks (load balance under the causal mask); expected a "
                f"multiple of {2 * args.cp_size}")
    if args.dp != "fsdp" and (args.cp_size > 1 or args.rep_size > 1):
        p.error(f"--dp {args.dp} on --mesh {args.mesh}: "
                + ("HSDP (a 4-number mesh) is fully sharded" if args.rep_size > 1 else
                   "context-parallel ranks hold different tokens, so their gradients must be "
                   "averaged over dp x cp, which fully_shard does")
                + ": use --dp fsdp")
    if args.dtype != "float32" and args.dp != "fsdp":
        p.error(f"--dtype {args.dtype} with --dp {args.dp}: the casts are fully_shard's "
                f"MixedPrecisionPolicy: use --dp fsdp or --dtype float32")


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
    return llama.Llama(model_config(args),
                       checkpoint_activations=getattr(args, "checkpoint_activations", False))


def build_stage(args: argparse.Namespace, stage: int, device: str) -> llama.LlamaStage:
    """Pipeline stage ``stage`` (of ``pp x --pp-stages-per-rank``) of the model
    ``build_model`` makes, with its weights, and no other stage's ever allocated: built on the
    meta device, this stage materialized with the values a whole CPU build gives it (Note
    [meta build, CPU values] in examples/models/meta_init.py)."""
    torch.manual_seed(args.seed)
    made = meta_build(lambda: llama.Llama(
        model_config(args), checkpoint_activations=getattr(args, "checkpoint_activations",
                                                           False)))
    n_stages = args.pp * getattr(args, "pp_stages_per_rank", 1)
    part = made.materialize(llama.LlamaStage(made.model, stage, n_stages), device)
    assert isinstance(part, llama.LlamaStage)
    return part


def make_optimizer(params: Any, args: argparse.Namespace) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=args.lr, weight_decay=0.1, foreach=True)


def compute_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The cross entropy on f32 logits (torchtitan's choice): a bf16 loss near 7 is held to
    1/32, too coarse to compare; the gradient goes back to the logits in their dtype."""
    return llama.loss_fn(logits.float(), targets)


def single_device_losses(args: argparse.Namespace,
                         model: torch.nn.Module | None = None) -> list[float]:
    """The reference: the same model (built from the seed unless given), data, micro-batches,
    casts and optimizer on one device, without activation checkpointing (it changes no
    value: the sharded run's checkpointed blocks are checked against plain ones)."""
    return single_device_run(args, model)[0]


def single_device_run(args: argparse.Namespace, model: torch.nn.Module | None = None
                      ) -> tuple[list[float], dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """``single_device_losses``, and the weights before the first step and after the last."""
    device = torch.device("cuda" if args.cuda else "cpu")
    model = (model if model is not None else build_model(args)).to(device)
    initial = {n: p.detach().clone() for n, p in model.named_parameters()}
    model.checkpoint_activations = False  # type: ignore[assignment]
    dtype = DTYPES[getattr(args, "dtype", "float32")]
    micro = getattr(args, "accumulate", 1)
    opt = make_optimizer(model.parameters(), args)
    losses = []
    for step in range(args.steps):
        vocab = model.config.vocab_size  # type: ignore[union-attr]
        inputs, targets = (t.to(device) for t in batch(args, step, vocab))
        total = torch.zeros((), device=device)
        for x, y in zip(inputs.chunk(micro), targets.chunk(micro)):
            loss = compute_loss(_forward_in(model, x, dtype), y) / micro
            loss.backward()
            total += loss.detach()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        opt.zero_grad()
        losses.append(float(total))
    return losses, initial, {n: p.detach().clone() for n, p in model.named_parameters()}


def _forward_in(model: torch.nn.Module, tokens: torch.Tensor,
                dtype: torch.dtype) -> torch.Tensor:
    """Note [bf16 reference]
    One device computing as ``fully_shard(mp_policy=MixedPrecisionPolicy(param_dtype=dtype,
    reduce_dtype=float32))`` does: every weight used in its ``dtype`` copy (``.to`` is
    differentiable: the gradient comes back to the f32 weight in f32), and each block's
    floating-point inputs (the residual stream, the rotary tables) cast to ``dtype``, as
    ``cast_forward_inputs`` does for a fully sharded block. What is left to differ is the order
    of bf16 sums: tensor parallelism adds partial matmul results after each is rounded to
    bf16 (one device rounds the whole sum once), and the data-parallel ranks' losses are
    averaged in f32 from per-rank means. bf16 keeps 8 bits (relative steps of 2^-8 = 3.9e-3);
    the loss, a mean over every token, carries far less of that: measured, the sharded bf16
    losses agree with this reference to 2e-5 - 9e-5 relative over 5 to 20 steps (and with an
    f32 one device to 2e-4). The bf16 tolerance is 1e-3, a quarter of one bf16 step and 10x
    the largest measured; the f32 one stays 1e-4. The trained weights are checked too (Note [weight
    drift] in examples/train_report.py)."""
    if dtype == torch.float32:
        return model(tokens)
    handles = [layer.register_forward_pre_hook(
        lambda _m, inputs: tuple(t.to(dtype) if t.is_floating_point() else t for t in inputs))
        for layer in model.layers]  # type: ignore[union-attr]
    try:
        weights = {name: p.to(dtype) for name, p in model.named_parameters()}
        return torch.func.functional_call(model, weights, (tokens,))
    finally:
        for h in handles:
            h.remove()


def data_mesh(args: argparse.Namespace, device: str) -> dtensor.DeviceMesh:
    """The mesh fully_shard and tensor parallelism use: cp flattened into the dim before it
    (Note [the whole stack]): (dp*cp) x tp, or rep x (shard*cp) x tp for HSDP; under --pp
    this rank's stage's part of it (Note [pipeline stages])."""
    cp = "_cp" if args.cp_size > 1 else ""
    if args.rep_size > 1 or len(args.mesh_shape) == 4:
        shape = (args.rep_size, args.shard_size * args.cp_size, args.tp_size)
        names: tuple[str, ...] = ("rep", "shard" + cp, "tp")
    else:
        shape, names = (args.dp_size * args.cp_size, args.tp_size), ("dp" + cp, "tp")
    return _with_pp(args, device, shape, names)


def _with_pp(args: argparse.Namespace, device: str, shape: tuple[int, ...],
             names: tuple[str, ...]) -> dtensor.DeviceMesh:
    """A mesh of ``shape``; under --pp cut from a pp x ``shape`` one at this rank's stage."""
    if args.pp == 1:
        return dtensor.init_device_mesh(device, shape, mesh_dim_names=names)
    return dtensor.init_device_mesh(device, (args.pp, *shape),
                                    mesh_dim_names=("pp", *names))[names]


def pp_group(args: argparse.Namespace, device: str) -> tuple[Any, list[int]]:
    """The pp dim's process group and the stages this rank holds, in order (None and [0]
    without --pp; Note [stages a rank])."""
    if args.pp == 1:
        return None, [0]
    mesh = dtensor.init_device_mesh(device, (args.pp, world_size(args) // args.pp),
                                    mesh_dim_names=("pp", "rest"))
    r, pp, v = mesh.get_local_rank("pp"), args.pp, args.pp_stages_per_rank
    stages = [r, 2 * pp - 1 - r] if args.pp_schedule in V_SHAPED else \
        [r + k * pp for k in range(v)]
    return mesh.get_group("pp"), stages


def parallelize(model: llama.Llama | llama.LlamaStage, mesh: dtensor.DeviceMesh,
                args: argparse.Namespace) -> llama.Llama | llama.LlamaStage:
    """Tensor parallelism over ``mesh["tp"]``, data parallelism over its other dims (one: fully
    sharded or replicated; two: HSDP)."""
    if not args.no_tp:
        plan = llama.tp_plan(model.config, sequence_parallel=not args.no_sp,
                             loss_parallel=not args.no_loss_parallel)
        # every rank built the same weights from the seed: no broadcast needed
        if isinstance(model, llama.LlamaStage):
            plan = llama.stage_plan(plan, model)
        parallelize_module(model, mesh["tp"], plan, src_data_rank=None)
    dp_mesh = mesh[tuple(n for n in mesh.mesh_dim_names or () if n != "tp")]
    blocks = model.layers.values() if isinstance(model.layers, torch.nn.ModuleDict) \
        else model.layers
    if args.dp == "fsdp":
        dtype = DTYPES[getattr(args, "dtype", "float32")]
        policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32) \
            if dtype != torch.float32 else MixedPrecisionPolicy()
        for layer in blocks:
            fully_shard(layer, dp_mesh, mp_policy=policy)
        fully_shard(model, dp_mesh, mp_policy=policy)
    elif args.dp == "replicate":
        replicate(model, dp_mesh)
    return model


def train_rank(args: argparse.Namespace, trace_steps: bool = False) -> RankResult:
    """One rank's training run (simulated or real: the same code)."""
    device = "cuda" if args.cuda else "cpu"
    mesh = data_mesh(args, device)
    # Note [the whole stack]: the same ranks as ``mesh``, with cp a dim of its own
    cp_mesh = (_with_pp(args, device, args.mesh_shape, args.mesh_dim_names)["cp"]
               if args.cp_size > 1 else None)
    group, stage_indices = pp_group(args, device)
    if group is None:
        model = parallelize(build_model(args).to(device), mesh, args)
        schedule = None
    else:  # Note [stages a rank]: each stage parallelized as the whole model is
        parts = [parallelize(build_stage(args, i, device), mesh, args) for i in stage_indices]
        model = parts[0] if len(parts) == 1 else llama.RankStages(parts)
        n_stages = args.pp * args.pp_stages_per_rank
        stages = [PipelineStage(part, i, n_stages, group=group, mesh=mesh["tp"])
                  for part, i in zip(parts, stage_indices)]
        cls, _ = PP_SCHEDULES[args.pp_schedule]
        schedule = cls(stages[0] if issubclass(cls, PipelineScheduleSingle) else stages,
                       args.accumulate, loss_fn=compute_loss)
    opt = make_optimizer(model.parameters(), args)
    # this rank's place among the dp x cp ranks (row-major, cp fastest)
    coord = mesh.get_coordinate() or [0] * mesh.ndim
    data_index = coord[0] * mesh.shape[1] + coord[1] if mesh.ndim == 3 else coord[0]
    dp_rank, dp_size = data_index // args.cp_size, args.dp_size
    first_step = load_checkpoint(model, opt, args.resume) if args.resume else 0
    local_losses: list[torch.Tensor] = []
    records: list[Any] = []
    start = time.perf_counter()
    state: dict[str, int] = {}
    timeline = None
    micro = args.accumulate
    for step in _progress(range(first_step, args.steps), args):
        inputs, targets = batch(args, step, model.config.vocab_size)
        rows = slice(dp_rank * args.batch // dp_size, (dp_rank + 1) * args.batch // dp_size)
        inputs, targets = inputs[rows].to(device), targets[rows].to(device)
        total = torch.zeros((), device=device)
        # simulated: the collectives this rank takes part in, and the last step's kernels
        # for the exposed-communication model (Note [exposed communication] in simpg.overlap)
        recorder = record_step() if trace_steps and step == args.steps - 1 \
            else contextlib.nullcontext()
        with simpg.trace() if trace_steps else contextlib.nullcontext() as trace, \
                recorder as recording:
            if schedule is not None:
                total += _pipeline_step(schedule, model, inputs.clone(), targets.clone(),
                                        cp_mesh)
            else:
                for i, (x, y) in enumerate(zip(inputs.chunk(micro), targets.chunk(micro))):
                    if isinstance(model, FSDPModule):
                        model.set_requires_gradient_sync(i == micro - 1)
                    total += _micro_step(model, x.clone(), y.clone(), cp_mesh, micro)
            if args.clip:
                clip_grad_norm(list(model.parameters()), args.clip, group)
            opt.step()
            if step == args.steps - 1:  # measured with gradients and optimizer state alive
                state = state_bytes(list(model.parameters()), opt)
            opt.zero_grad()
        if trace is not None:
            records.extend(trace.records)
        if recording is not None:
            timeline = recording.timeline()
        local_losses.append(total.reshape(1))
    seconds = time.perf_counter() - start
    if args.save:
        save_checkpoint(model, opt, max(args.steps, first_step), args.save)
    losses = torch.cat(local_losses) if local_losses else torch.zeros(0)
    shares = dp_size * args.cp_size
    if shares > 1:  # each rank's loss is the mean of its share of rows and tokens
        dims = [n for n in mesh.mesh_dim_names or () if n != "tp"]
        dist.all_reduce(losses, op=dist.ReduceOp.SUM, group=mesh.group_for(dims))
        losses /= shares
    if group is not None:  # the last stage's losses, zeros on the others
        dist.all_reduce(losses, op=dist.ReduceOp.SUM, group=group)
    params = [(name, _fmt(p), tuple(p.shape), tuple(_local(p).shape),
               _local(p).numel() * _local(p).element_size(), p.element_size())
              for name, p in model.named_parameters()]
    with torch.no_grad():  # a collective per parameter on every rank; rank 0 keeps them
        weights = {name: (p.full_tensor() if isinstance(p, DTensor) else p).detach().cpu()
                   for name, p in model.named_parameters()}
    # one rank per stage reports its weights (rank 0 without --pp)
    reports = not any(mesh.get_coordinate() or [])
    return RankResult(dist.get_rank(), mesh.get_coordinate() or [], losses.tolist(), params,
                      state, records, seconds, first_step, weights if reports else {},
                      timeline)


def _micro_step(model: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor,
                cp_mesh: dtensor.DeviceMesh | None, micro: int) -> torch.Tensor:
    """Forward and backward of one micro-batch; its loss's share of the step's loss. Under
    context parallel the tokens, the targets and the rotary tables hold this rank's part of
    the sequence for both passes (the checkpointed blocks recompute in the backward)."""
    cut = contextlib.nullcontext() if cp_mesh is None else context_parallel(
        cp_mesh, buffers=[inputs, targets, model.freqs_cos, model.freqs_sin],
        buffer_seq_dims=[1, 1, 0, 0])
    with cut, loss_parallel():
        loss = compute_loss(model(inputs), targets) / micro
        loss.backward()
    value = loss.full_tensor() if isinstance(loss, DTensor) else loss
    return value.detach().float()


def _pipeline_step(schedule: Any, stage: llama.LlamaStage | llama.RankStages,
                   inputs: torch.Tensor, targets: torch.Tensor,
                   cp_mesh: dtensor.DeviceMesh | None) -> torch.Tensor:
    """One step of the schedule (Note [pipeline stages]): the rank of the first stage gives
    the tokens, that of the last the targets and gets the micro-batches' losses; the step's
    loss (the mean of them) there, zero on the others."""
    first, last = stage.tok_embeddings is not None, stage.output is not None
    buffers = [t for t, on in ((inputs, first), (targets, last)) if on]
    tables = [t for part in getattr(stage, "stages", [stage])
              for t in (part.freqs_cos, part.freqs_sin)]
    cut = contextlib.nullcontext() if cp_mesh is None else context_parallel(
        cp_mesh, buffers=[*buffers, *tables],
        buffer_seq_dims=[1] * len(buffers) + [0] * len(tables))
    losses: list[torch.Tensor] = []
    with cut, loss_parallel():
        schedule.step(*((inputs,) if first else ()), target=targets if last else None,
                      losses=losses)
    if not last:
        return torch.zeros((), device=inputs.device)
    values = [v.full_tensor() if isinstance(v, DTensor) else v for v in losses]
    return (sum(values) / len(values)).detach().float()


def clip_grad_norm(params: list[torch.Tensor], max_norm: float, pp: Any) -> None:
    """``clip_grad_norm_`` over the whole model: each stage's norm (a DTensor norm sums over
    its mesh) squared and added over the pp group (Note [pipeline stages])."""
    if pp is None:
        torch.nn.utils.clip_grad_norm_(params, max_norm)
        return
    grads = [p.grad for p in params if p.grad is not None]
    norm = torch.nn.utils.get_total_norm(grads)
    norm = norm.full_tensor() if isinstance(norm, DTensor) else norm
    squared = norm.float() ** 2
    dist.all_reduce(squared, group=pp)
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, squared.sqrt())


def weight_drift(weights: dict[str, torch.Tensor], initial: dict[str, torch.Tensor],
                 trained: dict[str, torch.Tensor]) -> dict[str, float]:
    """Per parameter, how far the sharded run's trained weights are from one device's,
    relative to how far training moved them there: ||W - W_1| / ||W_1 - W_0|| (Frobenius).
    A loss is a weak witness (one number, and attention at init barely moves it); this sees
    every gradient the optimizer followed."""
    out = {}
    for name, w in weights.items():
        moved = float((trained[name].float() - initial[name].float()).norm())
        out[name] = float((w.float() - trained[name].float().cpu()).norm()) / max(moved, 1e-30)
    return out


def _checkpoint_state(model: torch.nn.Module, opt: torch.optim.Optimizer, step: int) -> dict:
    """keep_vars: the parameters themselves, so a load fills them in place; the optimizer's
    state under each parameter's name, not its index, so a stage's (Note [pipeline stages])
    and the whole model's checkpoints are one format."""
    return {"model": model.state_dict(keep_vars=True),
            "optim": {name: opt.state[p] for name, p in model.named_parameters()
                      if p in opt.state},
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
    checkpoint.load(state, path)  # the moments and step counts are filled in place
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
def world_size(args: argparse.Namespace) -> int:
    return args.pp * args.dp_size * args.cp_size * args.tp_size


@contextlib.contextmanager
def _rotate_method(args: argparse.Namespace) -> Any:
    """--cp-rotate: process-wide, as torch's (simulated ranks share it); put back after."""
    before = get_rotate_method()
    set_rotate_method(getattr(args, "cp_rotate", "allgather"))
    try:
        yield
    finally:
        set_rotate_method(before)


def run_simulated(args: argparse.Namespace) -> list[RankResult]:
    with _rotate_method(args):
        return simpg.run(train_rank, world_size(args), args, True, timeout=600)


def run_torchrun(args: argparse.Namespace) -> list[RankResult] | None:
    """Under torchrun: join the launcher's process group and train; rank 0 gets every
    rank's result."""
    backend = "nccl" if args.cuda else "gloo"
    dist.init_process_group(backend)
    try:
        world = dist.get_world_size()
        if world != world_size(args):
            raise SystemExit(f"--mesh {args.mesh} needs {world_size(args)} ranks, "
                             f"torchrun started {world}")
        with _rotate_method(args):
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
    reference, initial, trained = single_device_run(args)
    reference = reference[first:]
    if first:  # the reference trained from scratch: the same weights, up to float rounding
        print(f"resumed from {args.resume} after step {first}: the loss table's step 0 is "
              f"step {first}")
    weights = {k: w for r in results for k, w in r.weights.items()}  # one rank per stage
    drift = weight_drift(weights, initial, trained)
    unreported = sorted(set(trained) - set(weights))
    if unreported:  # a stage that reported nothing would otherwise pass unseen
        drift |= {name: math.inf for name in unreported}
    ok = report(args, results, reference, elapsed, simulated=not under_torchrun, drift=drift)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"losses": results[0].losses, "reference": reference,
                       "weight_drift": drift,
                       "ranks": [asdict(r) | {"records": len(r.records), "weights": len(r.weights),
                                                  "timeline": None}
                                 for r in results]},
                      f, indent=1, default=str)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
