"""torch's own op-database test pattern, run on chosen OpInfos and timed: the other side of
``bench_opdb.py``. Run as a subprocess by it; imports torch only (never simpg, never dtensor).

The pattern is that of torch's ``test/distributed/tensor/test_dtensor_ops.py`` (torch 2.13:
``TestMultiThreadedDTensorOps`` and ``TestLocalDTensorOps``; the file is not installed with
torch, so the test body is restated here, on the installed harness classes):

- the op_db size constants are shrunk to sizes that 4 divides (``L, M, S, XS = 24, 12, 4, 2``);
- one test per OpInfo at float32 (``@ops(..., allowed_dtypes=(torch.float,))``, instantiated
  for CPU by ``instantiate_device_type_tests``), OpInfos without float32 get no test;
- every sample (``requires_grad=True``), every product of Replicate / even Shard placements of
  its tensor arguments that ``DTensorConverter`` yields, on a 1-D mesh of 4 ranks: the op on
  DTensors, ``full_tensor()`` of each output compared with the plain result
  (``assertEqual``): forward only (the file's backward step meets gathered plain tensors and
  never runs); a result with an empty tensor is not compared;
- the first case that fails ends its OpInfo's test (torch lists such OpInfos as xfail).

A threaded test whose rank threads are still waiting (in a collective the others never
join) when ``DISTRIBUTED_TESTS_DEFAULT_TIMEOUT`` runs out, per thread joined, is a hang:
its outcome says so and its time is left out of the total (it measures the timeout).

``threaded``: ``DTensorOpTestBase``, a ``MultiThreadedTestCase``: per test, 4 threads on
torch's multithreaded process group (``multi_threaded_pg``), each building its own samples.
``local``: a plain ``TestCase`` on a ``fake`` process group under ``LocalTensorMode`` (every
rank in one thread, a LocalTensor holding every rank's piece).

    .venv/bin/python benchmarks/torch_opdb_harness.py threaded '["add", "sum"]'

prints one JSON line: wall seconds of the tests (after an untimed warm-up on ``add``), cases,
each OpInfo's outcome, samples and cases. With ``--serve`` instead of the keys it answers
each line of stdin (a JSON list of keys) so, which is how ``bench_opdb.py`` interleaves it
with the other harnesses.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import sys
import time
import unittest
import warnings
from typing import Any

WORLD = 4  # test_dtensor_ops.py's OP_DB_WORLD_SIZE
MODES = ("threaded", "local")

# what each OpInfo's test did: key -> {"cases": n, "samples": n, "seconds": s}; in the
# threaded mode every rank runs the body, rank 0 counts (the outcome is the test's, from
# unittest)
RECORD: dict[str, dict[str, Any]] = {}


def _key(op: Any) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def _body(base: type) -> type:
    """The shared test body of test_dtensor_ops.py's TestDTensorOps, on ``base``."""
    import torch
    from torch.distributed._local_tensor import reconcile_args
    from torch.distributed.tensor import DTensor, init_device_mesh
    from torch.overrides import resolve_name
    from torch.testing._internal.distributed._tensor.common_dtensor import DTensorConverter
    from torch.utils import _pytree as pytree

    class Body(base):  # type: ignore[misc, valid-type]
        def records(self) -> bool:
            return getattr(self, "rank", 0) == 0  # threaded: rank 0 of 4; local: the one

        def run_opinfo(self, dtype: Any, op: Any) -> None:
            rec = {"cases": 0, "samples": 0}
            if self.records():
                RECORD[_key(op)] = rec
            self.mesh = init_device_mesh("cpu", (WORLD,))
            for s in op.sample_inputs("cpu", dtype, requires_grad=True):
                rec["samples"] += 1
                self.crossref(op.op, [s.input, *s.args], s.kwargs, rec)

        def crossref(self, func: Any, args: list, kwargs: dict, rec: dict) -> None:
            name = resolve_name(func)

            def cat_split(res: Any) -> Any:  # split-like results: one tensor for backward
                if name is not None and "split" in name:
                    return torch.cat(res, dim=args[2] if len(args) == 3 else 0)
                return res

            ref_args, ref_kwargs = reconcile_args(args, kwargs)
            expected = cat_split(func(*ref_args, **ref_kwargs))
            converter = DTensorConverter(self.mesh, args, kwargs)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for dargs, dkwargs in converter:
                    if not converter.successful():
                        raise RuntimeError(f"{name}: an argument could not become a DTensor")
                    rec["cases"] += 1
                    out = func(*dargs, **dkwargs)
                    if any(isinstance(t, torch.Tensor) and t.numel() == 0
                           for t in pytree.tree_leaves(out)):
                        continue
                    out = cat_split(pytree.tree_map(
                        lambda t: t.full_tensor() if isinstance(t, DTensor) else t, out))
                    # torch's file would now run a backward of ``to_local().sum()`` of a
                    # DTensor result, but ``out`` holds the gathered plain tensors by then: it
                    # never runs (on a tuple its AttributeError is printed and passed over)
                    self.compare(out, expected)

        def compare(self, out: Any, expected: Any) -> None:
            got, want = pytree.tree_leaves(out), pytree.tree_leaves(expected)
            self.assertEqual(len(got), len(want))
            for g, w in zip(got, want):
                if isinstance(w, torch.Tensor):
                    self.assertIsInstance(g, torch.Tensor)
                    self.assertEqualOnRank(g.shape, w.shape)
                    self.assertEqualOnRank(g.requires_grad, w.requires_grad)
                    self.assertEqualOnRank(g, w)

    return Body


