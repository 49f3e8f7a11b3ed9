"""The compiled and dynamic-shape tiers: each OpInfo run on DTensors under ``torch.compile``.

The eager tiers' cases (``cases.base_assignments`` of the first sample on meshes (2,) and
(2, 2), uneven shards and Partial inputs included) run end to end through the same engine
(``sweep.run_world`` -> ``checks.end_to_end``: one simpg world per mesh, values compared with
the single-device result, gradients shard by shard), with one change: on DTensors the
OpInfo's callable runs compiled (``CompiledEntry``). Tiers:

- ``compiled``: forward under ``torch.compile(fullgraph=True, dynamic=False)``; a graph
  break is a failure (the op must compile whole), so a pass means the compiled graph ran.
- ``compiled_backward``: the same cases' gradients, through AOTAutograd's backward graph.
- ``resized``: static shapes at a second size (the next sample whose tensors have other
  shapes), forward on the first mesh, after the first size's cases through the same compiled
  function: each new shape compiles a new graph (``dynamic=False``), and a graph of the
  first size must not answer for the second.
- ``dynamic``: the DTensor inputs' dims of size >= 2 marked dynamic
  (``torch._dynamo.mark_dynamic``), at both sizes, through one compiled function (Note
  [symbolic sizes] in dtensor.symbolic).

The static cases of an entry go through one compiled function (one dynamo cache): each rank,
each placement assignment and each size recompiles on its guards, so a graph reused where it
should not be shows as wrong values. Backend ``aot_eager`` by default (``inductor`` with
``--backend inductor`` or ``OPDB_COMPILE_BACKEND=inductor`` for the tests: its tiers are
named ``compiled@inductor``..., with no recorded verdicts yet).

Failures are judged against ``expected_failures_compiled.py`` by ``expectations.judge``, the
eager tiers' mechanism, strict both ways. Regenerate (for the variants swept, see there)::

    .venv/bin/python -m opdb_tests.compiled --update-expected [KEY ...]

``--dynamic-only`` reruns just the dynamic tier of the swept variants and replaces only
those verdicts; ``--chunk N`` writes the list after every N variants, so a stopped sweep
keeps what it finished.

Rerun one case: ``.venv/bin/python -m opdb_tests.compiled add --tier compiled --sample 0
--mesh 2 --placements 'S(0);S(0)'``.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from opdb_tests.cases import (Entry, Sample, SampleGenerationError, base_assignments,
                              fmt_placements, samples)
from opdb_tests.checks import Failure

TIERS = ("compiled", "compiled_backward", "resized", "dynamic")
DEFAULT_BACKEND = "aot_eager"
# a rank may wait this long on the others' compiles (they hold dynamo's lock)
COMPILE_S = 600.0
FILE = "opdb_tests/expected_failures_compiled.py"
REGENERATE = ".venv/bin/python -m opdb_tests.compiled --update-expected"


def tier_name(tier: str, backend: Any) -> str:
    """``compiled`` for aot_eager, ``compiled@inductor`` for another backend's runs."""
    return tier if backend == DEFAULT_BACKEND else f"{tier}@{getattr(backend, '__name__', backend)}"


@dataclass(frozen=True)
class Config:
    backend: Any = DEFAULT_BACKEND  # a torch.compile backend: a name or a callable
    meshes: tuple[tuple[int, ...], ...] = ((2,), (2, 2))
    backward: bool = True  # the compiled_backward tier, where the OpInfo has autograd
    resized: bool = True  # the resized tier
    dynamic: bool = True  # the dynamic tier
    dynamic_meshes: tuple[tuple[int, ...], ...] = ((2,),)


BASE = Config()
# the default run's slice: forward on (2,) only, for variants whose compiled tiers pass (the
# list records none of their kinds, so a subset of the cases can be judged against it)
QUICK = Config(meshes=((2,),), backward=False)


# -- the compiled callable -------------------------------------------------------------------


_NO_LIMIT = dict(recompile_limit=10_000, accumulated_recompile_limit=10_000,
                 fail_on_recompile_limit_hit=True)


