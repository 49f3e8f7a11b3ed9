"""Sharded checkpoints, ours (dtensor.checkpoint) against torch.distributed.checkpoint (DCP):
the same model and AdamW state, the same simpg world, a temporary directory each.

    .venv/bin/python benchmarks/bench_checkpoint.py              # dim 1024, 4 layers
    .venv/bin/python benchmarks/bench_checkpoint.py --dim 2048 --layers 2 --repeat 5
    .venv/bin/python benchmarks/bench_checkpoint.py --quick      # tiny, for the smoke test
    .venv/bin/python benchmarks/bench_checkpoint.py --repeat 5 --write-readme   # README block

The state: per layer, attention (dim x dim, column- and row-wise) and feed-forward
(4 dim x dim, dim x 4 dim) weights, a norm (dim), each with AdamW's exp_avg and exp_avg_sq,
and a step counter. Saved from a 2x4 dp x tp mesh in the main job's fully sharded + tensor
parallel layout (column-wise [S(1), S(0)], row-wise [S(0), S(1)], norms [S(0), R]: replicated
over tp, so each replica group writes them once); loaded into 8-way fully sharded ([S(0)] on
8 ranks), the resharding of the issue. Ours: ``dtensor.checkpoint.save``/``load`` on our
DTensors; torch: ``torch.distributed.checkpoint.save``/``load`` (FileSystemWriter/Reader,
defaults) on torch's DTensors with the same pieces.

Figures: a save's or a load's seconds are the world's: every rank builds its state, meets
the others at a barrier, takes the time, saves or loads, meets them at a barrier again and
takes the time; the figure is the latest end minus the earliest start. simpg runs the ranks
one at a time, so the first rank out of the barrier starts the clock after every rank has
built its state (building it, a copy of each piece, is no part of a save) and before any
rank has begun saving. ``--repeat`` rounds, each a save and two loads with both libraries in
turn (who goes first alternates), so both see the same machine: one load with the files as
the save left them in the page cache (DCP's writes go through it; ours bypass it, Note
[direct writes] in dtensor/checkpoint/writer.py), one after evicting the checkpoint's files
from it (``posix_fadvise(DONTNEED)``): a job resuming on another host. The table gives
medians and, for the times, every round's range and the range over rounds of torch's time /
ours (the throughput ratio, round by round). Throughput = state bytes / seconds (the save
writes each element once; the target layout holds each element once). Bytes read = the
growth of this process's ``rchar`` (/proc/self/io) over the load, all ranks together, for
both libraries alike (ours also counts its own: the "ours, self-counted" line). Every load is
checked bit for bit against the saved global tensors.

Asynchronous saves (the second table): one process, no process group (DCP's ``async_save``
asks for a CPU backend that simpg is not, so both run as a single rank: DCP with
``no_dist=True``), the same state as plain tensors. A training step stand-in (a matmul with
every weight, then every tensor of the state updated in place) is timed ``--steps`` times
with no save, then again while a save is in flight: ``async_save`` is called, the steps run
until its future is done, then the next round. Figures: how long the call blocks (the
staging copy), the median step time with and without a save in flight, the seconds until
the save is done, and whether the checkpoint holds the values at the call, not those of the
steps after it (loaded and compared bit for bit).
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# torch's C++ imports its DTensor at the first detach() of any DTensor subclass: import it
# before any world (simpg.isolation)
import torch.distributed.tensor  # noqa: E402,F401

from dtensor.layout import local_slices  # noqa: E402

from opdb_tests import readme_figures  # noqa: E402

LIBS = ("ours", "torch")
SOURCE_MESH, TARGET_MESH = (2, 4), (8,)
COLWISE, ROWWISE, NORM = "colwise", "rowwise", "norm"


@dataclass
class Side:
    """One library's figures, one entry per repeat."""

    lib: str
    save_s: list[float] = field(default_factory=list)
    load_s: list[float] = field(default_factory=list)
    cold_load_s: list[float] = field(default_factory=list)  # files evicted from the cache
    written: int = 0  # bytes in the checkpoint directory
    files: int = 0
    read: int = 0  # rchar growth over the load, all ranks
    self_counted: int = 0  # ours: the sum of LoadReport.bytes_read
    correct: bool = True


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dim", type=int, help="model dim (default 1024; 64 quick)")
    p.add_argument("--layers", type=int, help="layers (default 4; 1 quick)")
    p.add_argument("--repeat", type=int, help="rounds (default 3; 1 quick)")
    p.add_argument("--chunk-kib", type=int, help="our chunk size (default: the library's)")
    p.add_argument("--steps", type=int, help="steps timed with no save in flight, per "
                   "round of the asynchronous table (default 5; 2 quick)")
    p.add_argument("--async-only", action="store_true",
                   help="only the asynchronous-save table")
    p.add_argument("--quick", action="store_true", help="tiny sizes, one run")
    p.add_argument("--write-readme", action="store_true",
                   help="also rewrite the README's bench-checkpoint block with the table")
    args = p.parse_args(argv)
    args.dim = args.dim or (64 if args.quick else 1024)
    args.layers = args.layers or (1 if args.quick else 4)
    args.repeat = args.repeat or (1 if args.quick else 3)
    args.steps = args.steps or (2 if args.quick else 5)
    return args