def _repurposed(ops: list, cls_name: str) -> list:
    """Copies of ``ops`` whose decorators for TestDTensorOps apply to ``cls_name`` (op_db marks
    a few OpInfos expectedFailure there; a decorator applies by exact class name)."""
    out = []
    for op in ops:
        op = copy.deepcopy(op)
        for d in op.decorators:
            if getattr(d, "cls_name", None) == "TestDTensorOps":
                d.cls_name = cls_name
        out.append(op)
    return out


def build_test_class(mode: str, ops: list) -> type:
    """The instantiated CPU test class of ``mode`` with one test per OpInfo of ``ops``."""
    import torch.distributed as dist
    from torch.distributed._local_tensor import LocalTensorMode
    from torch.testing._internal.common_utils import TestCase
    from torch.testing._internal.distributed._tensor.common_dtensor import DTensorOpTestBase

    if mode == "threaded":
        name = "TestMultiThreadedDTensorOps"

        class Mode(_body(DTensorOpTestBase)):  # type: ignore[misc]
            @property
            def world_size(self) -> int:
                return WORLD

            def run_mode(self, dtype: Any, op: Any) -> None:
                self.run_opinfo(dtype, op)
    else:
        name = "TestLocalDTensorOps"

        class Mode(_body(TestCase)):  # type: ignore[no-redef, misc]
            world_size = WORLD

            def setUp(self) -> None:
                super().setUp()
                dist.init_process_group("fake", rank=0, world_size=WORLD)

            def tearDown(self) -> None:
                super().tearDown()
                from torch.distributed.tensor.debug import _clear_sharding_prop_cache

                _clear_sharding_prop_cache()
                if dist.is_initialized():
                    dist.destroy_process_group()

            def assertEqualOnRank(self, x: Any, y: Any, msg: Any = None, *, rank: int = 0
                                  ) -> None:
                self.assertEqual(x, y, msg)

            def run_mode(self, dtype: Any, op: Any) -> None:
                with LocalTensorMode(frozenset(range(WORLD))):
                    self.run_opinfo(dtype, op)

    return instantiate(Mode, ops, name)


def instantiate(mode: type, ops: list, name: str) -> type:
    """The CPU class torch's device-type instantiation makes of ``mode`` (a base with a
    ``run_mode(dtype, op)``), with one float32 test per OpInfo of ``ops``, as torch's file."""
    import torch
    from torch.testing._internal.common_device_type import (instantiate_device_type_tests,
                                                            ops as op_tests)
    from torch.testing._internal.common_utils import suppress_warnings

    chosen = _repurposed(ops, name)

    class Tests(mode):  # type: ignore[misc, valid-type]
        @suppress_warnings
        @op_tests(chosen, allowed_dtypes=(torch.float,))
        def test_dtensor_op_db(self, dtype: Any, op: Any) -> None:
            self.run_mode(dtype, op)

    Tests.__name__ = Tests.__qualname__ = name
    scope: dict[str, Any] = {name: Tests}  # instantiation replaces it with its CPU class
    instantiate_device_type_tests(Tests, scope, only_for=("cpu",))
    return scope[f"{name}CPU"]


