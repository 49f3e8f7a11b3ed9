"""torch's own op-database DTensor test, ported to simpg by the one-import switch, against
torch's multithreaded test base: the same OpInfos, both bases, one run.

The test body is that of torch's ``test_dtensor_ops.py`` (restated in
``torch_opdb_harness.py``: every float32 sample, every sharding ``DTensorConverter`` yields
on a 1-D 4-rank mesh, ``full_tensor()`` compared with the plain result). It runs on
``simpg.testing.DTensorOpTestBase`` twice, a world per test method (what a ported file gets)
and with ``class_world = True`` (one world for the class's methods, opt-in: Note [a world
kept between test methods] in simpg/class_world.py), then on torch's ``DTensorOpTestBase`` (a
``MultiThreadedTestCase``): simpg first, since torch's threaded group leaves c10d state
behind that a later world in the same process can trip on. Prints one JSON line: the OpInfo
count, each run's seconds and verdict counts, the ratios, and the OpInfos whose verdicts
differ (torch's rank threads share one CPU RNG, so its verdict on a random op or random
samples changes from run to run; simpg gives each rank its own RNG, as processes have).

    .venv/bin/python benchmarks/bench_porting.py [N | all]    # N OpInfos spread over op_db
"""

from __future__ import annotations

import json
import sys
import time
import unittest
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))


def _simpg_class(harness: Any, ops: list, class_world: bool = False) -> type:
    import simpg.testing

    class Mode(harness._body(simpg.testing.DTensorOpTestBase)):  # type: ignore[misc]
        world_size = harness.WORLD

        def run_mode(self, dtype: Any, op: Any) -> None:
            self.run_opinfo(dtype, op)

    Mode.class_world = class_world  # Note [a world kept between test methods]
    return harness.instantiate(Mode, ops, "TestSimpgDTensorOps" + ("Kept" if class_world
                                                                   else ""))


def _verdicts(harness: Any, cls: type, ops: list) -> tuple[float, dict[str, str]]:
    suite = unittest.TestLoader().loadTestsFromTestCase(cls)
    by_test = {f"test_dtensor_op_db_{op.formatted_name}_cpu_float32": harness._key(op)
               for op in ops}
    verdicts = {by_test[t._testMethodName]: "pass" for t in suite}
    result = unittest.TestResult()
    start = time.perf_counter()
    suite.run(result)
    seconds = time.perf_counter() - start
    for kind, found in (("fail", result.failures + result.errors + result.expectedFailures),
                        ("skip", result.skipped)):
        for test, _ in found:
            verdicts[by_test[test._testMethodName]] = kind
    return seconds, verdicts


def main(count: int | None) -> dict[str, Any]:
    """Both bases on ``count`` OpInfos spread over op_db (those with float32; None: all)."""
    import torch
    import torch_opdb_harness as harness

    by_key = harness.prepare()  # test_dtensor_ops.py's sizes, in this process only
    keys = [k for k, op in by_key.items() if torch.float32 in op.supported_dtypes("cpu")]
    if count is not None:
        keys = keys[::max(1, len(keys) // count)][:count]
    ops = [by_key[k] for k in keys]
    simpg_s, ours = _verdicts(harness, _simpg_class(harness, ops), ops)
    kept_s, kept = _verdicts(harness, _simpg_class(harness, ops, class_world=True), ops)
    torch_s, theirs = _verdicts(harness, harness.build_test_class("threaded", ops), ops)
    return {"ops": len(keys), "simpg_s": round(simpg_s, 1), "torch_s": round(torch_s, 1),
            "simpg_over_torch": round(simpg_s / torch_s, 3),
            # opt-in: the port's methods share one world (class_world = True)
            "simpg_class_world_s": round(kept_s, 1),
            "simpg_class_world_over_torch": round(kept_s / torch_s, 3),
            "class_world_differ": {k: [ours.get(k), kept.get(k)] for k in keys
                                   if ours.get(k) != kept.get(k)},
            "simpg": dict(Counter(ours.values())), "torch": dict(Counter(theirs.values())),
            "differ": {k: [theirs.get(k), ours.get(k)] for k in keys
                       if theirs.get(k) != ours.get(k)}}


if __name__ == "__main__":
    arg = sys.argv[1] if len(sys.argv) > 1 else "40"
    print(json.dumps(main(None if arg == "all" else int(arg))))
