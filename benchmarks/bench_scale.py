"""How redistribute's cost grows with the number of ranks: ours against torch.distributed.tensor.

    .venv/bin/python benchmarks/bench_scale.py [--quick] [--write-readme]

For each world size (2 to 64 ranks, a 1-D mesh) one simpg world runs both libraries side by
side: every rank builds our mesh and torch's (fresh per rank: Note [per-rank process state] in
simpg/isolation.py), then times ``redistribute`` for S(0)->R, R->S(0), S(0)->S(1) and P(sum)->R on
a 64x64 float32 tensor and a larger one. Times are µs per call on rank 0, best of several
rounds (a redistribute is a collective: a call's time includes every rank's turn, so it is the
world's time, on this machine's cores). Ours and torch's alternate round by round, so a burst
of other work on the shared cores hits both. Each result is checked once against the piece
``dtensor.layout`` gives. growth is the time at the largest world size over the time at 4
ranks; ratio is ours over torch's.

--quick runs 2, 4, 16 and 64 ranks on 64x64 only.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.tensor as tdt
from torch.distributed.device_mesh import init_device_mesh as torch_init_device_mesh

import dtensor
import simpg

from opdb_tests import readme_figures

try:  # run as a script, benchmarks/ is on sys.path; loaded by the tests, the root is
    import conditions
except ImportError:
    from benchmarks import conditions

WORLD_SIZES = (2, 4, 8, 16, 32, 64)
QUICK_WORLD_SIZES = (2, 4, 16, 64)
SHAPES = ((64, 64), (512, 512))
CASES = (("S(0)", "R"), ("R", "S(0)"), ("S(0)", "S(1)"), ("P", "R"))
LIBS = ("ours", "torch")
GROWTH_FROM = 4
Timings = dict[tuple[str, tuple[int, int], str], float]  # (case, shape, lib) -> µs per call
Rounds = dict[tuple[str, tuple[int, int], str], list[float]]  # the same, each round's


def placement(lib: str, name: str) -> Any:
    mod = dtensor if lib == "ours" else tdt
    return {"S(0)": mod.Shard(0), "S(1)": mod.Shard(1), "R": mod.Replicate(),
            "P": mod.Partial("sum")}[name]


def full_tensor_for(shape: tuple[int, ...]) -> torch.Tensor:
    """Integer-valued float32: a sum of Partial pieces is exact."""
    return (torch.arange(shape[0] * shape[1]) % 251).float().reshape(shape)


def make_source(lib: str, mesh: Any, full: torch.Tensor, name: str) -> Any:
    if name != "P":
        dist_fn = dtensor.distribute_tensor if lib == "ours" else tdt.distribute_tensor
        return dist_fn(full, mesh, [placement(lib, name)])
    # P(sum): the whole tensor on rank 0, zeros elsewhere (neither library distributes to P)
    local = full.clone() if dist.get_rank() == 0 else torch.zeros_like(full)
    cls = dtensor.DTensor if lib == "ours" else tdt.DTensor
    return cls.from_local(local, mesh, [placement(lib, name)], run_check=False,
                          shape=full.shape, stride=full.stride())


def check(lib: str, out: Any, mesh: Any, full: torch.Tensor, dst: str) -> None:
    """Raise unless this rank holds the piece the layout function gives for ``dst``."""
    coord = tuple(mesh.get_coordinate())
    want = full[dtensor.local_slices(full.shape, (dist.get_world_size(),),
                                     [placement("ours", dst)], coord)]
    if not torch.equal(out.to_local(), want):
        raise RuntimeError(f"{lib} redistribute ->{dst} on {dist.get_world_size()} ranks: rank "
                           f"{dist.get_rank()} holds a wrong piece")


def iterations(world_size: int, shape: tuple[int, int], quick: bool) -> tuple[int, int]:
    """(calls per round, rounds): fewer calls where one call moves more, so a world size
    costs roughly the same wall time."""
    work = world_size * shape[0] * shape[1] // 4096
    calls = max(2, min(50, 400 // max(1, work)))
    return (max(2, calls // 2), 3) if quick else (calls, 5)


def time_loop(call: Callable[[], Any], calls: int) -> float:
    dist.barrier()  # start together: rank 0 must not time the others' lag
    t0 = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - t0) / calls


def rank_body(shapes: Sequence[tuple[int, int]], quick: bool,
              repeat: tuple[int, int] | None = None) -> Rounds:
    """Every case's round times (µs per call) on this rank; ``repeat`` (calls per round,
    rounds) overrides the counts."""
    n = dist.get_world_size()
    meshes = {"ours": dtensor.init_device_mesh("cpu", (n,)),
              "torch": torch_init_device_mesh("cpu", (n,))}
    times: Rounds = {}
    for shape in shapes:
        full = full_tensor_for(shape)
        calls, rounds = repeat or iterations(n, shape, quick)
        for src, dst in CASES:
            fns = {}
            for lib in LIBS:
                mesh, x = meshes[lib], make_source(lib, meshes[lib], full, src)
                target = [placement(lib, dst)]
                fns[lib] = lambda x=x, mesh=mesh, target=target: x.redistribute(mesh, target)
                check(lib, fns[lib](), mesh, full, dst)  # also warms the caches
            for _ in range(rounds):
                for lib in LIBS:
                    key = (f"{src}->{dst}", shape, lib)
                    times.setdefault(key, []).append(time_loop(fns[lib], calls) * 1e6)
    return times


def measure_rounds(world_size: int, shapes: Sequence[tuple[int, int]], quick: bool,
                   repeat: tuple[int, int] | None = None) -> Rounds:
    """Rank 0's round times (µs per call) of every case."""
    return simpg.run(rank_body, world_size, shapes, quick, repeat, timeout=600)[0]


