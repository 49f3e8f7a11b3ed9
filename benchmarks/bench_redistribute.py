"""Bytes moved by redistribute for every placement pair: ours against torch.distributed.tensor.

    .venv/bin/python benchmarks/bench_redistribute.py [--quick]

For each mesh in (4,), (2, 2), (2, 4) and each shape in (8, 4) (even) and (7, 5) (uneven),
every (src, dst) pair of placement lists over {S(0), S(1), R, P(sum)} per mesh dim runs on
simulated ranks (simpg): one world per mesh, shape and library. Only the ``redistribute`` call
is traced; its bytes received are summed over all ranks (and the largest rank is kept). Each
result is checked (``full_tensor()`` against the original; a Partial result after
redistributing to Replicate): a wrong result is counted as "wrong", not as a figure.

The bound is our planner's ``plan_bytes``. tests/redistribute/test_planner.py checks on these
meshes and shapes that it equals the cheapest sequence that brute force finds over every step
kind (all_gather, all_to_all, all_reduce, reduce_scatter, local) on every group of mesh dims,
under the ring cost model that simpg's trace also uses. --quick runs only mesh (2, 4) x (7, 5).
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import logging
import math
import sys
import warnings
from collections import Counter
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.distributed.tensor as tdt
from torch.distributed.device_mesh import init_device_mesh as torch_init_device_mesh

import dtensor
from dtensor import redistribute
import simpg

from opdb_tests import readme_figures

try:  # run as a script, benchmarks/ is on sys.path; loaded by the tests, the root is
    import conditions
except ImportError:
    from benchmarks import conditions

MESHES = ((4,), (2, 2), (2, 4))
SHAPES = ((8, 4), (7, 5))
NAMES = ("S(0)", "S(1)", "R", "P")  # P is Partial(sum)
LIBS = ("ours", "torch")
ITEMSIZE = 4  # float32
Pair = tuple[tuple[str, ...], tuple[str, ...]]


@dataclass
class Outcome:
    """One library on one pair: bytes received (sum and max over ranks), or why there are none."""

    total: int = 0
    peak: int = 0
    ops: tuple[str, ...] = ()
    status: str = "ok"  # "ok", "wrong" or "raises"
    error: str = ""
    full_tensor_ok: bool = True  # full_tensor() of the (right) result equals the original
    aborted: bool = False  # a collective failed and simpg aborted the pair on every rank


def placements(lib: str, names: tuple[str, ...]) -> list:
    mod = dtensor if lib == "ours" else tdt
    table = {"S(0)": mod.Shard(0), "S(1)": mod.Shard(1), "R": mod.Replicate(),
             "P": mod.Partial("sum")}
    return [table[n] for n in names]


def pairs_for(ndim: int) -> list[Pair]:
    lists = list(itertools.product(NAMES, repeat=ndim))
    return [(a, b) for a in lists for b in lists]


def bound(pair: Pair, mesh_shape: tuple[int, ...], shape: tuple[int, ...]) -> int:
    src, dst = (placements("ours", p) for p in pair)
    steps = redistribute.plan(src, dst, mesh_shape, shape, ITEMSIZE)
    return redistribute.plan_bytes(steps, mesh_shape, shape, ITEMSIZE)


def full_tensor_for(shape: tuple[int, ...]) -> torch.Tensor:
    """Integer-valued float32: every sum is exact, so results compare with torch.equal."""
    return torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape) - 7


def make_source(lib: str, full: torch.Tensor, mesh, names: tuple[str, ...]):
    if lib == "ours":
        return dtensor.distribute_tensor(full, mesh, placements(lib, names))
    # torch's distribute_tensor takes no Partial: distribute with R there, then keep the value
    # on coordinate 0 of each Partial mesh dim and zeros elsewhere (what torch's R -> P does)
    plain = [n if n != "P" else "R" for n in names]
    local = tdt.distribute_tensor(full, mesh, placements(lib, plain)).to_local().clone()
    coord = mesh.get_coordinate()
    if any(n == "P" and c != 0 for n, c in zip(names, coord)):
        local.zero_()
    return tdt.DTensor.from_local(local, mesh, placements(lib, names), run_check=False,
                                  shape=full.shape, stride=full.stride())


def check_piece(lib: str, out, full: torch.Tensor, mesh, dst: tuple[str, ...]) -> str:
    """"ok" or "wrong": this rank's piece is the one the layout function (torch.chunk
    semantics, shared by both libraries) gives; a Partial result redistributes to the
    original. full_tensor() is checked apart: torch's is itself wrong on some uneven layouts,
    which says nothing of its redistribute."""
    if tuple(out.placements) != tuple(placements(lib, dst)):
        return "wrong"
    if "P" in dst:
        whole = out.redistribute(mesh, placements(lib, ("R",) * len(dst))).to_local()
        return "ok" if torch.equal(whole, full) else "wrong"
    piece = full[dtensor.local_slices(full.shape, mesh.shape, placements("ours", dst),
                                      tuple(mesh.get_coordinate()))]
    return "ok" if torch.equal(out.to_local(), piece) else "wrong"


def short(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:110]}"


def rank_body(lib: str, mesh_shape: tuple[int, ...], shape: tuple[int, ...],
              pairs: list[Pair]) -> list[Outcome]:
    """Every pair on this rank; each Outcome holds this rank's bytes (total == peak here).

    simpg.run_subtests isolates the pairs: a collective mismatch (torch issues unpadded
    all_gathers on some uneven layouts: a hang on a real backend) aborts only its pair."""
    init = dtensor.init_device_mesh if lib == "ours" else torch_init_device_mesh
    mesh = init("cpu", mesh_shape)
    full = full_tensor_for(shape)
    rank = dist.get_rank()
    results: dict[Pair, Outcome] = {}

    def one(pair: Pair) -> None:
        try:
            measure_one(pair)
        except Exception:
            results.setdefault(pair, Outcome(status="raises", error="aborted")).aborted = True
            raise

    def measure_one(pair: Pair) -> None:
        # barriers (untraced) keep the ranks in one stage, so an error is put where it began
        try:
            x = make_source(lib, full, mesh, pair[0])
        except Exception as e:
            results[pair] = Outcome(status="raises", error="building the source: " + short(e))
            raise
        dist.barrier()
        try:
            with simpg.trace() as t:
                out = x.redistribute(mesh, placements(lib, pair[1]))
        except Exception as e:  # noqa: BLE001 - a raising pair is a figure of this benchmark
            results[pair] = Outcome(status="raises", error=short(e))
            if isinstance(e, simpg.SimpgError):
                raise  # the other ranks wait in a collective: abort the pair
            return
        mine = sum(r.bytes_received[r.ranks.index(rank)] for r in t.records)
        results[pair] = o = Outcome(mine, mine, tuple(r.op for r in t.records))
        dist.barrier()
        o.status = "wrong"  # until checked
        o.status = check_piece(lib, out, full, mesh, pair[1])
        if "P" not in pair[1]:
            o.full_tensor_ok = False  # until it returns the original
            o.full_tensor_ok = torch.equal(out.full_tensor(), full)

    try:
        simpg.run_subtests({"pair": pairs}, one)
    except simpg.SubtestsFailed:
        pass  # recorded in results
    return [results.get(p, Outcome(status="raises", error="aborted")) for p in pairs]


def measure(lib: str, mesh_shape: tuple[int, ...], shape: tuple[int, ...],
            pairs: list[Pair]) -> list[Outcome]:
    """Every pair, in one world, its outcome folded over the ranks."""
    # simpg gives each rank's torch mesh its own identity (Note [per-rank process state] in
    # simpg/isolation.py): else torch's process-wide redistribute caches would hand every
    # simulated rank the first rank's plan (wrong pieces)
    per_rank = simpg.run(rank_body, math.prod(mesh_shape), lib, mesh_shape, shape, pairs,
                         timeout=120)
    folded = [fold(outs) for outs in zip(*per_rank)]
    # torch keeps state across an aborted pair (unwaited collectives): after an abort, the
    # pair and the next one are measured again, each alone in a fresh world
    aborted = [False] + [o.aborted for o in folded]
    for i in range(len(pairs)):
        if len(pairs) > 1 and (aborted[i] or aborted[i + 1]):
            folded[i] = measure(lib, mesh_shape, shape, [pairs[i]])[0]
    return folded


def fold(outs: tuple[Outcome, ...]) -> Outcome:
    """One pair's outcomes on every rank as one: bytes summed, the largest rank's, the cause."""
    bad = sorted((o for o in outs if o.status != "ok"),  # the cause before its echoes
                 key=lambda o: o.error.startswith(("RankFailedError", "aborted")))
    first = bad[0] if bad else outs[0]
    return Outcome(sum(o.total for o in outs), max(o.peak for o in outs), outs[0].ops,
                   first.status, first.error, all(o.full_tensor_ok for o in outs),
                   any(o.aborted for o in outs))


COLUMNS = ("pairs", "ours=bound", "ours>bound", "ours<torch", "ours=torch", "ours>torch",
           "torch=bound", "torch>bound", "torch<bound", "torch raises", "ours raises",
           "torch wrong", "ours wrong", "bytes ours/torch")


def tally(rows: list[tuple[Pair, int, Outcome, Outcome]]) -> dict[str, object]:
    c: Counter[str] = Counter(pairs=len(rows))
    both_ours = both_torch = 0
    for _, b, ours, torch_ in rows:
        for name, o in (("ours", ours), ("torch", torch_)):
            if o.status != "ok":
                c[f"{name} {o.status}"] += 1
                continue
            c[f"{name}=bound" if o.total == b else (f"{name}>bound" if o.total > b
                                                    else f"{name}<bound")] += 1
        if ours.status == torch_.status == "ok":
            both_ours, both_torch = both_ours + ours.total, both_torch + torch_.total
            c["ours<torch" if ours.total < torch_.total else
              "ours=torch" if ours.total == torch_.total else "ours>torch"] += 1
    out: dict[str, object] = {k: c[k] for k in COLUMNS[:-1]}
    out[COLUMNS[-1]] = f"{both_ours / both_torch:.3f}" if both_torch else "-"
    return out


# what the spread line says: the figures are bytes, not times
NO_ROUNDS = ("none: bytes are counted from simpg's trace, the same on every run; the load "
             "changes only how long the run takes")


def fmt(p: tuple[str, ...]) -> str:
    return "[" + ",".join(p) + "]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only mesh (2, 4) x shape (7, 5)")
    parser.add_argument("--write-readme", action="store_true",
                        help="also rewrite this benchmark's block of README.md")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")  # torch warns and logs (CPU all_to_all fallback,
    logging.disable(logging.WARNING)  # gathers in several steps) on every rank for every pair
    machine = conditions.Conditions()
    cases = [((2, 4), (7, 5))] if args.quick else list(itertools.product(MESHES, SHAPES))
    table, everything = [], []
    ops: dict[str, Counter[str]] = {lib: Counter() for lib in LIBS}
    for mesh_shape, shape in cases:
        pairs = pairs_for(len(mesh_shape))
        got = {lib: measure(lib, mesh_shape, shape, pairs) for lib in LIBS}
        rows = [(p, bound(p, mesh_shape, shape), o, t)
                for p, o, t in zip(pairs, got["ours"], got["torch"])]
        for lib in LIBS:
            for o in got[lib]:
                ops[lib].update(o.ops)
        table.append((f"{mesh_shape}", f"{shape}", tally(rows)))
        everything += [(mesh_shape, shape) + r for r in rows]
    totals = tally([r[2:] for r in everything])

    with readme_figures.tee() as report:
        print(f"# redistribute bytes: ours vs torch.distributed.tensor {torch.__version__}")
        print(f"`{' '.join([sys.executable.split('/')[-1]] + sys.argv)}` on "
              f"{datetime.datetime.now().isoformat(timespec='seconds')}; float32, bytes "
              f"received summed over ranks (simpg trace, ring algorithms)")
        print("bound = our planner's plan_bytes, equal to the brute-force minimum over step "
              "sequences on these meshes (tests/redistribute/test_planner.py)\n")
        print("| mesh | shape | " + " | ".join(COLUMNS) + " |")
        print("|" + "---|" * (len(COLUMNS) + 2))
        for mesh_s, shape_s, t in table + [("total", "", totals)]:
            print(f"| {mesh_s} | {shape_s} | "
                  + " | ".join(str(t[k]) for k in COLUMNS) + " |")
        print(f"\n{machine.footer(NO_ROUNDS)}")
    if args.write_readme:
        # the report's title would be a heading of the README: plain text there
        readme_figures.write_readme("bench-redistribute", report.getvalue().removeprefix("# "),
                                    " ".join([".venv/bin/python",
                                              "benchmarks/bench_redistribute.py",
                                              *sys.argv[1:]]))

    def ratio(r) -> float:
        _, _, _, _, ours, torch_ = r
        if ours.status != "ok" or torch_.status != "ok":
            return -1.0
        return math.inf if ours.total == 0 and torch_.total else torch_.total / max(ours.total, 1)

    print("\n## 10 pairs with the biggest torch/ours bytes ratio\n")
    print("| mesh | shape | src -> dst | bound | ours (max/rank) | torch (max/rank) "
          "| torch ops |")
    print("|---|---|---|---|---|---|---|")
    top = sorted(everything, key=lambda r: (ratio(r), r[5].total), reverse=True)[:10]
    for mesh_shape, shape, (src, dst), b, o, t in top:
        print(f"| {mesh_shape} | {shape} | {fmt(src)} -> {fmt(dst)} | {b} | {o.total} "
              f"({o.peak}) | {t.total} ({t.peak}) | {','.join(t.ops) or '-'} |")

    print("\n## collectives issued, all pairs\n")
    for lib in LIBS:
        print(f"- {lib}: " + ", ".join(f"{k} {v}" for k, v in sorted(ops[lib].items())))
    print("- torch's CPU path turns S(i) -> S(j) into all_gather + chunk ('CPU process group "
          "does not support alltoall'): torch's choice, counted as measured")

    errors = Counter(f"{lib}: {o.error}" for r in everything
                     for lib, o in zip(LIBS, r[4:]) if o.status == "raises")
    if errors:
        print("\n## errors raised (count: library: first line)\n")
        for e, n in errors.most_common():
            print(f"- {n}: {e}")
    for lib, i in (("ours", 4), ("torch", 5)):
        bad = [r for r in everything if r[i].status == "ok" and not r[i].full_tensor_ok]
        if bad:
            where = sorted({f"{r[0]} {r[1]} {fmt(r[2][1])}" for r in bad})
            print(f"\n{lib}: full_tensor() wrong after a right redistribute on {len(bad)} pairs; "
                  f"mesh, shape, dst: {'; '.join(where)}")
    flagged = [r for r in everything if r[4].status != "ok" or not r[4].full_tensor_ok
               or r[4].total > r[3]
               or (r[5].status == "ok" and r[4].total > r[5].total)]
    print(f"\n## ours above the bound, above torch, wrong or raising: {len(flagged)} pairs\n")
    for mesh_shape, shape, (src, dst), b, o, t in flagged:
        print(f"- {mesh_shape} {shape} {fmt(src)} -> {fmt(dst)}: bound {b}, ours {o.total} "
              f"{o.status} {o.error}, torch {t.total} {t.status}")


if __name__ == "__main__":
    main()
