"""Rerun one op-database case: ``python -m opdb_tests.repro TIER KEY --sample I --mesh 2,2
[--placements 'S(0),R;P(sum),R']``. Every failure report prints this line.

TIER is sound (every strategy of the rule on that mesh; with --placements, the strategies the
dispatcher may pick for inputs laid out so), forward or backward (one case in one simpg
world; without --placements, every base assignment), or samples (generate the OpInfo's
samples; prints the traceback if the generator raises). KEY is an OpInfo variant
(``cumsum``, ``nn.functional.pad.constant``) or anything ``opdb_tests.check`` resolves to
exactly one variant (``torch.cumsum``). --placements gives, per tensor argument of the
sample (``;`` between them), one placement per mesh dim (``,`` between them).

It prints each case it checked with its verdict (ok, FAIL, or XFAIL: a kind of failure
opdb_tests/expected_failures.py lists) and a count. Exit status 0 when every case holds,
1 when one fails, 2 for a usage error (unknown key, placements that do not fit the sample or
the mesh). ``python -m opdb_tests.check`` asks the same of every tier at once.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
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
    from opdb_tests.check import CheckArgumentError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # op_db samples warn (degrees of freedom...)
            return _run(args)
    except CheckArgumentError as ex:
        print(f"{ap.prog}: error: {ex}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    from opdb_tests import cases, check

    target = check.resolve(args.key)
    if len(target.entries) != 1:
        raise check.CheckArgumentError(
            "key", args.key, f"names {len(target.entries)} OpInfo variants, a case has one: "
            + ", ".join(e.key for e in target.entries[:12]))
    e = target.entries[0]
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
    s = check.samples_of(e, args.sample, None)[0]
    mesh = check.parse_mesh(args.mesh)
    pl = check.parse_placements(args.placements)
    if pl is not None:
        check.check_mesh_dims(pl, mesh)
        pl = check.fit_placements(pl, s.tensors(), mesh, f"{e.key} sample #{s.index}")
    call = cases.aten_call(e, s)
    print(f"{e.key} ({e.dtype}) sample #{s.index}: {s.describe()}")
    print(f"aten: {', '.join(str(f) for f in cases.record_aten(e, s)) or '(none)'}"
          f"{'' if call is not None else '  (composite: end to end only)'}")
    if args.tier == "sound":
        if call is None:
            raise check.CheckArgumentError("tier", "sound", "the sample is not a single aten "
                                           "call on its own tensors: the soundness tier does "
                                           "not apply (try forward or backward)")
        found = check.strategy_cases(e, s, call, mesh, pl)
    else:
        found = check.end_to_end_cases(e, s, call, mesh, pl, [args.tier])
    for c in found:
        print(check.format_case(c))
    print(check.summary_line(found))
    return 1 if any(c.verdict != check.OK for c in found) else 0


if __name__ == "__main__":
    sys.exit(main())