class _Timed(unittest.TestResult):
    """A quiet result that also keeps each test's wall seconds (setUp to tearDown)."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds: dict[str, float] = {}
        self._t0 = 0.0

    def startTest(self, test: unittest.TestCase) -> None:
        super().startTest(test)
        self._t0 = time.perf_counter()

    def stopTest(self, test: unittest.TestCase) -> None:
        self.seconds[test._testMethodName] = time.perf_counter() - self._t0
        super().stopTest(test)


def run_tests(mode: str, ops: list) -> tuple[float, dict[str, str]]:
    """Run ``mode``'s tests of ``ops``, quietly: the wall seconds they took and each OpInfo's
    outcome (pass, fail, or skip where op_db skips it here; no test without float32)."""
    suite = unittest.TestLoader().loadTestsFromTestCase(build_test_class(mode, ops))
    by_test = {f"test_dtensor_op_db_{op.formatted_name}_cpu_float32": _key(op) for op in ops}
    outcomes = {by_test[t._testMethodName]: "pass" for t in suite}  # (a suite drops its run tests)
    result = _Timed()
    t0 = time.perf_counter()
    suite.run(result)
    seconds = time.perf_counter() - t0
    for name, secs in result.seconds.items():
        RECORD.setdefault(by_test[name], {"cases": 0, "samples": 0})["seconds"] = secs
    for kind, found in (("fail", result.failures + result.errors + result.expectedFailures),
                        ("skip", result.skipped)):
        for t, why in found:
            # a rank thread still waiting at the timeout: MultiThreadedTestCase's words
            hung = isinstance(why, str) and "terminated or timed out" in why
            outcomes[by_test[t._testMethodName]] = "hang" if hung else kind
    return seconds, outcomes


def prepare() -> dict[str, Any]:
    """Import torch's op database with test_dtensor_ops.py's sizes; OpInfos by key."""
    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)  # a failing thread logs its traceback: the outcome is kept
    import torch
    import torch.testing._internal.common_methods_invocations as common_ops

    torch.set_num_threads(1)
    # test_dtensor_ops.py: sizes that 4 divides, so that Shard is even on 4 ranks
    common_ops.L, common_ops.M, common_ops.S, common_ops.XS = 24, 12, 4, 2
    by_key: dict[str, Any] = {}
    for op in common_ops.op_db:
        by_key.setdefault(_key(op), op)
    return by_key


def measure(mode: str, by_key: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    """Run the tests of ``keys``: seconds, cases, what each OpInfo's test did, and which of
    simpg or dtensor this process has imported (none, ever)."""
    RECORD.clear()
    seconds, outcomes = run_tests(mode, [by_key[k] for k in keys])
    per_op = {k: {"outcome": o, "cases": 0, "samples": 0, "seconds": 0.0, **RECORD.get(k, {})}
              for k, o in outcomes.items()}
    # a hung test's time is the timeout's, not work: left out, reported by its outcome
    seconds -= sum(r["seconds"] for r in per_op.values() if r["outcome"] == "hang")
    return {"mode": mode, "seconds": seconds, "cases": sum(r["cases"] for r in per_op.values()),
            "per_op": per_op, "imported": sorted(m for m in ("simpg", "dtensor")
                                                 if m in sys.modules)}


def main(argv: list[str]) -> None:
    """``MODE KEYS_JSON``: measure once; ``MODE --serve``: warm up, then answer each line of
    stdin (a JSON list of keys) with one JSON line."""
    mode = argv[1]
    if mode not in MODES:
        raise SystemExit(f"mode must be one of {MODES}, not {mode!r}")
    by_key = prepare()
    run_tests(mode, [by_key["add"]])  # untimed: lazy imports, first dispatch, first mesh
    if argv[2:] != ["--serve"]:
        print(json.dumps(measure(mode, by_key, json.loads(argv[2]))))
        return
    print(json.dumps({"ready": mode}), flush=True)
    for line in sys.stdin:
        print(json.dumps(measure(mode, by_key, json.loads(line))), flush=True)
    os._exit(0)  # the rank threads of a hung test still wait: do not join them at exit


if __name__ == "__main__":
    main(sys.argv)
