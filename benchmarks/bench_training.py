"""Parallel training, ours against torch's: the same Llama-style model, data, optimizer and
dp x tp mesh, trained once with our DTensor runtime and once with torch.distributed.tensor.

    .venv/bin/python benchmarks/bench_training.py                 # 2x4 mesh, 8 simpg ranks
    .venv/bin/python benchmarks/bench_training.py --mesh 2x2 --steps 4 --model small
    .venv/bin/python benchmarks/bench_training.py --quick         # 2 steps of 8 tokens
    .venv/bin/python benchmarks/bench_training.py --gloo          # 2 real gloo processes
    .venv/bin/python benchmarks/bench_training.py --quick --mesh 2x2 --features  # + features

ours:  ``examples.train.parallelize`` (our tensor + sequence parallel plan, our
       ``fully_shard`` per layer and root over mesh["dp"]) and our ``loss_parallel``.
torch: ``torch.distributed.tensor.parallel.parallelize_module`` with the identical plan
       (``llama.tp_plan(..., styles=torch.distributed.tensor.parallel)``), torch's
       ``loss_parallel`` and ``torch.distributed.fsdp.fully_shard`` per layer and root over
       mesh["dp"]. If torch's side raises, both sides fall back to tensor parallel alone on a
       1 x tp mesh, and the header says so.
Both:  AdamW (foreach), ``clip_grad_norm_`` (``--clip``), each dp rank its rows of the
       global batch; losses (averaged over dp) against the same model on one device.

What it takes to run torch's side here, and what this script does about it:
- torch's DTensor has no sharding rule for CPU flash attention
  (``aten._scaled_dot_product_flash_attention_for_cpu``): torch's side runs
  ``scaled_dot_product_attention`` in its math form (``sdpa_kernel(SDPBackend.MATH)``). Its
  causal mask is a plain tensor, which torch refuses to mix with DTensors: torch's ranks
  train under ``implicit_replication()`` (thread-local). Ours runs the default kernel, as
  examples.train does (``--ours-attention math`` runs ours in the math form too).
- torch's ``loss_parallel()`` adds and removes handlers in one process-wide table; each
  simulated rank enters it around its own step, as on real processes: simpg gives every rank
  its own copy of that table (Note [values and objects] in simpg/isolation.py).
- torch's DTensor caches sharding propagation per thread (Python and C++) and redistribute
  plans per process, keyed by meshes that compare equal across simpg worlds and ranks, and
  simpg reuses its rank threads: each torch rank clears those caches when it starts and when
  it ends (``_fresh_torch_caches``), so no rank sees results computed for another.
- torch's styles split heads on local views: n_heads and n_kv_heads must divide tp, so the
  default kv heads become n_heads when the preset's do not divide tp (the "tiny" preset's
  8 heads over 4 kv heads divide tp=4 and are kept); ``--kv-heads`` sets them.

Figures (simpg): the step time is the median wall time of the steps after a warm-up step
(both worlds in this process, their ranks taking turns on one core: a world's step, not a
rank's); collectives and bytes come from ``simpg.trace()`` opened inside each rank over the
same steps, per mesh dim, for the rank that receives the most; state bytes are each rank's
local parameters, gradients and AdamW moments after the last ``opt.step()``, largest rank.
The "modelled" rows price one extra, untimed step per side (``simpg.steprecorder``: each
rank's kernels with their FLOPs and bytes, each collective's issue and wait point) on a
modelled H100 with NVLink in one node ("nvlink-node") or across InfiniBand nodes of one tp
group each ("ib-cluster"): the step time, its compute, and the exposed communication, the
part of the collectives' time the compute does not hide (Note [exposed communication] in
simpg.overlap). The peak row is that step's too: per rank, the most bytes of live storages
after any of its ops (parameters and optimizer state counted from the step's start, freed and
resized-to-0 storages not at all: Note [peak live bytes] in simpg.steprecorder), largest rank.
``--features`` adds a table per feature (fsdp, fsdp+tp, hsdp, bf16 mixed
precision, activation checkpointing, 2 micro-batches), ours next to torch's FSDP2.
With ``--gloo`` (2 processes, each training ours and then torch's in one process group;
mesh 1x2 by default, or 2x1): step time, state bytes and losses; nothing is traced.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import logging
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `examples` is not an installed package: run from anywhere
    sys.path.insert(0, str(ROOT))

from dtensor.parallel import state_bytes  # noqa: E402
from examples import train  # noqa: E402
from examples.models import llama  # noqa: E402
from examples.train_report import collective_summary, unique_records  # noqa: E402
from simpg.overlap import INTERCONNECTS, interconnect  # noqa: E402

from opdb_tests import readme_figures  # noqa: E402

try:  # run as a script, benchmarks/ is on sys.path; loaded by the tests, the root is
    import conditions  # noqa: E402
except ImportError:
    from benchmarks import conditions  # noqa: E402

LIBS = ("ours", "torch")
FULL = "fsdp+tp+sp+loss"  # fully sharded over dp, tensor + sequence + loss parallel over tp
TP_ONLY = "tp+sp+loss"  # the fallback: tensor parallel alone on a 1 x tp mesh
STATE_KINDS = ("parameters", "gradients", "optimizer")
COMM_TIME = "est. comm time/step, NVLink node (us, serial)"  # simpg's cost model, all dims
PEAK = "peak live bytes/rank during the step (max over ranks)"  # simpg.steprecorder
DEVICE = "h100"  # the modelled device of the overlap rows (Note [device presets], simpg.overlap)


@dataclass
class RankRun:
    """What one rank of one library reports back."""

    rank: int
    losses: list[float]  # each step's global loss (averaged over dp)
    step_s: list[float]  # wall seconds of each step, warm-up included
    state: dict[str, int] = field(default_factory=dict)  # local bytes after the last step
    records: list[Any] = field(default_factory=list)  # simpg: collectives of measured steps
    timeline: Any = None  # simpg: a recorded extra step (simpg.overlap.RankTimeline)
    peak_bytes: int | None = None  # simpg: the recorded step's peak live bytes


@dataclass
class Side:
    """One library's run, folded over its ranks."""

    lib: str
    config: str
    mesh: tuple[int, int]
    ranks: list[RankRun] = field(default_factory=list)
    error: str = ""  # why this library's run (or its full configuration) did not run


