"""Where an op-database sweep's time goes: soundness cases (no threads) against end-to-end
cases (simpg worlds), per case, on the same OpInfos as ``bench_opdb.py --ops N``.

    .venv/bin/python benchmarks/profile_opdb.py [--ops 60]

Inside the end-to-end cases (dispatch, propagation, planning, backward, collectives), sample
the rank threads with py-spy and let this script add up the stacks:

    py-spy record -r 200 -f raw -o sweep.raw -- .venv/bin/python benchmarks/profile_opdb.py
    .venv/bin/python benchmarks/profile_opdb.py --stacks sweep.raw
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
import warnings
from typing import Any, Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IDLE = "Waker.wait"  # a rank asleep until its turn: not work
ONE_PASS = "none: one pass over the OpInfos (a profile, not a best of rounds)"  # spread line


def profile(keys: list[str]) -> dict:
    """Sweep ``keys`` (warm) and time each phase: seconds and cases per phase, and the total."""
    from benchmarks.bench_opdb import warm
    from opdb_tests import sweep
    from opdb_tests.cases import entry

    warm(keys)
    seconds = {"soundness": 0.0, "end to end": 0.0}
    cases = {"soundness": 0, "end to end": 0}

    def timed(fn: Callable, phase: str, count: Callable[[tuple, Any], int]) -> Callable:
        def call(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            found = fn(*a, **kw)
            seconds[phase] += time.perf_counter() - t0
            cases[phase] += count(a, found)
            return found
        return call

    soundness, run_world = sweep.soundness, sweep.run_world
    sweep.soundness = timed(soundness, "soundness", lambda a, found: found[2])
    sweep.run_world = timed(run_world, "end to end", lambda a, found: len(a[1]))
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


def stack_shares(lines: list[str], within: str = "_world_body") -> tuple[int, collections.Counter]:
    """From py-spy's raw (collapsed) stacks: the busy samples inside ``within`` and, per
    function, the samples whose stack holds it (inclusive; a recursive one counted once)."""
    busy, inclusive = 0, collections.Counter()
    for line in lines:
        stack, n = line.rsplit(" ", 1)
        frames = [f.split(" (")[0] for f in stack.split(";")]
        if within not in frames or frames[-1] == IDLE:
            continue
        busy += int(n)
        for name in set(frames):
            inclusive[name] += int(n)
    return busy, inclusive


def report_stacks(path: str, top: int) -> None:
    with open(path) as f:
        busy, inclusive = stack_shares(f.read().splitlines())
    print(f"{busy} busy samples in the end-to-end worlds (stacks ending in {IDLE} left out)")
    for name, n in inclusive.most_common(top):
        print(f"{n / max(busy, 1):>6.1%}  {name}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", type=int, default=60)
    ap.add_argument("--stacks", metavar="RAW", help="add up a py-spy raw file instead")
    ap.add_argument("--top", type=int, default=40, help="functions shown with --stacks")
    args = ap.parse_args()
    if args.stacks:
        report_stacks(args.stacks, args.top)
        return
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.path.insert(0, ROOT)
    warnings.simplefilter("ignore")
    from benchmarks import conditions
    from benchmarks.bench_opdb import _keys

    machine = conditions.Conditions()
    keys = _keys(args.ops)
    report(keys, profile(keys))
    print(f"\n{machine.footer(ONE_PASS)}")


if __name__ == "__main__":
    main()
