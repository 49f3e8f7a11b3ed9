"""Op-database testing, side by side on the same OpInfos, on this machine: torch's own
harnesses against our default op tier.

- torch, threaded: the pattern of torch's ``test/distributed/tensor/test_dtensor_ops.py``
  (``TestMultiThreadedDTensorOps``) on ``DTensorOpTestBase``: per OpInfo, 4 threads on
  torch's multithreaded process group; every sample at float32, every Replicate / even Shard
  combination ``DTensorConverter`` yields on a 1-D 4-rank mesh, op run on DTensors and
  ``full_tensor()`` compared with the plain result (forward only).
- torch, LocalTensor: the same tests (``TestLocalDTensorOps``) under ``LocalTensorMode`` on a
  ``fake`` process group, every rank in one thread.
- ours: what ``bash scripts/test.sh`` runs of ``opdb_tests`` by default, ``test_op[KEY]``:
  ``sweep.BASE`` (soundness of every rule strategy on meshes (3,) and (2, 2); forward and
  backward end to end on (2,) and (2, 2), R / S / uneven S / Partial inputs, in one simpg
  world per mesh), the verdict against ``expected_failures.py``, and one hypothesis draw in
  the ci profile.

torch's two harnesses run in subprocesses that never import simpg or dtensor
(``torch_opdb_harness.py``, which says how it follows torch's file). A case is one placement
combination of one sample (torch), one (strategy or placement assignment, mesh, tier) (ours).
OpInfos are taken evenly from op_db (``--ops N``, or ``--ops all``) and run in chunks, each
chunk by the three harnesses in turn (rotating who goes first), so that a change in the
machine's load falls on all three alike. Each harness warms up on ``add`` before the clock.

    .venv/bin/python benchmarks/bench_opdb.py [--ops 12 | --ops all] [--chunk 25] [--json F]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
import time
import warnings
from typing import Any, Callable

from opdb_tests import readme_figures

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HARNESS = os.path.join(ROOT, "benchmarks", "torch_opdb_harness.py")
TORCH_MODES = {"threaded": "torch, multithreaded pg", "local": "torch, LocalTensor mode"}
OURS = "ours, default op tier"
NOTES = (  # what the table's figures stand for, printed under it
    "torch's case: one sample (every float32 sample; op_db sizes shrunk so that 4 divides "
    "them) with one Replicate / even Shard placement per tensor (every combination) on a 1-D "
    "4-rank mesh; checked: the op's forward result on DTensors (full_tensor) against the plain "
    "op. An OpInfo stops at its first failing case; one without float32 has no test.",
    "our case: one rule strategy's soundness (each rank's local result is its claimed shard) "
    "on (3,) or (2,2), or one end-to-end run, forward or backward, against one device on (2,) "
    "or (2,2) with R, S, uneven S or Partial inputs; op_db's own sizes, the first usable "
    "sample, then one hypothesis draw. An OpInfo without a usable sample is skipped; failures "
    "are judged against expected_failures.py.",
)


def _keys(n: int | None) -> list[str]:
    """``n`` OpInfo variants evenly spaced in op_db order (every one when ``n`` is None)."""
    from opdb_tests.cases import entries

    keys = [e.key for e in entries()]
    if n is None or n >= len(keys):
        return keys
    return [keys[i * len(keys) // n] for i in range(n)]


def warm(keys: list[str]) -> None:
    """What a sweep of ``keys`` does before its first case, so that it is not timed: one
    intra-op thread, the samples generated and mapped to aten, the runtime's lazy imports.
    (``profile_opdb`` times sweeps after it; ``ours`` below times sample generation too, as
    torch's harnesses do.)"""
    import torch

    from opdb_tests.cases import entry, samples
    from opdb_tests.sweep import sweep_entry

    torch.set_num_threads(1)
    for k in keys:
        samples(entry(k), 1)
    sweep_entry(entry("add"))


# -- ours: the default tier's test_op ----------------------------------------------------------


class DefaultTier:
    """Runs ``opdb_tests.test_opdb.test_op`` (the default tier's test of one OpInfo) as pytest
    would, outside pytest: the ci hypothesis profile loaded, a skip or a failure recorded.
    Counts cases by wrapping the sweep's ``soundness`` and ``run_world`` while it runs."""

    def __init__(self) -> None:
        # the root conftest registers and loads the hypothesis profiles of the default run
        # (ci unless HYPOTHESIS_PROFILE says otherwise); under pytest it is already imported
        import conftest  # noqa: F401
        import torch

        from opdb_tests import test_opdb

        torch.set_num_threads(1)
        self.test_opdb = test_opdb
        self.cases = 0
        self.run(["add"])  # untimed: lazy imports, first dispatch, first worlds
        from opdb_tests.cases import samples

        samples.cache_clear()  # the timed keys generate their samples, as torch's tests do

    def _counting(self, fn: Callable, count: Callable[[tuple, Any], int]) -> Callable:
        def call(*a: Any, **kw: Any) -> Any:
            found = fn(*a, **kw)
            self.cases += count(a, found)
            return found
        return call

    def run(self, keys: list[str]) -> dict[str, Any]:
        import pytest

        from opdb_tests import sweep

        t = self.test_opdb
        saved = sweep.soundness, t.soundness, sweep.run_world
        sweep.soundness = self._counting(saved[0], lambda a, found: found[2])
        t.soundness = self._counting(saved[1], lambda a, found: found[2])
        sweep.run_world = self._counting(saved[2], lambda a, found: len(a[1]))
        record: dict[str, dict[str, Any]] = {}
        try:
            with warnings.catch_warnings():
                # pytest ignores UserWarning for test_op and makes others errors; op_db's
                # samples warn (degrees of freedom...), which says nothing about sharding
                warnings.simplefilter("ignore")
                for k in keys:
                    before = self.cases
                    t0 = time.perf_counter()
                    try:
                        t.test_op(k)
                        outcome = "pass"
                    except pytest.skip.Exception:
                        outcome = "skip"
                    except AssertionError:  # a failure not listed in expected_failures.py
                        outcome = "fail"
                    record[k] = {"outcome": outcome, "cases": self.cases - before,
                                 "seconds": time.perf_counter() - t0}
        finally:
            sweep.soundness, t.soundness, sweep.run_world = saved
        return {"seconds": sum(r["seconds"] for r in record.values()),
                "cases": sum(r["cases"] for r in record.values()), "per_op": record}


def ours(keys: list[str]) -> dict[str, Any]:
    """The default tier's tests of ``keys``, timed after a warm-up."""
    return DefaultTier().run(keys)


# -- torch's harnesses, in subprocesses ---------------------------------------------------------


class TorchHarness:
    """A ``torch_opdb_harness.py MODE --serve`` subprocess: started, warmed up once
    (``ready``), then asked to run one chunk of OpInfos at a time."""

    def __init__(self, mode: str, hang_after: int = 120) -> None:
        # a threaded test's rank threads are joined with this timeout each (torch: 300 s)
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTORCH_PRINT_REPRO_ON_FAILURE="0",
                   DISTRIBUTED_TESTS_DEFAULT_TIMEOUT=str(hang_after))
        self.mode = mode
        self.proc = subprocess.Popen([sys.executable, HARNESS, mode, "--serve"], cwd=ROOT,
                                     env=env, text=True, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def ready(self) -> TorchHarness:
        """Wait for its warm-up (harnesses started together warm up side by side, untimed)."""
        self._answer()  # {"ready": mode}
        return self

    def _answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"torch harness {self.mode!r} ended (exit code "
                                   f"{self.proc.wait()}); run  {sys.executable} {HARNESS} "
                                   f"{self.mode} '[\"add\"]'  to see why")
            if line.startswith("{"):  # an op or a test may print too
                return json.loads(line)

    def run(self, keys: list[str]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(keys) + "\n")
        self.proc.stdin.flush()
        found = self._answer()
        if found["imported"]:
            raise RuntimeError(f"torch harness {self.mode!r} imported {found['imported']}")
        return found

    def close(self) -> None:
        """End the subprocess: stdin closed, it leaves its loop; killed if it does not."""
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()