# -- arguments ---------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mesh", help="dp x tp (default 2x4; 1x2 with --gloo)")
    p.add_argument("--model", default="tiny", choices=sorted(llama.PRESETS))
    p.add_argument("--kv-heads", type=int, help="kv heads (default: the preset's if they "
                   "divide tp, else n_heads)")
    p.add_argument("--steps", type=int, help="steps, the first a warm-up (default 6; 2 quick)")
    p.add_argument("--batch", type=int, default=4, help="global batch (divisible by dp)")
    p.add_argument("--seq", type=int, help="tokens per sequence (default 32; 8 quick)")
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--clip", type=float, default=1.0, help="clip_grad_norm_ max norm (0: off)")
    p.add_argument("--tolerance", type=float, default=1e-4,
                   help="largest allowed relative loss difference from one device")
    p.add_argument("--ours-attention", choices=("default", "math"), default="default",
                   help="ours' attention kernel (torch's side always runs the math form)")
    p.add_argument("--quick", action="store_true", help="2 steps of 8 tokens")
    p.add_argument("--features", action="store_true",
                   help="also the per-feature table: fsdp, fsdp+tp, hsdp, bf16 mixed "
                   "precision, activation checkpointing, 2 micro-batches (simpg only)")
    p.add_argument("--write-readme", action="store_true",
                   help="also rewrite this run's block of README.md (simulated or --gloo)")
    p.add_argument("--gloo", action="store_true",
                   help="2 real gloo processes instead of simpg (no collective figures)")
    # one gloo worker process: rank, TCPStore port, output file (started by --gloo)
    p.add_argument("--gloo-worker", nargs=3, metavar=("RANK", "PORT", "OUT"),
                   help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.mesh = args.mesh or ("1x2" if args.gloo or args.gloo_worker else "2x4")
    args.steps = args.steps or (2 if args.quick else 6)
    args.seq = args.seq or (8 if args.quick else 32)
    if args.steps < 2:
        p.error(f"--steps {args.steps}: need a warm-up step and at least one measured step")
    try:
        train_argv = ["--mesh", args.mesh, "--model", args.model, "--steps", str(args.steps),
                      "--batch", str(args.batch), "--seq", str(args.seq), "--lr", str(args.lr),
                      "--seed", str(args.seed), "--clip", str(args.clip)]
        # the main job's own options for ours: fsdp + tp + sp + loss parallel
        args.train = train.parse_args(train_argv)
    except SystemExit:
        p.error(f"--mesh {args.mesh} / --batch {args.batch}: see the message above")
    args.dp_size, args.tp_size = args.train.dp_size, args.train.tp_size
    if args.features and args.gloo:
        p.error("--features runs on simpg only: drop --gloo")
    if (args.gloo or args.gloo_worker) and args.dp_size * args.tp_size != 2:
        p.error(f"--gloo runs 2 processes: --mesh {args.mesh} has "
                f"{args.dp_size * args.tp_size} ranks (try 1x2 or 2x1)")
    try:
        args.config = model_config(args)
    except ValueError as e:
        p.error(str(e))
    return args


def model_config(args: argparse.Namespace) -> llama.LlamaConfig:
    """The preset, with kv heads torch's plan can split over tp (see the module's note)."""
    preset = llama.PRESETS[args.model]
    kv = args.kv_heads or (preset.n_kv_heads if preset.n_kv_heads % args.tp_size == 0
                           else preset.n_heads)
    cfg = llama.config(args.model, n_kv_heads=kv, max_seq_len=max(args.seq, 1))
    if cfg.n_heads % args.tp_size or cfg.n_kv_heads % args.tp_size:
        raise ValueError(f"torch's styles need n_heads={cfg.n_heads} and n_kv_heads="
                         f"{cfg.n_kv_heads} to divide tp={args.tp_size}")
    return cfg


def build_model(args: argparse.Namespace) -> llama.Llama:
    torch.manual_seed(args.seed)  # every rank, both libraries and one device: the same weights
    return llama.Llama(args.config)


def single_device_losses(args: argparse.Namespace) -> list[float]:
    """The reference, as examples.train computes it (default attention kernel)."""
    return train.single_device_losses(args.train, build_model(args))


# -- one rank ----------------------------------------------------------------------------------
def _fresh_torch_caches() -> None:
    """Forget what torch's DTensor cached for whichever rank this thread served before."""
    from torch.distributed.tensor._redistribute import (_gen_transform_infos,
                                                        clear_redistribute_planner_cache)
    from torch.distributed.tensor._sharding_prop import ShardingPropagator
    from torch.distributed.tensor.debug import _clear_sharding_prop_cache

    _clear_sharding_prop_cache()  # this thread's Python LRU and C++ fast-path caches
    _gen_transform_infos.cache_clear()
    clear_redistribute_planner_cache()
    ShardingPropagator._propagate_tensor_meta_cached.cache_clear()


def _setup(lib: str, args: argparse.Namespace, config: str) -> tuple[Any, Any, Callable]:
    """(mesh, parallelized model, per-step loss context) of one library on this rank."""
    shape = (args.dp_size, args.tp_size) if config == FULL else (1, args.tp_size)
    if lib == "ours":
        import dtensor
        from dtensor.parallel import loss_parallel

        mesh = dtensor.init_device_mesh("cpu", shape, mesh_dim_names=("dp", "tp"))
        targs = argparse.Namespace(**vars(args.train))
        targs.dp = "fsdp" if config == FULL else "none"
        return mesh, train.parallelize(build_model(args), mesh, targs), loss_parallel
    import torch.distributed.tensor.parallel as torch_tp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", shape, mesh_dim_names=("dp", "tp"))
    model = build_model(args)
    plan = llama.tp_plan(model.config, styles=torch_tp)
    torch_tp.parallelize_module(model, mesh["tp"], plan, src_data_rank=None)
    if config == FULL:
        for layer in model.layers:
            fully_shard(layer, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
    # the causal mask of math attention is a plain tensor, replicated on every rank
    return mesh, model, _torch_step_context


@dataclass(frozen=True)
class Feature:
    """One row of the feature table: fully_shard over every rank plus one feature."""

    hsdp: bool = False  # 2-d (replicate=dp, shard=tp) mesh instead of 1-d over every rank
    bf16: bool = False  # MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)
    checkpoint: bool = False  # torch.utils.checkpoint around each block
    micro_batches: int = 1  # gradient accumulation, set_requires_gradient_sync


# FULL ("fsdp+tp") runs through _setup; these through _setup_feature
FEATURES = {
    "fsdp": Feature(),
    "hsdp": Feature(hsdp=True),
    "fsdp bf16": Feature(bf16=True),
    "fsdp+ac": Feature(checkpoint=True),
    "fsdp accum x2": Feature(micro_batches=2),
}
FEATURE_ROWS = ("fsdp", FULL, "hsdp", "fsdp bf16", "fsdp+ac", "fsdp accum x2")


class _Checkpointed(torch.nn.Module):
    """A fully sharded block called under ``torch.utils.checkpoint`` (non-reentrant): its
    activations are recomputed in the backward, its gather hooks run inside the checkpoint."""

    def __init__(self, block: torch.nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        from torch.utils.checkpoint import checkpoint

        return checkpoint(self.block, *args, use_reentrant=False, **kwargs)


def feature_batch(args: argparse.Namespace) -> int:
    """The global batch of the feature runs: every rank gets rows, two micro-batches' worth."""
    world = args.dp_size * args.tp_size
    return math.lcm(args.batch, 2 * world)


def _setup_feature(lib: str, args: argparse.Namespace, feature: Feature) -> _Run:
    """The model fully sharded (1-d over every rank, or HSDP on dp x tp) with ``feature``."""
    dp, tp = args.dp_size, args.tp_size
    shape, names = ((dp, tp), ("replicate", "shard")) if feature.hsdp else ((dp * tp,), ("dp",))
    if lib == "ours":
        import dtensor
        from dtensor.parallel import MixedPrecisionPolicy, fully_shard

        mesh = dtensor.init_device_mesh("cpu", shape, mesh_dim_names=names)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
    policy = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
              if feature.bf16 else MixedPrecisionPolicy())
    model = build_model(args)
    for i, layer in enumerate(model.layers):
        fully_shard(layer, mesh=mesh, mp_policy=policy)
        if feature.checkpoint:
            model.layers[i] = _Checkpointed(layer)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return _Run(model, contextlib.nullcontext, dist.get_rank(), dist.get_world_size(), None,
                feature.micro_batches, feature_batch(args))


def rank_body(lib: str, args: argparse.Namespace, config: str, traced: bool) -> RankRun:
    """One rank's training run with ``lib``: the same on simpg and on gloo processes."""
    if lib == "torch":
        _fresh_torch_caches()
    try:
        return _train(lib, args, config, traced)
    finally:
        if lib == "torch":
            _fresh_torch_caches()


def _train(lib: str, args: argparse.Namespace, config: str, traced: bool) -> RankRun:
    run = _setup_feature(lib, args, FEATURES[config]) if config in FEATURES else None
    if run is None:
        mesh, model, loss_context = _setup(lib, args, config)
        run = _Run(model, loss_context, mesh.get_local_rank("dp"), mesh.size(0),
                   mesh.get_group("dp") if mesh.size(0) > 1 else None, 1, args.batch)
    model = run.model
    opt = train.make_optimizer(model.parameters(), args.train)
    rows = slice(run.data_rank * run.batch // run.data_size,
                 (run.data_rank + 1) * run.batch // run.data_size)
    losses: list[torch.Tensor] = []
    step_s: list[float] = []
    records: list[Any] = []
    state: dict[str, int] = {}
    for step in range(args.steps):
        inputs, targets = _rows(args, run, step, rows)
        dist.barrier()  # the ranks start each step together (untimed, untraced)
        start = time.perf_counter()
        with _trace(traced and step > 0) as trace:
            loss = _forward_backward(run, inputs, targets, args.clip, opt)
            if step == args.steps - 1:  # gradients and optimizer state alive; not timed
                paused = time.perf_counter()
                # reads each DTensor's _local_tensor: ours and torch's alike
                state = state_bytes(list(model.parameters()), opt)
                start += time.perf_counter() - paused
            opt.zero_grad()
        step_s.append(time.perf_counter() - start)
        if trace is not None:
            records.extend(trace.records)
        value = loss.full_tensor() if hasattr(loss, "full_tensor") else loss
        losses.append(value.detach().float().reshape(1))
    timeline, peak = _recorded_step(args, run, opt, rows) if traced else (None, None)
    total = torch.cat(losses)
    if run.data_size > 1:  # each data rank's loss is the mean of its rows: average the shares
        dist.all_reduce(total, group=run.data_group)
        total /= run.data_size
    return RankRun(dist.get_rank(), total.tolist(), step_s, state, records, timeline, peak)


@dataclass
class _Run:
    """A rank's parallelized model and how its data and loss are split."""

    model: Any
    loss_context: Callable
    data_rank: int  # this rank's share of the global batch ...
    data_size: int  # ... of this many
    data_group: Any  # where the losses are averaged (None: the world)
    micro_batches: int
    batch: int  # the global batch


def _rows(args: argparse.Namespace, run: _Run, step: int, rows: slice
          ) -> tuple[torch.Tensor, torch.Tensor]:
    targs = argparse.Namespace(**vars(args.train))
    targs.batch = run.batch
    inputs, targets = train.batch(targs, step, args.config.vocab_size)
    return inputs[rows], targets[rows]


def _forward_backward(run: _Run, inputs: torch.Tensor, targets: torch.Tensor, clip: float,
                      opt: torch.optim.Optimizer) -> torch.Tensor:
    """One optimizer step over ``run.micro_batches`` micro-batches; the step's loss."""
    parts: list[torch.Tensor] = []
    micro = run.micro_batches
    for i, (x, y) in enumerate(zip(inputs.chunk(micro), targets.chunk(micro))):
        if micro > 1:  # reduce-scatter the gradients on the last micro-batch only
            run.model.set_requires_gradient_sync(i == micro - 1)
        with run.loss_context():
            loss = llama.loss_fn(run.model(x).float(), y) / micro
            loss.backward()
        parts.append(loss.detach())
    if clip:
        torch.nn.utils.clip_grad_norm_(run.model.parameters(), clip)
    opt.step()
    return sum(parts[1:], parts[0])


def _recorded_step(args: argparse.Namespace, run: _Run, opt: torch.optim.Optimizer,
                   rows: slice) -> tuple[Any, int]:
    """One more step (not timed, its loss unused) under ``simpg.steprecorder``: the kernels
    and collective issue/wait points the overlap model prices (Note [exposed communication]
    in simpg.overlap), and the rank's peak live bytes (Note [peak live bytes] there), the
    parameters and optimizer state counted from the step's start."""
    from simpg.steprecorder import record_step

    inputs, targets = _rows(args, run, args.steps, rows)
    live = [*run.model.parameters(), *(t for s in opt.state.values() for t in s.values()
                                       if isinstance(t, torch.Tensor))]
    dist.barrier()
    with record_step(memory=True, live=live) as recorder:
        del live  # held weakly by the recorder from here: what the step frees stops counting
        _forward_backward(run, inputs, targets, args.clip, opt)
        opt.zero_grad()
    return recorder.timeline(), recorder.peak_live_bytes()


@contextlib.contextmanager
def _trace(on: bool) -> Iterator[Any]:
    if not on:
        yield None
        return
    import simpg

    with simpg.trace() as t:
        yield t


@contextlib.contextmanager
def _torch_step_context() -> Iterator[None]:
    """What a torch user wraps a tensor-parallel step in: its loss_parallel, and implicit
    replication for the plain causal mask."""
    from torch.distributed.tensor.experimental import implicit_replication
    from torch.distributed.tensor.parallel import loss_parallel

    with implicit_replication(), loss_parallel():
        yield


@contextlib.contextmanager
def _attention(lib: str, args: argparse.Namespace) -> Iterator[None]:
    """torch's side (and ours with --ours-attention math): attention in its math form."""
    if lib == "ours" and args.ours_attention == "default":
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):  # process-wide: every rank thread sees it
        yield


# -- simulated comparison ----------------------------------------------------------------------
def run_side(lib: str, args: argparse.Namespace, config: str) -> Side:
    import simpg

    if config in FEATURES:  # fully_shard over every rank (HSDP: replicate=dp x shard=tp)
        shape = ((args.dp_size, args.tp_size) if FEATURES[config].hsdp
                 else (args.dp_size * args.tp_size, 1))
    else:
        shape = (args.dp_size, args.tp_size) if config == FULL else (1, args.tp_size)
    side = Side(lib, config, shape)

    with _attention(lib, args):
        side.ranks = simpg.run(rank_body, math.prod(shape), lib, args, config, True,
                               timeout=600)
    return side


def compare(args: argparse.Namespace) -> tuple[dict[str, Side], list[float]]:
    """Both libraries on simpg, torch's side first in the full configuration, then in the
    fallback if that raises (and ours in the same configuration as torch's)."""
    torch_side, error = None, ""
    for config in (FULL, TP_ONLY):
        try:
            torch_side = run_side("torch", args, config)
            break
        except Exception as e:  # noqa: BLE001 - a configuration torch cannot run is a finding
            error += f"{config}: {type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}; "
    torch_side = torch_side or Side("torch", "-", (0, 0))
    torch_side.error = error
    ours = run_side("ours", args, torch_side.config if torch_side.ranks else FULL)
    return {"ours": ours, "torch": torch_side}, single_device_losses(args)


def _world_steps(side: Side) -> list[float]:
    """A world's step: the slowest rank of each measured step (the warm-up left out)."""
    return [max(r.step_s[i] for r in side.ranks) for i in range(1, len(side.ranks[0].step_s))]


def _median_step(side: Side) -> float:
    """A world's step: the slowest rank of each measured step, median over the steps."""
    return statistics.median(_world_steps(side))


def spread_text(sides: dict[str, Side]) -> str:
    """min / median / max of each side's measured steps (the table shows the median)."""
    return "step time (s) over the measured steps: " + "; ".join(
        f"{lib} {conditions.spread(_world_steps(side))}" if side.ranks else f"{lib} did not run"
        for lib, side in sides.items())


def _max_rel_diff(losses: list[float], reference: list[float]) -> float:
    if len(losses) != len(reference) or not all(math.isfinite(x) for x in losses):
        return math.inf
    return max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, reference))


