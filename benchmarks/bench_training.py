"""Parallel training, ours against torch's: the same Llama-style model, data, optimizer and
dp x tp mesh, trained once with our DTensor runtime and once with torch.distributed.tensor.

    .venv/bin/python benchmarks/bench_training.py                 # 2x4 mesh, 8 simpg ranks
    .venv/bin/python benchmarks/bench_training.py --mesh 2x2 --steps 4 --model small
    .venv/bin/python benchmarks/bench_training.py --quick         # 2 steps of 8 tokens
    .venv/bin/python benchmarks/bench_training.py --gloo          # 2 real gloo processes

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
- torch's ``loss_parallel()`` adds and removes handlers in one process-wide table: entered
  by each simulated rank, the first rank to leave pulls them from under the others
  (KeyError). It is entered once around torch's whole simulated world instead.
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

try:  # run as a script, benchmarks/ is on sys.path; loaded by the tests, the root is
    import conditions  # noqa: E402
    import readme_figures  # noqa: E402
except ImportError:
    from benchmarks import conditions, readme_figures  # noqa: E402

LIBS = ("ours", "torch")
FULL = "fsdp+tp+sp+loss"  # fully sharded over dp, tensor + sequence + loss parallel over tp
TP_ONLY = "tp+sp+loss"  # the fallback: tensor parallel alone on a 1 x tp mesh
STATE_KINDS = ("parameters", "gradients", "optimizer")
COMM_TIME = "est. comm time/step, NVLink node (us, serial)"  # simpg's cost model, all dims


@dataclass
class RankRun:
    """What one rank of one library reports back."""

    rank: int
    losses: list[float]  # each step's global loss (averaged over dp)
    step_s: list[float]  # wall seconds of each step, warm-up included
    state: dict[str, int] = field(default_factory=dict)  # local bytes after the last step
    records: list[Any] = field(default_factory=list)  # simpg: collectives of measured steps


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
    from torch.distributed.tensor.experimental import implicit_replication

    mesh = init_device_mesh("cpu", shape, mesh_dim_names=("dp", "tp"))
    model = build_model(args)
    plan = llama.tp_plan(model.config, styles=torch_tp)
    torch_tp.parallelize_module(model, mesh["tp"], plan, src_data_rank=None)
    if config == FULL:
        for layer in model.layers:
            fully_shard(layer, mesh=mesh["dp"])
        fully_shard(model, mesh=mesh["dp"])
    # loss_parallel itself is entered around the world (_torch_loss_parallel); the causal
    # mask of math attention is a plain tensor, replicated on every rank
    return mesh, model, implicit_replication


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
    mesh, model, loss_context = _setup(lib, args, config)
    opt = train.make_optimizer(model.parameters(), args.train)
    dp_rank, dp_size = mesh.get_local_rank("dp"), mesh.size(0)
    rows = slice(dp_rank * args.batch // dp_size, (dp_rank + 1) * args.batch // dp_size)
    losses: list[torch.Tensor] = []
    step_s: list[float] = []
    records: list[Any] = []
    state: dict[str, int] = {}
    for step in range(args.steps):
        inputs, targets = (t[rows] for t in train.batch(args.train, step,
                                                          args.config.vocab_size))
        dist.barrier()  # the ranks start each step together (untimed, untraced)
        start = time.perf_counter()
        with _trace(traced and step > 0) as trace:
            with loss_context():
                loss = llama.loss_fn(model(inputs), targets)
                loss.backward()
            if args.clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            opt.step()
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
        losses.append(value.detach().reshape(1))
    total = torch.cat(losses)
    if dp_size > 1:  # each dp rank's loss is the mean of its rows: average the shares
        dist.all_reduce(total, group=mesh.get_group("dp"))
        total /= dp_size
    return RankRun(dist.get_rank(), total.tolist(), step_s, state, records)


@contextlib.contextmanager
def _trace(on: bool) -> Iterator[Any]:
    if not on:
        yield None
        return
    import simpg

    with simpg.trace() as t:
        yield t


@contextlib.contextmanager
def _torch_loss_parallel(lib: str) -> Iterator[None]:
    """torch's loss_parallel edits one process-wide handler table: one entry for the world."""
    if lib != "torch":
        yield
        return
    from torch.distributed.tensor.parallel import loss_parallel

    with loss_parallel():
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

    shape = (args.dp_size, args.tp_size) if config == FULL else (1, args.tp_size)
    side = Side(lib, config, shape)
    from simpg.testing import torch_meshes_per_rank

    # each rank's torch mesh its own identity (Note [torch meshes per rank] in simpg.testing)
    with _attention(lib, args), _torch_loss_parallel(lib), torch_meshes_per_rank():
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
        for kind in STATE_KINDS:
            f[f"{kind} bytes/rank (max)"] = max(r.state[kind] for r in side.ranks)
        f["max rel. loss diff vs 1 device"] = _max_rel_diff(side.ranks[0].losses, reference)
    order = [k for lib in LIBS for k in figures.get(lib, {})]
    names = sorted(dict.fromkeys(order), key=_row_order)
    return [(n, figures.get("ours", {}).get(n), figures.get("torch", {}).get(n)) for n in names]


def _per_dim(side: Side) -> list[dict]:
    """examples.train_report's summary per mesh dim, over the measured (traced) steps."""
    dp, tp = side.mesh
    measured = argparse.Namespace(dp_size=dp, tp_size=tp, steps=len(side.ranks[0].step_s) - 1)
    summary = collective_summary(measured, unique_records(side.ranks))
    # mesh_dim_of calls a group of every rank "dp+tp": on a 1 x tp mesh that is tp
    whole = "tp" if dp == 1 else "dp" if tp == 1 else "dp+tp"
    return [row | {"dim": whole} if row["dim"] == "dp+tp" else row for row in summary]


def _row_order(name: str) -> tuple[int, str]:
    prefixes = ("step time", "bytes received", "collectives", "est. comm", "parameters",
                "gradients", "optimizer", "max rel.")
    return next(i for i, p in enumerate(prefixes) if name.startswith(p)), name


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
                with _attention(lib, args), _torch_loss_parallel(lib):
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
    """Start 2 worker processes of this script on 127.0.0.1 (as tests/gloo_runner.py does)."""
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
    if args.write_readme and ok:
        body = (readme_figures.through_first_table(report.getvalue()) + "\n\n"
                + conditions.report_lines(report.getvalue()))
        readme_figures.write_readme("bench-training-gloo" if args.gloo else "bench-training",
                                    body, command)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