def root_error(ex: BaseException) -> BaseException:
    """The error dynamo or a backend wrapped (``InternalTorchDynamoError``,
    ``BackendCompilerFailed``, ``TorchRuntimeError``...), with its own traceback: its kind
    then names the aten op that raised, as an eager failure's does."""
    while type(ex).__module__.startswith(("torch._dynamo", "torch._inductor")):
        # InternalTorchDynamoError re-raises ``from None``: the original is its context
        inner = getattr(ex, "inner_exception", None) or ex.__cause__ or ex.__context__
        if inner is None:
            break
        ex = inner
    return ex


def compiled_op(eager: Callable[..., Any], backend: Any, dynamic: bool) -> Callable[..., Any]:
    """The OpInfo's callable, compiled where it meets a DTensor, eager on plain tensors (the
    single-device reference). ``dynamic``: the DTensor inputs' dims of size >= 2 are marked
    dynamic first."""
    import torch
    from torch.utils import _pytree as pytree

    from dtensor import DTensor

    def call(*args: Any, **kwargs: Any) -> Any:
        return eager(*args, **kwargs)

    compiled = torch.compile(call, backend=backend, fullgraph=True, dynamic=False)

    def op(*args: Any, **kwargs: Any) -> Any:
        dts = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, DTensor)]
        if not dts:
            return eager(*args, **kwargs)
        if dynamic:
            for t in dts:
                dims = [d for d in range(t.dim()) if t.shape[d] >= 2]
                if dims:
                    torch._dynamo.mark_dynamic(t, dims)
        try:
            # a failing compile must fail, never fall back to eager: each rank, placement
            # assignment and sample recompiles the one function, past dynamo's limit of 8
            # (dynamo's config is per thread: set on the rank's own)
            with torch._dynamo.config.patch(**_NO_LIMIT):
                return compiled(*args, **kwargs)
        except Exception as ex:  # noqa: BLE001 - re-raised as the error it wraps
            inner = root_error(ex)
            if inner is ex:
                raise
            raise inner from ex

    return op


@dataclass(frozen=True)
class CompiledEntry(Entry):
    """An entry whose OpInfo's ``op`` is ``compiled_op`` (compare=False: OpInfos do not
    hash). Key, dtype and samples are the eager entry's."""

    info: Any = field(default=None, compare=False)

    @property
    def opinfo(self) -> Any:
        return self.info

    @classmethod
    def of(cls, e: Entry, backend: Any, dynamic: bool) -> CompiledEntry:
        info = copy.copy(e.opinfo)
        info.op = compiled_op(e.opinfo.op, backend, dynamic)
        return cls(e.key, e.index, e.dtype, info)


# -- failures and their reproducer -------------------------------------------------------------


def repro_command(tier: str, key: str, sample_index: int, mesh_shape: Sequence[int],
                  per_tensor: Sequence[Sequence[Any]] | None) -> str:
    base, _, backend = tier.partition("@")
    cmd = [".venv/bin/python", "-m", "opdb_tests.compiled", key, "--tier", base]
    cmd += ["--backend", backend] if backend else []
    cmd += ["--sample", str(sample_index), "--mesh", ",".join(map(str, mesh_shape))]
    if per_tensor is not None:
        cmd += ["--placements", fmt_placements(per_tensor)]
    return " ".join(shlex.quote(c) for c in cmd)


@dataclass(frozen=True)
class CompiledFailure(Failure):
    """A failure of a compiled tier: its reproducer is this module's command."""

    def report(self) -> str:
        text = super().report()
        head = text.rsplit("\n  rerun: ", 1)[0]
        return head + "\n  rerun: " + repro_command(self.tier, self.key, self.sample,
                                                    self.mesh_shape, self.placements)


def _as_tier(f: Failure, tier: str) -> CompiledFailure:
    fields = {x.name: getattr(f, x.name) for x in dataclasses.fields(Failure)}
    return CompiledFailure(**{**fields, "tier": tier})


# -- running an entry --------------------------------------------------------------------------