def rows(sides: dict[str, Side], reference: list[float], *,
         simulated: bool = True) -> list[tuple[str, float | None, float | None]]:
    """(figure, ours, torch) rows of the table; None where a side has no figure."""
    figures: dict[str, dict[str, float]] = {}
    for lib, side in sides.items():
        if not side.ranks:
            continue
        f = figures.setdefault(lib, {})
        f["step time (s, median)"] = _median_step(side)
        if simulated:
            for row in _per_dim(side):
                f[f"bytes received/step, {row['dim']}"] = row["bytes"]
                f[f"collectives/step, {row['dim']}"] = row["count"]
                f[COMM_TIME] = f.get(COMM_TIME, 0.0) + row["nvlink_s"] * 1e6
            if all(r.timeline is not None for r in side.ranks):
                for preset in INTERCONNECTS:
                    est = modelled(side, preset)
                    f[f"modelled step, {preset} (us)"] = est.step_s * 1e6
                    f[f"modelled compute, {preset} (us)"] = est.compute_s * 1e6
                    f[f"modelled comm serial, {preset} (us)"] = est.comm_s * 1e6
                    f[f"exposed comm, {preset} (us)"] = est.exposed_s * 1e6
                    f[f"overlap (comm hidden), {preset}"] = est.overlap
                    f[f"exposed comm at first use, {preset} (us)"] = modelled(
                        side, preset, waits="first_use").exposed_s * 1e6
        for kind in STATE_KINDS:
            f[f"{kind} bytes/rank (max)"] = max(r.state[kind] for r in side.ranks)
        if all(r.peak_bytes is not None for r in side.ranks):
            f[PEAK] = max(r.peak_bytes for r in side.ranks)
        f["max rel. loss diff vs 1 device"] = _max_rel_diff(side.ranks[0].losses, reference)
    order = [k for lib in LIBS for k in figures.get(lib, {})]
    names = sorted(dict.fromkeys(order), key=_row_order)
    return [(n, figures.get("ours", {}).get(n), figures.get("torch", {}).get(n)) for n in names]