# -- interleaved runs and the table -------------------------------------------------------------


def compare(keys: list[str], chunk: int = 25, progress: bool = True, hang_after: int = 120
            ) -> dict[str, dict]:
    """Every harness on ``keys``, chunk by chunk in rotating order; per harness the summed
    seconds and cases and each OpInfo's record."""
    starting = {m: TorchHarness(m, hang_after) for m in TORCH_MODES}
    try:
        ours_run = DefaultTier()
        runners: dict[str, Callable[[list[str]], dict]] = {
            **{TORCH_MODES[m]: h.ready().run for m, h in starting.items()}, OURS: ours_run.run}
        totals = {name: {"seconds": 0.0, "cases": 0, "per_op": {}} for name in runners}
        names = list(runners)
        chunks = [keys[i:i + chunk] for i in range(0, len(keys), chunk)]
        for i, part in enumerate(chunks):
            for name in names[i % 3:] + names[:i % 3]:
                found = runners[name](part)
                totals[name]["seconds"] += found["seconds"]
                totals[name]["cases"] += found["cases"]
                totals[name]["per_op"].update(found["per_op"])
            if progress:
                sys.stderr.write(f"\r{min((i + 1) * chunk, len(keys))}/{len(keys)} OpInfos")
                sys.stderr.flush()
        if progress:
            sys.stderr.write("\n")
    finally:
        for h in starting.values():
            h.close()
    return totals