@dataclass
class Run:
    """What the compiled tiers found for one entry."""

    key: str
    tiers: list[str] = field(default_factory=list)  # the tiers it ran
    failures: list[CompiledFailure] = field(default_factory=list)
    cases: dict[str, int] = field(default_factory=dict)  # per tier
    # wall seconds, compiles included: "static" (compiled, compiled_backward, resized), "dynamic"
    seconds: dict[str, float] = field(default_factory=dict)
    no_cases: str = ""
    # the OpInfo's sample generator raises: the eager tiers' failure (test_opdb), not run here
    generation_error: str = ""


def two_sizes(e: Entry) -> list[Sample]:
    """The first sample and the next whose tensors have other shapes (if any)."""
    ss = samples(e, 8)
    if not ss:
        return []
    shapes = [tuple(t.shape for t in s.tensors()) for s in ss]
    other = next((s for s, sh in zip(ss, shapes) if sh != shapes[0]), None)
    return [ss[0]] + ([other] if other is not None else [])


# a world: (dynamic, mesh, its cases as (sample, placements, eager tier, this module's tier))
World = tuple[bool, tuple[int, ...], list[tuple[Sample, tuple, str, str]]]


def plan(e: Entry, cfg: Config, backward: bool) -> list[World]:
    """The worlds of an entry's compiled tiers, static ones first. The resized cases (the
    second size) follow the first mesh's compiled cases in their world, through the same
    compiled function: a graph of the first size must not answer for the second."""
    sizes = two_sizes(e)
    name = {t: tier_name(t, cfg.backend) for t in TIERS}
    eager = [("forward", name["compiled"])]
    eager += [("backward", name["compiled_backward"])] if cfg.backward and backward else []
    worlds: list[World] = []
    for i, m in enumerate(cfg.meshes):
        cases = [(sizes[0], a, t, label) for a in base_assignments(sizes[0].tensors(), m)
                 for t, label in eager]
        if i == 0 and cfg.resized and len(sizes) > 1:
            cases += [(sizes[1], a, "forward", name["resized"])
                      for a in base_assignments(sizes[1].tensors(), m)]
        worlds.append((False, m, cases))
    if cfg.dynamic:
        worlds += [(True, m, [(s, a, "forward", name["dynamic"]) for s in sizes
                              for a in base_assignments(s.tensors(), m)])
                   for m in cfg.dynamic_meshes]
    return worlds


def _run_world(e: Entry, world: World) -> list[CompiledFailure]:
    from opdb_tests.cases import aten_call
    from opdb_tests.sweep import run_world

    _, m, cases = world
    calls = {id(s): aten_call(e, s) for s, *_ in cases}
    found = run_world(m, [(e, s, calls[id(s)], a, t) for s, a, t, _ in cases],
                      timeout=COMPILE_S)
    return [_as_tier(f, label) for (*_, label), f in zip(cases, found) if f is not None]


def run_entry(e: Entry, cfg: Config = BASE) -> Run:
    """Every compiled case of one entry: the static worlds through one compiled function,
    the dynamic ones through another, each from a fresh dynamo (caches reset)."""
    import torch

    from opdb_tests.cases import no_case_reason
    from opdb_tests.sweep import Config as SweepConfig
    from opdb_tests.sweep import plan_entry

    r = Run(e.key)
    try:
        ss, _, planned = plan_entry(e, SweepConfig(samples=1))
        worlds = plan(e, cfg, planned.backward) if ss else []
    except SampleGenerationError as ex:
        r.generation_error = ex.traceback.strip().rsplit("\n", 1)[-1]
        return r
    if not ss:
        r.no_cases = no_case_reason(e)
        return r
    for dynamic in (False, True):
        mine = [w for w in worlds if w[0] == dynamic]
        if not mine:
            continue
        torch._dynamo.reset()
        t0 = time.perf_counter()
        ce = CompiledEntry.of(e, cfg.backend, dynamic)
        for w in mine:
            r.failures += _run_world(ce, w)
            for *_, label in w[2]:
                r.cases[label] = r.cases.get(label, 0) + 1
        r.seconds["dynamic" if dynamic else "static"] = time.perf_counter() - t0
    r.tiers = list(r.cases)
    torch._dynamo.reset()
    return r