def modelled(side: Side, preset: str, waits: str = "program") -> Any:
    """The recorded step of ``side`` on DEVICE and the ``preset`` network (a
    ``simpg.overlap.StepEstimate``), the compute stream waiting where the program waits or
    at each collective's first use (``waits``). ib-cluster puts one tp group (mesh dim 1) on
    a node, so the dp dim crosses nodes (every rank is its own node when dim 1 has size 1)."""
    from simpg.overlap import DEVICES, model_step

    network = interconnect(preset, ranks_per_node=side.mesh[1])
    return model_step([r.timeline for r in side.ranks], DEVICES[DEVICE], network, waits)


def modelled_text(sides: dict[str, Side]) -> str:
    """What the modelled rows assume (under the table)."""
    from simpg.overlap import DEVICES

    d = DEVICES[DEVICE]
    tp = max((s.mesh[1] for s in sides.values() if s.ranks), default=1)
    return (f"modelled rows: one more step per side recorded with simpg.steprecorder (its "
            f"kernels, collective issue and wait points), played on a compute and a "
            f"communication stream per rank (Note [exposed communication] in simpg.overlap) "
            f"on {d.name}: {d.peak_flops['float32'] / 1e12:g} / "
            f"{d.peak_flops['bfloat16'] / 1e12:g} TFLOP/s fp32 / bf16, "
            f"{d.hbm_Bps / 1e12:g} TB/s, {d.kernel_floor_s * 1e6:g} us a kernel at least; "
            f"nvlink-node: 8 ranks on NVLink; ib-cluster: {tp} ranks (a tp group) per node, "
            f"dp across 400 Gb/s InfiniBand. 'exposed comm': the compute stream waits where "
            f"the program waits; torch's FSDP2 waits for its all-gathers on a side stream on "
            f"CUDA, which CPU lacks, so this is an upper bound for it. 'at first use': it "
            f"waits before the first kernel touching a collective's tensors, the other bound")