def _rate(t: dict) -> float:
    return t["cases"] / max(t["seconds"], 1e-9)


def _outcomes(per_op: dict[str, dict]) -> dict[str, int]:
    counts = {"pass": 0, "fail": 0, "skip": 0, "hang": 0}
    for r in per_op.values():
        counts[r["outcome"]] += 1
    return counts


def report(keys: list[str], totals: dict[str, dict]) -> None:
    print(f"op_db tests, {len(keys)} OpInfos, {os.cpu_count()} CPUs; torch {_torch_version()}")
    print(f"{'harness':<26}{'OpInfos run':>12}{'passed':>8}{'cases':>8}{'seconds':>9}"
          f"{'cases/s':>9}")
    for name, t in totals.items():
        n = _outcomes(t["per_op"])
        run = n["pass"] + n["fail"] + n["hang"]
        print(f"{name:<26}{run:>12}{n['pass']:>8}{t['cases']:>8}{t['seconds']:>9.1f}"
              f"{_rate(t):>9.1f}")
    fastest = min(TORCH_MODES.values(), key=lambda name: totals[name]["seconds"])
    o, f = totals[OURS], totals[fastest]
    print(f"ours / faster torch harness ({fastest}): {o['seconds'] / f['seconds']:.2f}x the "
          f"time, {_rate(o) / max(_rate(f), 1e-9):.2f}x the cases/s, "
          f"{o['cases'] / max(f['cases'], 1):.2f}x the cases")
    for name, t in totals.items():
        hung = sorted(k for k, r in t["per_op"].items() if r["outcome"] == "hang")
        if hung:
            print(f"  hung for {name} (stopped by its timeout, time left out): "
                  f"{', '.join(hung)}")
    for name, t in totals.items():
        top = sorted(t["per_op"].items(), key=lambda kv: -kv[1]["seconds"])[:3]
        share = ", ".join(f"{k} {r['seconds'] / max(t['seconds'], 1e-9):.0%}" for k, r in top)
        print(f"  heaviest for {name}: {share}")
    for line in NOTES:
        print(textwrap.fill(line, 100, subsequent_indent="  "))


def _torch_version() -> str:
    import torch

    return torch.__version__


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", default="12",
                    help="how many OpInfos, taken evenly from op_db, or 'all' (default 12)")
    ap.add_argument("--chunk", type=int, default=25,
                    help="OpInfos per turn of each harness (default 25)")
    ap.add_argument("--hang-after", type=int, default=120, metavar="S",
                    help="seconds a threaded torch test's rank thread may take to join before "
                         "the test counts as hung (torch's default 300; default 120)")
    ap.add_argument("--json", metavar="PATH",
                    help="also write every OpInfo's outcome, cases and seconds per harness")
    ap.add_argument("--write-readme", action="store_true",
                    help="also rewrite this benchmark's block of README.md")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.path.insert(0, ROOT)
    keys = _keys(None if args.ops == "all" else int(args.ops))
    totals = compare(keys, max(1, min(args.chunk, -(-len(keys) // 3))),
                     hang_after=args.hang_after)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"keys": keys, "harnesses": totals}, f, indent=1)
    with readme_figures.tee() as out:
        report(keys, totals)
    if args.write_readme:  # a text table: fenced, so that markdown keeps its columns
        readme_figures.write_readme("bench-opdb", f"```text\n{out.getvalue().strip()}\n```",
                                    f".venv/bin/python benchmarks/bench_opdb.py --ops {args.ops} "
                                    "--write-readme")


if __name__ == "__main__":
    main()