def global_state(args: argparse.Namespace) -> dict[str, tuple[torch.Tensor, str]]:
    """Flat key -> (global tensor, kind); the same on every rank and for both libraries."""
    g = torch.Generator().manual_seed(0)
    d = args.dim
    shapes = {"attn.wq": ((d, d), COLWISE), "attn.wo": ((d, d), ROWWISE),
              "ffn.w1": ((4 * d, d), COLWISE), "ffn.w2": ((d, 4 * d), ROWWISE),
              "norm": ((d,), NORM)}
    out = {}
    for layer in range(args.layers):
        for name, (shape, kind) in shapes.items():
            for part in ("param", "exp_avg", "exp_avg_sq"):
                out[f"{part}.layers.{layer}.{name}"] = (torch.randn(shape, generator=g), kind)
    return out


def state_bytes(state: dict) -> int:
    return sum(t.numel() * t.element_size() for t, _ in state.values())


def _placements(kind: str, lib: str, target: bool) -> list:
    if lib == "ours":
        from dtensor import Replicate, Shard
    else:
        from torch.distributed.tensor import Replicate, Shard
    if target:
        return [Shard(0)]
    return {COLWISE: [Shard(1), Shard(0)], ROWWISE: [Shard(0), Shard(1)],
            NORM: [Shard(0), Replicate()]}[kind]


def _ours_mesh(shape: tuple) -> Any:
    import dtensor

    return dtensor.init_device_mesh("cpu", shape)


def _dtensors(lib: str, state: dict, target: bool) -> dict[str, Any]:
    """This rank's DTensors of ``lib``: source pieces cut from the global tensors (no
    communication), or zeros in the target layout."""
    shape = TARGET_MESH if target else SOURCE_MESH
    if lib == "ours":
        from dtensor import DTensor
        mesh = _ours_mesh(shape)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor
        mesh = init_device_mesh("cpu", shape)
    coord = mesh.get_coordinate()
    out = {}
    for key, (full, kind) in state.items():
        placements = _placements(kind, lib, target)
        piece = full[local_slices(full.shape, shape, _placements(kind, "ours", target), coord)]
        local = torch.zeros_like(piece) if target else piece.clone()
        out[key] = DTensor.from_local(local, mesh, placements, shape=full.shape,
                                      stride=full.stride())
    out["step"] = torch.tensor(0.0 if target else 10.0)
    return out


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    """{"param.layers.0.attn.wq": t} -> {"param": {"layers.0.attn.wq": t}} (optimizer-like)."""
    out: dict[str, Any] = {"step": flat["step"]}
    for key, t in flat.items():
        if key != "step":
            part, rest = key.split(".", 1)
            out.setdefault(part, {})[rest] = t
    return out


def _rchar() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar"))


def rank_save(lib: str, state: dict, path: str,
              chunk_bytes: int | None) -> tuple[float, float]:
    """(start, end) on this rank's clock; the world's seconds are max(end) - min(start)."""
    tensors = _nest(_dtensors(lib, state, target=False))
    dist.barrier()  # every rank's state is built: building it is no part of the save
    start = time.perf_counter()  # ranks run one at a time: the first out starts the clock
    if lib == "ours":
        import dtensor.checkpoint as ours

        kwargs = {"chunk_bytes": chunk_bytes} if chunk_bytes else {}
        ours.save(tensors, path, **kwargs)
    else:
        import torch.distributed.checkpoint as dcp

        dcp.save(tensors, checkpoint_id=path)
    dist.barrier()
    return start, time.perf_counter()