def _per_dim(side: Side) -> list[dict]:
    """examples.train_report's summary per mesh dim, over the measured (traced) steps."""
    dp, tp = side.mesh
    measured = argparse.Namespace(dp_size=dp, tp_size=tp, steps=len(side.ranks[0].step_s) - 1)
    summary = collective_summary(measured, unique_records(side.ranks))
    # mesh_dim_of calls a group of every rank "dp+tp": on a 1 x tp mesh that is tp
    whole = "tp" if dp == 1 else "dp" if tp == 1 else "dp+tp"
    return [row | {"dim": whole} if row["dim"] == "dp+tp" else row for row in summary]


def _row_order(name: str) -> tuple[int, int, str]:
    prefixes = ("step time", "bytes received", "collectives", "est. comm", "modelled step",
                "modelled compute", "modelled comm", "exposed comm", "overlap", "parameters",
                "gradients", "optimizer", "peak live", "max rel.")
    preset = next((i for i, p in enumerate(INTERCONNECTS) if p in name), -1)
    return next(i for i, p in enumerate(prefixes) if name.startswith(p)), preset, name


def ops_lines(sides: dict[str, Side]) -> list[str]:
    """Per library and mesh dim: which collectives, per step, on the busiest rank."""
    out = []
    for lib, side in sides.items():
        if not any(r.records for r in side.ranks):
            continue
        for row in _per_dim(side):
            ops = ", ".join(f"{k} x{v:g}" for k, v in sorted(row["ops"].items()))
            out.append(f"- {lib}, {row['dim']}: {ops}")
    return out


