"""The sweep engine: the fixed (base) cases of an entry, and worlds that run many cases.

``BASE`` is the deterministic part of every run: the default tier, the slow tier and the
coverage report all start from it, so the expected-failure list and the coverage matrix
agree with what the tests see. Hypothesis then draws further meshes and placements.

One simpg world per mesh runs every end-to-end case of that mesh (``run_world``): cases run
one after another on all ranks, a failing case aborts only itself (simpg's subtest gate),
and each rank reports its failures; a case fails if it failed on any rank.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from dtensor.ops.registry import REGISTRY
from dtensor.placements import Placement
from opdb_tests.cases import (AtenCall, Entry, Sample, SampleGenerationError, aten_call,
                              base_assignments, no_case_reason, record_aten, samples, size)
from opdb_tests.causes import reason_of
from opdb_tests.checks import GENERATION, TIERS, Failure, end_to_end, soundness


@dataclass(frozen=True)
class Config:
    samples: int | None = 1  # the first N usable samples of each OpInfo
    # soundness needs no threads: 3 ranks make OpInfo sizes (5, 10, 20) uneven
    sound_meshes: tuple[tuple[int, ...], ...] = ((3,), (2, 2))
    # a world's cost grows with its ranks: 2 ranks (5 is uneven, 10 and 20 are even)
    e2e_meshes: tuple[tuple[int, ...], ...] = ((2,), (2, 2))


BASE = Config()
EXHAUSTIVE = Config(samples=None, sound_meshes=((2,), (3,), (4,), (2, 2), (2, 3)),
                    e2e_meshes=((2,), (3,), (4,), (2, 2), (3, 2)))


@dataclass
class Result:
    """What one entry's sweep found, per tier: the kinds tried and the failures."""

    key: str
    family: str
    aten: tuple[str, ...] = ()  # the aten overloads of its first sample
    rule_level: bool = False  # its samples each reach one aten op
    has_rule: bool = False  # every aten op it reaches has a rule
    tried: dict[str, set[str]] = field(default_factory=lambda: {t: set() for t in TIERS})
    failures: list[Failure] = field(default_factory=list)
    backward: bool = False  # the OpInfo supports autograd at a float dtype
    random: str = ""  # the nondeterministic_seeded aten op it calls, if any
    no_cases: str = ""  # why it tried no case at all (no usable sample), if it tried none
    cases: int = 0  # (strategy or placements, mesh) cases checked
    seconds: float = 0.0

    def failed(self, tier: str) -> bool:
        return any(f.tier == tier for f in self.failures)

    def failed_kinds(self, tier: str) -> set[str]:
        return {f.kind for f in self.failures if f.tier == tier}


def _backward_ok(e: Entry) -> bool:
    import torch

    return bool(e.opinfo.supports_autograd) and e.dtype in (torch.float32, torch.float64)


def plan_entry(e: Entry, cfg: Config) -> tuple[list[Sample], list[AtenCall | None], Result]:
    import torch

    ss = list(samples(e, cfg.samples))
    calls = [aten_call(e, s) for s in ss]
    r = Result(e.key, e.family, backward=_backward_ok(e))
    if ss:
        seen = record_aten(e, ss[0])
        r.aten = tuple(dict.fromkeys(str(f) for f in seen))
        r.has_rule = bool(seen) and all(f in REGISTRY for f in seen)
        r.random = next((str(f) for f in seen
                         if torch.Tag.nondeterministic_seeded in getattr(f, "tags", ())), "")
    r.rule_level = bool(ss) and all(c is not None for c in calls)
    return ss, calls, r


def e2e_cases(e: Entry, ss: Sequence[Sample], calls: Sequence[AtenCall | None],
              mesh_shape: tuple[int, ...], backward: bool) -> list[tuple]:
    tiers = ("forward", "backward", "inference") if backward else ("forward", "inference")
    return [(e, s, c, a, t) for s, c in zip(ss, calls)
            for a in base_assignments(s.tensors(), mesh_shape) for t in tiers]


def run_world(mesh_shape: tuple[int, ...], cases: Sequence[tuple], timeout: float = 30.0
              ) -> list[Failure | None]:
    """Run every (entry, sample, call, placements, tier) case in one world of this mesh.

    Ranks are threads of this process, so they record results in one shared table. After
    each case every rank meets at a barrier: a rank left behind in a collective of the case
    makes the barrier mismatch, simpg ends the world, the case is marked failed with that
    error, and a fresh world resumes at the next case (collectives of two cases never pair).
    """
    import simpg

    table: list[dict[int, Failure | None]] = [{} for _ in cases]
    start = 0
    while start < len(cases):
        try:
            simpg.run(_world_body, size(mesh_shape), mesh_shape, list(cases), start, table,
                      {}, timeout=timeout)
            break
        except Exception as ex:  # noqa: BLE001 - the world ended inside a case: that case fails
            done = next((i for i in range(start, len(cases))
                         if len(table[i]) < size(mesh_shape)), None)
            if done is None:
                raise  # every case finished: the world failed outside them
            e, s, call, placements, tier = cases[done]
            from opdb_tests.cases import case_id, kind

            row = table[done]
            first = next((row[r] for r in sorted(row) if row[r] is not None), None)
            reason = first.reason if first else reason_of(ex)
            cause = first.cause if first else f"world ended: {type(ex).__name__}"
            table[done] = {0: Failure(tier, e.key, s.index, s.describe(), tuple(mesh_shape),
                                      placements, reason,
                                      kind(mesh_shape, s.tensors(), placements),
                                      case_id(e.key, placements, mesh_shape), cause)}
            start = done + 1
    merged: list[Failure | None] = []
    for row in table:
        # by rank, so the reported failure does not depend on which thread finished first
        seen = [row[r] for r in sorted(row) if row[r] is not None]
        seen.sort(key=lambda f: any(w in f.reason for w in _SECONDARY))
        merged.append(seen[0] if seen else None)
    return merged