def rank_load(lib: str, state: dict, path: str) -> tuple[float, float, int, int, int, bool]:
    """(start, end, rchar at start, rchar at end (all ranks' reads: one process),
    self-counted bytes, correct)."""
    flat = _dtensors(lib, state, target=True)
    tensors = _nest(flat)
    dist.barrier()  # as in rank_save
    before, start = _rchar(), time.perf_counter()
    if lib == "ours":
        import dtensor.checkpoint as ours

        counted = ours.load(tensors, path).bytes_read
    else:
        import torch.distributed.checkpoint as dcp

        dcp.load(tensors, checkpoint_id=path)
        counted = 0
    dist.barrier()
    end, after = time.perf_counter(), _rchar()
    ok = flat["step"].item() == 10.0
    for key, (full, kind) in state.items():
        t = flat[key]
        mesh_coord = t.device_mesh.get_coordinate()
        want = full[local_slices(full.shape, TARGET_MESH,
                                 _placements(kind, "ours", True), mesh_coord)]
        ok = ok and torch.equal(t._local_tensor, want)
    return start, end, before, after, counted, ok


def evict(directory: str) -> None:
    """Drop a checkpoint's files from the page cache (both libraries fsync what they write,
    so every page is clean and goes): the next load reads them from the device."""
    for name in os.listdir(directory):
        fd = os.open(os.path.join(directory, name), os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _load(side: Side, lib: str, state: dict, path: str) -> float:
    """One load by every rank; its seconds (the world's), figures recorded in ``side``."""
    import simpg

    loads = simpg.run(rank_load, math.prod(TARGET_MESH), lib, state, path, timeout=600)
    first, last = min(loads, key=lambda r: r[0]), max(loads, key=lambda r: r[1])
    side.read = last[3] - first[2]
    side.self_counted = sum(r[4] for r in loads)
    side.correct = side.correct and all(r[5] for r in loads)
    return last[1] - first[0]


def run_round(side: Side, args: argparse.Namespace, state: dict, tmp: str, i: int) -> None:
    """One save and two loads of ``side``'s library (the files as the save left them in the
    page cache, then evicted), appended to its figures."""
    import simpg

    lib = side.lib
    chunk = args.chunk_kib * 1024 if args.chunk_kib else None
    path = os.path.join(tmp, f"{lib}-{i}")
    saves = simpg.run(rank_save, math.prod(SOURCE_MESH), lib, state, path, chunk,
                      timeout=600)
    side.save_s.append(max(e for _, e in saves) - min(s for s, _ in saves))
    where = os.path.realpath(path)
    side.load_s.append(_load(side, lib, state, path))
    evict(where)
    side.cold_load_s.append(_load(side, lib, state, path))
    names = os.listdir(where)
    side.files = len(names)
    side.written = sum(os.path.getsize(os.path.join(where, n)) for n in names)


def compare(args: argparse.Namespace) -> tuple[dict[str, Side], int]:
    """Every figure of both libraries, measured in rounds: each round saves and loads with
    both, in turns (ours first in even rounds, torch's first in odd ones), so that both see
    the same machine (a shared host's load drifts over minutes)."""
    state = global_state(args)
    sides = {lib: Side(lib) for lib in LIBS}
    with tempfile.TemporaryDirectory(prefix="bench_checkpoint_") as tmp:
        for i in range(args.repeat):
            for lib in (LIBS if i % 2 == 0 else LIBS[::-1]):
                run_round(sides[lib], args, state, tmp, i)
    return sides, state_bytes(state) + 4


def _spread(xs: list[float]) -> str:
    return f"{min(xs):.2f} to {max(xs):.2f}" if len(xs) > 1 else f"{xs[0]:.2f}"


def rows(sides: dict[str, Side], nbytes: int) -> list[tuple[str, Any, Any, str]]:
    """(figure, ours, torch, ours / torch) rows of the table; the per-round rows pair the
    two libraries' runs of one round."""
    def figs(s: Side) -> dict[str, Any]:
        return {
            "save throughput (GB/s)": nbytes / statistics.median(s.save_s) / 1e9,
            "load throughput, 2x4 -> 8-way (GB/s)": nbytes / statistics.median(s.load_s) / 1e9,
            "load throughput, files not in the page cache (GB/s)":
                nbytes / statistics.median(s.cold_load_s) / 1e9,
            "save time (s, median)": statistics.median(s.save_s),
            "load time (s, median)": statistics.median(s.load_s),
            "save time, each round (s)": _spread(s.save_s),
            "load time, each round (s)": _spread(s.load_s),
            "load time, not cached, each round (s)": _spread(s.cold_load_s),
            "bytes written": s.written,
            "files written": s.files,
            "bytes read by the load (rchar)": s.read,
            "bytes read / bytes the target holds": s.read / nbytes,
            "loaded bit-identical": "yes" if s.correct else "NO",
        }
    ours, torch_ = sides["ours"], sides["torch"]
    per_round = {  # throughput ratio = torch's time / ours, round by round
        "save time, each round (s)": [t / o for o, t in zip(ours.save_s, torch_.save_s)],
        "load time, each round (s)": [t / o for o, t in zip(ours.load_s, torch_.load_s)],
        "load time, not cached, each round (s)": [
            t / o for o, t in zip(ours.cold_load_s, torch_.cold_load_s)],
    }
    got = {lib: figs(s) for lib, s in sides.items()}
    out = []
    for name in got["ours"]:
        o, t = got["ours"][name], got["torch"][name]
        if name in per_round:
            ratio = f"throughput {_spread(per_round[name])}"
        else:
            ratio = f"{o / t:.2f}" if not isinstance(o, str) and t else "-"
        out.append((name, o, t, ratio))
    return out


def _fmt(x: Any) -> str:
    if isinstance(x, str):
        return x
    if isinstance(x, int) or (isinstance(x, float) and x >= 1000):
        return f"{x:,.0f}"
    return f"{x:.3g}"


def print_report(args: argparse.Namespace, sides: dict[str, Side], nbytes: int,
                 command: str) -> None:
    print(f"command: {command}")
    print(f"torch {torch.__version__}, {os.cpu_count()} cores, "
          f"{datetime.datetime.now().isoformat(timespec='seconds')}, 8 simulated ranks "
          f"(simpg), one process; temporary directory under {tempfile.gettempdir()}")
    print(f"state: {args.layers} layers of dim {args.dim}, parameters + AdamW exp_avg and "
          f"exp_avg_sq, fp32: {nbytes / 1e6:.1f} MB; saved from a 2x4 dp x tp mesh, loaded "
          f"into 8-way [S(0)]; {args.repeat} rounds, each a save and two loads (cached as "
          f"the save left it, evicted) with both libraries in turn; medians, each round's")
    print("\n| figure | ours | torch DCP | ours / torch |")
    print("|---|---:|---:|---:|")
    for name, o, t, ratio in rows(sides, nbytes):
        print(f"| {name} | {_fmt(o)} | {_fmt(t)} | {ratio} |")
    print(f"\nours, self-counted bytes read (metadata, headers, chunks): "
          f"{sides['ours'].self_counted:,}")


@dataclass
class AsyncSide:
    """One library's asynchronous-save figures, one entry per round."""

    lib: str
    call_s: list[float] = field(default_factory=list)  # async_save until it returned
    done_s: list[float] = field(default_factory=list)  # async_save until the future was done
    idle_step_s: list[float] = field(default_factory=list)  # steps with no save in flight
    busy_step_s: list[float] = field(default_factory=list)  # steps while a save is in flight
    correct: bool = True


def train_step(state: dict[str, torch.Tensor], probe: dict[int, torch.Tensor]) -> None:
    """A step's stand-in: a matmul with each weight (whose time the save's thread competes
    with), then every tensor updated in place (what must not reach the bytes being saved)."""
    with torch.no_grad():
        for t in state.values():
            if t.dim() == 2:
                torch.mm(t, probe[t.shape[1]])
            t.mul_(0.999).add_(0.001)


def _async_save(lib: str, state: dict, path: str) -> Any:
    if lib == "ours":
        import dtensor.checkpoint as ours

        return ours.async_save(state, path)
    import torch.distributed.checkpoint as dcp

    return dcp.async_save(state, checkpoint_id=path, no_dist=True)


def _load_plain(lib: str, state: dict, path: str) -> None:
    if lib == "ours":
        import dtensor.checkpoint as ours

        ours.load(state, path)
        return
    import torch.distributed.checkpoint as dcp

    dcp.load(state, checkpoint_id=path, no_dist=True)


def async_round(side: AsyncSide, args: argparse.Namespace, state: dict, tmp: str,
                i: int) -> None:
    """``args.steps`` steps with no save, then one asynchronous save with steps running until
    it is done; the checkpoint is then loaded and compared with the state at the call."""
    probe = {n: torch.randn(n, 64) for n in {t.shape[1] for t in state.values() if t.dim() == 2}}
    train_step(state, probe)  # warm up
    for _ in range(args.steps):
        t0 = time.perf_counter()
        train_step(state, probe)
        side.idle_step_s.append(time.perf_counter() - t0)
    at_call = {k: t.clone() for k, t in state.items()}
    path = os.path.join(tmp, f"async-{side.lib}-{i}")
    t0 = time.perf_counter()
    future = _async_save(side.lib, state, path)
    side.call_s.append(time.perf_counter() - t0)
    while True:  # at least one step, however quick the save
        t1 = time.perf_counter()
        train_step(state, probe)
        side.busy_step_s.append(time.perf_counter() - t1)
        if future.done():
            break
    future.result()
    side.done_s.append(time.perf_counter() - t0)
    loaded = {k: torch.zeros_like(t) for k, t in at_call.items()}
    _load_plain(side.lib, loaded, path)
    side.correct = side.correct and all(torch.equal(loaded[k], at_call[k]) for k in at_call)


def compare_async(args: argparse.Namespace) -> dict[str, AsyncSide]:
    """Both libraries' asynchronous saves, in turns (who goes first alternates by round)."""
    state = {k: t.clone() for k, (t, _) in global_state(args).items()}
    state["step"] = torch.tensor(10.0)
    sides = {lib: AsyncSide(lib) for lib in LIBS}
    # DCP warns, on its save thread too, that with no process group it saves as one process
    with warnings.catch_warnings(), \
            tempfile.TemporaryDirectory(prefix="bench_checkpoint_async_") as tmp:
        warnings.filterwarnings("ignore", message="torch.distributed is disabled",
                                category=UserWarning)
        for i in range(args.repeat):
            for lib in (LIBS if i % 2 == 0 else LIBS[::-1]):
                async_round(sides[lib], args, state, tmp, i)
    return sides


def async_rows(sides: dict[str, AsyncSide]) -> list[tuple[str, Any, Any, str]]:
    """(figure, ours, torch, ours / torch) rows of the asynchronous-save table."""
    def figs(s: AsyncSide) -> dict[str, Any]:
        idle, busy = statistics.median(s.idle_step_s), statistics.median(s.busy_step_s)
        return {
            "async_save call blocks the step (s, median)": statistics.median(s.call_s),
            "step time, no save in flight (ms, median)": idle * 1e3,
            "step time, save in flight (ms, median)": busy * 1e3,
            "step time, in flight / none": busy / idle,
            "steps run while the save was in flight": len(s.busy_step_s),
            "call until the save is done (s, median)": statistics.median(s.done_s),
            "checkpoint holds the values at the call": "yes" if s.correct else "NO",
        }
    got = {lib: figs(s) for lib, s in sides.items()}
    out = []
    for name in got["ours"]:
        o, t = got["ours"][name], got["torch"][name]
        out.append((name, o, t, f"{o / t:.2f}" if not isinstance(o, str) and t else "-"))
    return out


def print_async_report(args: argparse.Namespace, sides: dict[str, AsyncSide]) -> None:
    print(f"\nasynchronous save, one process (no process group; DCP with no_dist=True), the "
          f"same state as plain tensors; {args.steps} steps with no save then steps until "
          f"the save is done, {args.repeat} rounds with both libraries in turn; load "
          f"{os.getloadavg()[0]:.2f}")
    print("\n| figure | ours | torch DCP | ours / torch |")
    print("|---|---:|---:|---:|")
    for name, o, t, ratio in async_rows(sides):
        print(f"| {name} | {_fmt(o)} | {_fmt(t)} | {ratio} |")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    command = " ".join([".venv/bin/python", "benchmarks/bench_checkpoint.py", *argv])
    if args.async_only:
        async_sides = compare_async(args)
        print(f"command: {command}")
        print_async_report(args, async_sides)
        return 0 if all(s.correct for s in async_sides.values()) else 1
    sides, nbytes = compare(args)
    async_sides = compare_async(args)
    with readme_figures.tee() as report:
        print_report(args, sides, nbytes, command)
        print_async_report(args, async_sides)
    ok = all(s.correct for s in [*sides.values(), *async_sides.values()])
    if args.write_readme and ok:
        readme_figures.write_readme("bench-checkpoint",
                                    readme_figures.through_first_table(report.getvalue()),
                                    command)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