# -- the feature table ------------------------------------------------------------------------
def compare_features(args: argparse.Namespace, full: dict[str, Side] | None = None,
                     names: tuple[str, ...] = FEATURE_ROWS
                     ) -> tuple[dict[str, dict[str, Side]], list[float]]:
    """Each feature of ``names``, both libraries (``full``: the fsdp+tp sides already run
    by :func:`compare`); and the one-device losses of the feature batch."""
    unknown = [n for n in names if n not in FEATURE_ROWS]
    if unknown:
        raise ValueError(f"features {unknown}: expected some of {', '.join(FEATURE_ROWS)}")
    out: dict[str, dict[str, Side]] = {}
    for feature in names:
        if feature == FULL:
            out[feature] = full if full is not None else compare(args)[0]
            continue
        sides = {}
        for lib in LIBS:
            try:
                sides[lib] = run_side(lib, args, feature)
            except Exception as e:  # noqa: BLE001 - a feature a library cannot run is a finding
                sides[lib] = Side(lib, feature, (0, 0), error=f"{type(e).__name__}: "
                                  f"{(str(e).splitlines() or [''])[0][:160]}")
        out[feature] = sides
    targs = argparse.Namespace(**vars(args.train))
    targs.batch = feature_batch(args)
    return out, train.single_device_losses(targs, build_model(args))


def _dim_names(feature: str) -> dict[str, str]:
    return {"dp": "replicate", "tp": "shard"} if feature == "hsdp" else {}


