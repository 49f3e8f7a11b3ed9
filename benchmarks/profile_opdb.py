"""Where an op-database sweep's time goes: soundness cases (no threads) against end-to-end
cases (simpg worlds), per case, on the same OpInfos as ``bench_opdb.py --ops N``.

    .venv/bin/python benchmarks/profile_opdb.py [--ops 60]

For the split inside the end-to-end cases (dispatch, propagation, planning, backward,
collectives), sample the rank threads with py-spy, e.g.
``py-spy record -r 200 -f raw -o sweep.raw -- .venv/bin/python benchmarks/profile_opdb.py``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def profile(keys: list[str]) -> dict:
    """Sweep ``keys`` (warm) and time each phase: seconds and cases per phase, and the total."""
    import torch

    from opdb_tests import sweep
    from opdb_tests.cases import entry, samples

    torch.set_num_threads(1)
    for k in keys:  # sample generation is not a case's cost
        samples(entry(k), 1)
    sweep.sweep_entry(entry("add"))  # lazy imports
    seconds = {"soundness": 0.0, "end to end": 0.0}
    cases = {"soundness": 0, "end to end": 0}
    soundness, run_world = sweep.soundness, sweep.run_world

    def timed_soundness(*a, **kw):
        t0 = time.perf_counter()
        found = soundness(*a, **kw)
        seconds["soundness"] += time.perf_counter() - t0
        cases["soundness"] += found[2]
        return found

    def timed_world(mesh_shape, world_cases, *a, **kw):
        t0 = time.perf_counter()
        found = run_world(mesh_shape, world_cases, *a, **kw)
        seconds["end to end"] += time.perf_counter() - t0
        cases["end to end"] += len(world_cases)
        return found

    sweep.soundness, sweep.run_world = timed_soundness, timed_world
    try:
        t0 = time.perf_counter()
        results = [sweep.sweep_entry(entry(k)) for k in keys]
        total = time.perf_counter() - t0
    finally:
        sweep.soundness, sweep.run_world = soundness, run_world
    return {"seconds": seconds, "cases": cases, "total": total,
            "swept": sum(r.cases for r in results)}


def report(keys: list[str], found: dict) -> None:
    seconds, cases, total = found["seconds"], found["cases"], found["total"]
    print(f"op_db sweep profile, {len(keys)} OpInfos, {found['swept']} cases in {total:.2f} s")
    print(f"{'phase':<12}{'cases':>8}{'seconds':>9}{'share':>8}{'ms/case':>9}")
    for phase in seconds:
        print(f"{phase:<12}{cases[phase]:>8}{seconds[phase]:>9.2f}"
              f"{seconds[phase] / total:>8.0%}{1e3 * seconds[phase] / max(cases[phase], 1):>9.2f}")
    other = total - sum(seconds.values())
    print(f"{'other':<12}{'':>8}{other:>9.2f}{other / total:>8.0%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", type=int, default=60)
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.path.insert(0, ROOT)
    warnings.simplefilter("ignore")
    from benchmarks.bench_opdb import _keys

    keys = _keys(args.ops)
    report(keys, profile(keys))


if __name__ == "__main__":
    main()