def measure(world_size: int, shapes: Sequence[tuple[int, int]], quick: bool,
            repeat: tuple[int, int] | None = None) -> Timings:
    """Rank 0's best round (µs per call) of every case."""
    return best_of(measure_rounds(world_size, shapes, quick, repeat))


def best_of(rounds: Rounds) -> Timings:
    return {k: min(v) for k, v in rounds.items()}


def spread_text(by_size: dict[int, Rounds]) -> str:
    return conditions.worst_over_best(
        {f"{lib} {case} {shape[0]}x{shape[1]} at {n} ranks": t
         for n, rounds in by_size.items() for (case, shape, lib), t in rounds.items()})


def report(by_size: dict[int, Timings], shapes: Sequence[tuple[int, int]]) -> None:
    sizes = sorted(by_size)
    last = sizes[-1]
    growth_from = GROWTH_FROM if GROWTH_FROM in by_size and last > GROWTH_FROM else sizes[0]
    head = " | ".join(str(n) for n in sizes)
    print(f"| case | shape | | {head} | growth {growth_from}->{last} |")
    print("|" + "---|" * (len(sizes) + 4))
    for shape in shapes:
        for src, dst in CASES:
            case = f"{src}->{dst}"
            for lib in LIBS:
                t = [by_size[n][(case, shape, lib)] for n in sizes]
                g = by_size[last][(case, shape, lib)] / by_size[growth_from][(case, shape, lib)]
                label = f"| {case} | {shape[0]}x{shape[1]} |" if lib == "ours" else "| | |"
                print(f"{label} {lib} µs | " + " | ".join(f"{v:.0f}" for v in t)
                      + f" | {g:.1f}x |")
            ratios = [by_size[n][(case, shape, "ours")] / by_size[n][(case, shape, "torch")]
                      for n in sizes]
            print("| | | ours/torch | " + " | ".join(f"{r:.2f}" for r in ratios) + " | |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"world sizes {QUICK_WORLD_SIZES}, shape {SHAPES[0]} only")
    parser.add_argument("--write-readme", action="store_true",
                        help="also rewrite this benchmark's block of README.md")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")  # torch warns (CPU fallbacks) on every rank
    logging.disable(logging.WARNING)
    sizes = QUICK_WORLD_SIZES if args.quick else WORLD_SIZES
    shapes = SHAPES[:1] if args.quick else SHAPES
    machine = conditions.Conditions()
    rounds_by_size = {}
    for n in sizes:
        rounds_by_size[n] = measure_rounds(n, shapes, args.quick)
        print(f"{n} ranks measured", file=sys.stderr)
    by_size = {n: best_of(r) for n, r in rounds_by_size.items()}
    with readme_figures.tee() as out:
        print(f"# redistribute time by world size: ours vs torch.distributed.tensor "
              f"{torch.__version__}")
        print(f"`{' '.join([sys.executable.split('/')[-1]] + sys.argv)}` on "
              f"{datetime.datetime.now().isoformat(timespec='seconds')}; float32, 1-D mesh, "
              f"both on simpg in one world; µs per call on rank 0, best of rounds\n")
        report(by_size, shapes)
        print(f"\n{machine.footer(spread_text(rounds_by_size))}")
    if args.write_readme:
        readme_figures.write_readme("bench-scale", out.getvalue().removeprefix("# "),
                                    " ".join([".venv/bin/python", "benchmarks/bench_scale.py",
                                              *sys.argv[1:]]))


if __name__ == "__main__":
    main()