def feature_rows(features: dict[str, dict[str, Side]], reference: list[float]
                 ) -> list[dict[str, Any]]:
    """Per feature and library: step time (s), bytes received per mesh dim, state bytes per
    rank, exposed communication on nvlink-node (s) and the loss difference from one device
    (the fsdp+tp row against its own batch's reference: the main table has it)."""
    table = []
    for feature, sides in features.items():
        row: dict[str, Any] = {"feature": feature}
        for lib, side in sides.items():
            if not side.ranks:
                row[lib] = {"error": side.error or "did not run"}
                continue
            names = _dim_names(feature)
            per_dim = {names.get(d["dim"], d["dim"]): d["bytes"] for d in _per_dim(side)}
            row[lib] = {
                "step_s": _median_step(side),
                "bytes": per_dim,
                "state": max(sum(r.state.values()) for r in side.ranks),
                "peak": max(r.peak_bytes for r in side.ranks),
                "exposed_s": modelled(side, "nvlink-node").exposed_s,
                "first_use_s": modelled(side, "nvlink-node", waits="first_use").exposed_s,
                "modelled_s": modelled(side, "nvlink-node").step_s,
                "loss_diff": (_max_rel_diff(side.ranks[0].losses, reference)
                              if feature != FULL else None),
            }
        table.append(row)
    return table


def _ratio(ours: float | None, theirs: float | None) -> str:
    return "-" if ours is None or not theirs else f"{ours / theirs:.2f}"


def print_features(args: argparse.Namespace, table: list[dict[str, Any]]) -> None:
    world = args.dp_size * args.tp_size
    print(f"\nper feature, {world} simulated ranks, global batch {feature_batch(args)} x "
          f"{args.seq} tokens (fsdp+tp: batch {args.batch}, the main table's run); fully_shard "
          f"per block and root over all {world} ranks (hsdp: replicate={args.dp_size} x "
          f"shard={args.tp_size}); modelled on {DEVICE} + nvlink-node")
    print("\n| feature | step time (s) ours / torch | ratio | bytes received/step by dim, "
          "ours / torch | state bytes/rank ours / torch | peak live bytes/rank ours / torch | "
          "ratio | modelled step (us) ours / torch | "
          "exposed comm (us) ours / torch | ratio | exposed at first use (us) ours / torch | "
          "loss diff vs 1 device ours / torch |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in table:
        o, t = row.get("ours", {}), row.get("torch", {})
        if "error" in o or "error" in t:
            print(f"| {row['feature']} | ours: {o.get('error', 'ran')}; torch: "
                  f"{t.get('error', 'ran')} ||||||||||| ")
            continue

        def by_dim(x: dict) -> str:
            return ", ".join(f"{d} {_fmt(b)}" for d, b in sorted(x["bytes"].items()))

        def loss(x: dict) -> str:
            return "-" if x["loss_diff"] is None else f"{x['loss_diff']:.1e}"

        print(f"| {row['feature']} | {o['step_s']:.3f} / {t['step_s']:.3f} | "
              f"{_ratio(o['step_s'], t['step_s'])} | {by_dim(o)} / {by_dim(t)} | "
              f"{_fmt(o['state'])} / {_fmt(t['state'])} | {_fmt(o['peak'])} / "
              f"{_fmt(t['peak'])} | {_ratio(o['peak'], t['peak'])} | "
              f"{o['modelled_s'] * 1e6:,.0f} / "
              f"{t['modelled_s'] * 1e6:,.0f} | {o['exposed_s'] * 1e6:,.0f} / "
              f"{t['exposed_s'] * 1e6:,.0f} | {_ratio(o['exposed_s'], t['exposed_s'])} | "
              f"{o['first_use_s'] * 1e6:,.0f} / {t['first_use_s'] * 1e6:,.0f} | "
              f"{loss(o)} / {loss(t)} |")


# -- gloo --------------------------------------------------------------------------------------
def gloo_worker(args: argparse.Namespace) -> None:
    """One of 2 real gloo processes: both libraries, one after the other, in one group."""
    rank, port, out = int(args.gloo_worker[0]), int(args.gloo_worker[1]), args.gloo_worker[2]
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=300))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
    result: dict[str, Any] = {}
    try:
        for lib in LIBS:
            try:
                with _attention(lib, args):
                    run = rank_body(lib, args, FULL, traced=False)
                result[lib] = asdict(run)
            except Exception as e:  # noqa: BLE001 - reported in the table
                result[lib] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
                break  # the other rank may be stuck in a collective: stop here
        torch.save(result, out)
    finally:
        dist.destroy_process_group()


def run_gloo(args: argparse.Namespace, argv: list[str], timeout_s: float = 600
             ) -> dict[str, Side]:
    """Start 2 worker processes of this script on 127.0.0.1 (as tests/support/gloo_runner.py
    does)."""
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=timeout_s))
    env = dict(os.environ, OMP_NUM_THREADS="1",
               GLOO_SOCKET_IFNAME="lo0" if sys.platform == "darwin" else "lo")
    with tempfile.TemporaryDirectory() as tmp:
        outs = [Path(tmp) / f"rank{r}.pt" for r in range(2)]
        logs = [(Path(tmp) / f"rank{r}.log").open("w") for r in range(2)]
        procs = [subprocess.Popen([sys.executable, __file__, *argv, "--gloo-worker", str(r),
                                   str(store.port), str(outs[r])],
                                  env=env, stdout=logs[r], stderr=subprocess.STDOUT)
                 for r in range(2)]
        deadline = time.monotonic() + timeout_s
        for p in procs:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for log in logs:
            log.close()
        if any(p.returncode != 0 or not o.exists() for p, o in zip(procs, outs)):
            tails = "\n".join((Path(tmp) / f"rank{r}.log").read_text()[-2000:] for r in range(2))
            raise RuntimeError(f"gloo workers failed (exit codes "
                               f"{[p.returncode for p in procs]}):\n{tails}")
        results = [torch.load(o) for o in outs]
    sides = {}
    for lib in LIBS:
        side = Side(lib, FULL, (args.dp_size, args.tp_size))
        got = [r.get(lib, {"error": "not run"}) for r in results]
        errors = [g["error"] for g in got if "error" in g]
        if errors:
            side.error = errors[0]
        else:
            side.ranks = [RankRun(**g) for g in got]
        sides[lib] = side
    return sides


