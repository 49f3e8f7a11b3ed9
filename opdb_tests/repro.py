"""Rerun one op-database case: ``python -m opdb_tests.repro TIER KEY --sample I --mesh 2,2
[--placements 'S(0),R;P(sum),R']``. Every failure report prints this line.

TIER is sound (every strategy of the rule on that mesh; no placements needed), forward or
backward (one case in one simpg world; without --placements, every base assignment), or
samples (generate the OpInfo's samples; prints the traceback if the generator raises).
Exit status 1 when the case fails.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m opdb_tests.repro", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tier", choices=("sound", "forward", "backward", "samples"))
    ap.add_argument("key", help="OpInfo variant, e.g. add or nn.functional.pad.constant")
    ap.add_argument("--sample", type=int, default=0, help="the sample's index in the OpInfo")
    ap.add_argument("--mesh", default="2", help="mesh shape, e.g. 4 or 2,2")
    ap.add_argument("--placements", default=None,
                    help="per tensor argument, one placement per mesh dim: 'S(0),R;P(sum),R'")
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from opdb_tests import cases
    from opdb_tests.checks import soundness
    from opdb_tests.sweep import run_world

    e = cases.entry(args.key)
    if args.tier == "samples":
        try:
            n = len(cases.samples(e))
        except cases.SampleGenerationError as ex:
            print(ex.traceback)
            print("FAIL")
            return 1
        print(f"{e.key}: {n} usable samples" + ("" if n else f" ({cases.no_case_reason(e)})"))
        print("ok")
        return 0
    s = cases.sample(e, args.sample)
    mesh = tuple(int(x) for x in args.mesh.split(","))
    call = cases.aten_call(e, s)
    print(f"{e.key} ({e.dtype}) sample #{s.index}: {s.describe()}")
    print(f"aten: {', '.join(str(f) for f in cases.record_aten(e, s)) or '(none)'}"
          f"{'' if call is not None else '  (composite: end to end only)'}")
    if args.tier == "sound":
        if call is None:
            print("not a single aten call: the soundness tier does not apply")
            return 1
        failures = soundness(e, s, call, mesh)[0]
    else:
        assignments = ([cases.parse_placements(args.placements)] if args.placements is not None
                       else cases.base_assignments(s.tensors(), mesh))
        failures = [f for f in run_world(mesh, [(e, s, call, a, args.tier) for a in assignments])
                    if f is not None]
    for f in failures:
        print(f.report())
    print("FAIL" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