def judge(r: Run, table: Any = None) -> list[str]:
    """``expectations.judge`` of a run against the compiled tiers' list."""
    from opdb_tests import expectations
    from opdb_tests.expected_failures_compiled import EXPECTED

    return expectations.judge(r.key, r.tiers, r.failures, table=EXPECTED if table is None
                              else table, file=FILE, regenerate=REGENERATE)


# -- the list ----------------------------------------------------------------------------------


def render(expected: dict[tuple[str, str], dict[str, str]], swept: Sequence[str],
           seconds: dict[str, float]) -> str:
    from opdb_tests.expectations import expected_lines

    lines = ['"""Expected failures of the compiled tiers (opdb_tests/compiled.py), generated by',
             f"``{REGENERATE}``: every reason is today's.",
             "",
             "EXPECTED: per (OpInfo variant, tier), each kind of failure -> the first failing",
             "case's reason; strict both ways (expectations.judge). Tiers: " + ", ".join(TIERS)
             + ".",
             "SWEPT: the variants whose verdicts are recorded here, each with the wall seconds",
             "its three tiers took in the sweep that wrote it (compiles included, aot_eager;",
             "indicative only: worker processes on shared cores). The slow tier runs exactly",
             "these; variants not swept yet have no verdict.",
             '"""', "", "SWEPT: dict[str, float] = {"]
    lines += [f"    {k!r}: {seconds[k]:.1f}," for k in swept]
    lines += ["}", ""] + expected_lines(expected)
    return "\n".join(lines) + "\n"


def update_expected(runs: Sequence[Run], only_tier: str | None = None) -> int:
    """Rewrite the list for these variants (their entries from this run), keeping the
    verdicts of variants not run now; with ``only_tier``, only that tier's verdicts of these
    variants are replaced (their recorded seconds stay). Reads the file as it is now, so
    successive calls (one per chunk) accumulate."""
    import importlib

    from opdb_tests import expectations
    from opdb_tests import expected_failures_compiled as listed
    from opdb_tests.cases import entries

    listed = importlib.reload(listed)
    order = {e.key: i for i, e in enumerate(entries())}
    done = {r.key for r in runs}
    new = {kt: kinds for kt, kinds in listed.EXPECTED.items()
           if kt[0] not in done or (only_tier is not None and kt[1] != only_tier)}
    seconds = {k: v for k, v in listed.SWEPT.items() if k not in done or only_tier is not None}
    for r in runs:
        if only_tier is None:
            seconds[r.key] = sum(r.seconds.values())
        for t in r.tiers:
            fs = [f for f in r.failures if f.tier == t]
            if fs:
                new[(r.key, t)] = expectations.reasons(fs)
    swept = sorted(seconds, key=lambda k: order.get(k, len(order)))
    Path(__file__).with_name("expected_failures_compiled.py").write_text(
        render(new, swept, seconds))
    return len(new)


# -- command line --------------------------------------------------------------------------------


def _run_key(args: tuple[str, Config]) -> Run:
    from opdb_tests.cases import entry

    key, cfg = args
    return run_entry(entry(key), cfg)


def run_many(keys: Sequence[str], cfg: Config, workers: int) -> list[Run]:
    from opdb_tests.sweep import Progress, _init_worker

    bar = Progress(len(keys))
    out: list[Run] = []
    if workers <= 1:
        for k in keys:
            out.append(_run_key((k, cfg)))
            bar.step(k)
        return out
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(workers, initializer=_init_worker) as pool:
        for r in pool.imap(_run_key, [(k, cfg) for k in keys]):
            out.append(r)
            bar.step(r.key)
    return out


def eager_seconds(key: str, cfg: Config) -> float:
    """The seconds the compiled tiers' cases of ``key`` take eagerly (after one warm-up)."""
    from opdb_tests.cases import entry
    from opdb_tests.sweep import Config as SweepConfig
    from opdb_tests.sweep import plan_entry

    e = entry(key)
    worlds = plan(e, cfg, plan_entry(e, SweepConfig(samples=1))[2].backward)
    _run_world(e, worlds[0])
    t0 = time.perf_counter()
    for w in worlds:
        _run_world(e, w)
    return time.perf_counter() - t0