# -- printing ----------------------------------------------------------------------------------
def _fmt(x: float | None) -> str:
    if x is None:
        return "-"
    if x != x or x in (math.inf, -math.inf):
        return str(x)
    if abs(x) >= 1000 or x == int(x):
        return f"{x:,.0f}"
    return f"{x:.3g}" if abs(x) >= 1e-2 else f"{x:.2e}"


def print_report(args: argparse.Namespace, sides: dict[str, Side], reference: list[float],
                 *, simulated: bool, command: str,
                 machine: conditions.Conditions | None = None) -> bool:
    """The table (with the spread and machine lines under it if ``machine`` is given), the
    losses per step and the verdict; True if both match one device."""
    cfg = args.config
    where = (f"{args.dp_size * args.tp_size} simulated ranks (simpg), one process"
             if simulated else "2 gloo processes on 127.0.0.1 (collectives not traced)")
    print(f"command: {command}")
    print(f"torch {torch.__version__}, {os.cpu_count()} cores, "
          f"{datetime.datetime.now().isoformat(timespec='seconds')}, {where}")
    print(f"model: Llama-style '{args.model}' with n_kv_heads={cfg.n_kv_heads} (n_heads="
          f"{cfg.n_heads}, dim={cfg.dim}, {cfg.n_layers} layers, vocab {cfg.vocab_size}); "
          f"batch {args.batch} x {args.seq} tokens; {args.steps} steps, the first a warm-up; "
          f"AdamW foreach, clip_grad_norm_ {args.clip or 'off'}; attention: ours "
          f"{'math form' if args.ours_attention == 'math' else 'default kernel'}, torch "
          f"math form")
    for lib, side in sides.items():
        dp, tp = side.mesh
        what = (f"{side.config} on a dp={dp} x tp={tp} mesh" if side.ranks else "did not run")
        print(f"{lib:>5}: {what}" + (f"  [raised: {side.error}]" if side.error else ""))
    print("\n| figure | ours | torch | ours / torch |")
    print("|---|---:|---:|---:|")
    for name, o, t in rows(sides, reference, simulated=simulated):
        ratio = "-" if o is None or not t or name.startswith("max rel.") else f"{o / t:.2f}"
        print(f"| {name} | {_fmt(o)} | {_fmt(t)} | {ratio} |")
    if machine is not None:
        print(f"\n{machine.footer(spread_text(sides))}")
    if simulated:
        print("\n" + modelled_text(sides))
        print("\nbusiest rank per mesh dim; collectives per step:")
        print("\n".join(ops_lines(sides)))
    print(f"\n{'step':>4} {'1 device':>10} " + " ".join(f"{lib:>10}" for lib in sides))
    for step, ref in enumerate(reference):
        got = [f"{s.ranks[0].losses[step]:>10.6f}" if s.ranks else f"{'-':>10}"
               for s in sides.values()]
        print(f"{step:>4} {ref:>10.6f} " + " ".join(got))
    ok = {lib: bool(s.ranks) and _max_rel_diff(s.ranks[0].losses, reference) <= args.tolerance
          for lib, s in sides.items()}
    print("\n" + "; ".join(f"{lib}: {'PASS' if good else 'FAIL'}" for lib, good in ok.items())
          + f" (every step's loss within {args.tolerance:g} of one device)")
    return all(ok.values())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    warnings.filterwarnings("ignore")  # torch warns on every rank (CPU fallbacks, FSDP)
    logging.disable(logging.WARNING)  # and logs suboptimal redistributes per rank and step
    if args.gloo_worker:
        gloo_worker(args)
        return 0
    command = " ".join([".venv/bin/python", "benchmarks/bench_training.py", *argv])
    machine = conditions.Conditions()
    if args.gloo:
        sides = run_gloo(args, [a for a in argv if a != "--gloo"] + ["--mesh", args.mesh])
        reference = single_device_losses(args)
    else:
        sides, reference = compare(args)
    with readme_figures.tee() as report:
        ok = print_report(args, sides, reference, simulated=not args.gloo, command=command,
                          machine=machine)
        if args.features:
            features, feature_reference = compare_features(args, sides)
            print_features(args, feature_rows(features, feature_reference))
    if args.write_readme and ok:
        body = (readme_figures.through_first_table(report.getvalue()) + "\n\n"
                + conditions.report_lines(report.getvalue()))
        readme_figures.write_readme("bench-training-gloo" if args.gloo else "bench-training",
                                    body, command)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