_SECONDARY = ("RankFailed", "Mismatch", "Deadlock", "Simpg")


def _world_body(mesh_shape: tuple[int, ...], cases: list[tuple], start: int,
                table: list[dict[int, Failure | None]], references: dict) -> None:
    import torch.distributed as dist

    from dtensor import init_device_mesh

    mesh = init_device_mesh("cpu", mesh_shape)
    rank = dist.get_rank()
    for i in range(start, len(cases)):
        e, s, call, placements, tier = cases[i]
        table[i][rank] = end_to_end(e, s, call, mesh, placements, tier, seed=i,
                                    references=references)
        dist.barrier()
        references.pop(i, None)  # every rank is past case i


def sweep_entry(e: Entry, cfg: Config = BASE) -> Result:
    """Every base case of one entry: soundness on each mesh, end to end in one world each.
    A sample generator that raises is the entry's one failure (tier ``samples``)."""
    t0 = time.perf_counter()
    try:
        ss, calls, r = plan_entry(e, cfg)
    except SampleGenerationError as ex:
        r = Result(e.key, e.family, backward=_backward_ok(e))
        first = ex.traceback.strip().rsplit("\n", 1)[-1]
        r.failures.append(Failure(GENERATION, e.key, -1, "(none)", (), None, ex.traceback, "",
                                  f"{e.key}[samples]", f"sample generation raises "
                                  f"{first.split(':', 1)[0]}"))
        r.seconds = time.perf_counter() - t0
        return r
    # Note [random variants]: a random op runs end to end with every rank and the reference
    # seeded alike (dtensor's sharded draws equal one device's); the harness, which runs
    # ranks one after another on one generator, cannot check its strategies
    if r.rule_level and not r.random:
        for s, c in zip(ss, calls):
            for m in cfg.sound_meshes:
                fs, kinds, n = soundness(e, s, c, m)  # type: ignore[arg-type]
                r.cases += n
                r.failures += fs
                r.tried["sound"] |= kinds | {f.kind for f in fs}
    for m in cfg.e2e_meshes:
        cases = e2e_cases(e, ss, calls, m, r.backward)
        r.cases += len(cases)
        for case, f in zip(cases, run_world(m, cases)):
            from opdb_tests.cases import kind

            r.tried[case[4]].add(kind(m, case[1].tensors(), case[3]))
            if f is not None:
                r.failures.append(f)
    if r.cases == 0:
        r.no_cases = no_case_reason(e)
    r.seconds = time.perf_counter() - t0
    return r


# -- many entries, with a progress bar ---------------------------------------------------------


class Progress:
    """A one-line textual progress bar on stderr: ``[#####.....] 120/699 add 0:42``."""

    def __init__(self, total: int, width: int = 30, stream: Any = None) -> None:
        self.total, self.width, self.done = total, width, 0
        self.stream = stream or sys.stderr
        self.t0 = time.perf_counter()

    def step(self, label: str) -> None:
        self.done += 1
        filled = self.width * self.done // max(self.total, 1)
        secs = int(time.perf_counter() - self.t0)
        self.stream.write(f"\r[{'#' * filled}{'.' * (self.width - filled)}] "
                          f"{self.done}/{self.total} {secs // 60}:{secs % 60:02d} {label[:40]:<40}")
        if self.done == self.total:
            self.stream.write("\n")
        self.stream.flush()


def _sweep_key(args: tuple[str, Config]) -> Result:
    from opdb_tests.cases import entry

    key, cfg = args
    return sweep_entry(entry(key), cfg)


def sweep(keys: Iterable[str], cfg: Config = BASE, workers: int = 1,
          progress: bool = True) -> list[Result]:
    """Sweep many entries (in worker processes when ``workers > 1``), in the given order."""
    keys = list(keys)
    bar = Progress(len(keys)) if progress else None
    results: list[Result] = []
    if workers <= 1:
        for k in keys:
            results.append(_sweep_key((k, cfg)))
            if bar:
                bar.step(k)
        return results
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(workers, initializer=_init_worker) as pool:
        for r in pool.imap(_sweep_key, [(k, cfg) for k in keys], chunksize=4):
            results.append(r)
            if bar:
                bar.step(r.key)
    return results


def _init_worker() -> None:
    import os
    import warnings

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")


def fmt_placements(per_tensor: Sequence[Sequence[Placement]]) -> str:
    return ";".join(",".join(str(p) for p in ps) for ps in per_tensor)