def _one_case(args: argparse.Namespace, cfg: Config) -> int:
    """Rerun one case (every base assignment without --placements); a resized case runs
    after the first size's forward cases on its mesh, through the same compiled function."""
    from opdb_tests.cases import entry, parse_placements, sample

    e = entry(args.key[0])
    s = sample(e, args.sample)
    mesh = tuple(int(x) for x in args.mesh.split(","))
    a = parse_placements(args.placements) if args.placements is not None else None
    eager_tier = "backward" if args.tier == "compiled_backward" else "forward"
    label = tier_name(args.tier, cfg.backend)
    cases = [(s, x, eager_tier, label)
             for x in ([a] if a is not None else base_assignments(s.tensors(), mesh))]
    if args.tier == "resized":
        first = two_sizes(e)[0]
        cases = [(first, x, "forward", tier_name("compiled", cfg.backend))
                 for x in base_assignments(first.tensors(), mesh)] + cases
    ce = CompiledEntry.of(e, cfg.backend, args.tier == "dynamic")
    fs = _run_world(ce, (args.tier == "dynamic", mesh, cases))
    for f in fs:
        print(f.report())
    print("FAIL" if fs else "ok")
    return 1 if fs else 0


def _print_run(r: Run, cfg: Config, baseline: bool) -> None:
    secs = ", ".join(f"{t} {r.cases[t]}" for t in r.tiers) + " cases; " + ", ".join(
        f"{k} {v:.1f}s" for k, v in r.seconds.items()) if r.tiers else ""
    base = f" (eager: {eager_seconds(r.key, cfg):.2f}s)" if baseline and r.tiers else ""
    why = r.no_cases or r.generation_error
    print(f"{r.key}: {secs or 'not run: ' + why}{base}")
    for p in judge(r):
        print("  " + p.replace("\n", "\n  "))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m opdb_tests.compiled", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("key", nargs="*", help="OpInfo variants (default: every one)")
    ap.add_argument("--backend", default=DEFAULT_BACKEND)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--update-expected", action="store_true")
    ap.add_argument("--quick", action="store_true", help="the default run's cases (QUICK)")
    ap.add_argument("--baseline", action="store_true",
                    help="also time the same cases eagerly (what compiling adds)")
    ap.add_argument("--tier", choices=TIERS, default=None, help="rerun one case of this tier")
    ap.add_argument("--sample", type=int, default=0)
    ap.add_argument("--mesh", default="2")
    ap.add_argument("--placements", default=None)
    ap.add_argument("--dynamic-only", action="store_true",
                    help="run only the dynamic tier of swept variants; with --update-expected "
                         "replace only their dynamic verdicts")
    ap.add_argument("--chunk", type=int, default=0,
                    help="with --update-expected, write the list after every CHUNK variants")
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import warnings

    warnings.simplefilter("ignore")
    cfg = dataclasses.replace(QUICK if args.quick else BASE, backend=args.backend)
    if args.tier is not None:
        return _one_case(args, cfg)
    from opdb_tests.cases import entries
    from opdb_tests.expected_failures import SKIP

    keys = args.key or [e.key for e in entries() if e.key not in SKIP]
    only_tier = None
    if args.dynamic_only:
        from opdb_tests.expected_failures_compiled import SWEPT

        unswept = [k for k in keys if k not in SWEPT]
        if args.key and unswept:
            ap.error(f"--dynamic-only re-records swept variants; not swept: {unswept}")
        keys = [k for k in keys if k in SWEPT]
        cfg = dataclasses.replace(cfg, meshes=(), backward=False, resized=False, dynamic=True)
        only_tier = "dynamic"
    t0 = time.perf_counter()
    step = args.chunk if args.chunk > 0 and args.update_expected else len(keys) or 1
    runs: list[Run] = []
    for i in range(0, len(keys), step):
        chunk = run_many(keys[i:i + step], cfg, args.workers)
        runs += chunk
        for r in chunk:  # judged against the list as it was before this chunk
            _print_run(r, cfg, args.baseline)
        if args.update_expected:
            n = update_expected(chunk, only_tier)
            print(f"wrote {FILE} ({n} entries) after {len(runs)}/{len(keys)} variants")
    print(f"{len(runs)} variants in {time.perf_counter() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
