"""A slice of torch's op-database DTensor test, ported by changing one import.

torch's ``test/distributed/tensor/test_dtensor_ops.py`` runs every OpInfo of ``op_db`` through
``DTensorConverter`` (every sharding of every tensor argument) on torch's DTensor and compares
the gathered result with the plain one. This file is written the same way, for a handful of
ops, with ``DTensorOpTestBase`` imported from ``simpg.testing`` instead of
``torch.testing._internal.distributed._tensor.common_dtensor``: the device-type classes run on
4 simulated ranks (Note [device-type tests on simulated ranks] in simpg/torch_testcase.py).
Unlike torch's file it keeps op_db's own sample sizes (uneven shards) and compares on every
rank (each simulated rank has its own RNG, so all ranks draw the same samples). The functions
at the end check the verdicts torch's multithreaded base gives: ``precisionOverride`` per
rank, expected failures, skips.
"""

from __future__ import annotations

import copy
import unittest
import warnings
from typing import Any

import torch
from torch.distributed.tensor import DTensor
from torch.overrides import resolve_name
from torch.testing._internal.common_device_type import (
    dtypes,
    instantiate_device_type_tests,
    ops,
    precisionOverride,
)
from torch.testing._internal.common_methods_invocations import DecorateInfo, op_db
from torch.testing._internal.common_utils import run_tests, suppress_warnings
from torch.testing._internal.distributed._tensor.common_dtensor import DTensorConverter
from torch.utils import _pytree as pytree

from simpg.testing import DTensorOpTestBase
from tests.support.simpg_helpers import run_test_methods

# a few op families: binary pointwise with broadcasting, unary, a reduction, a view, a split
SLICE = ("add", "mul", "nn.functional.relu", "sum", "t", "split")
SLICE_OPS = [op for op in op_db if op.name in SLICE and op.variant_test_name == ""]


def concat_if_split(func: Any, args: list, result: Any) -> Any:
    name = resolve_name(func)
    if name is not None and "split" in name:  # as torch's test: one tensor to compare
        return torch.cat(result, dim=args[2] if len(args) == 3 else 0)
    return result


class TestDTensorOpsSlice(DTensorOpTestBase):
    """torch's TestDTensorOps, trimmed: run_opinfo_test -> run_dtensor_crossref -> compare."""

    def run_opinfo_test(self, dtype: torch.dtype, op: Any) -> None:
        self.mesh = self.build_device_mesh()  # torch's mesh: this module imports torch's names
        self.cases = 0
        for sample in op.sample_inputs("cpu", dtype, requires_grad=False):
            args = [sample.input, *sample.args]
            self.run_dtensor_crossref(op.op, args, sample.kwargs)
        self.assertGreater(self.cases, 0, f"{op.name}: no sharding of its samples was run")

    def run_dtensor_crossref(self, func: Any, args: list, kwargs: dict) -> None:
        to_dtensor = DTensorConverter(self.mesh, args, kwargs)
        expected = concat_if_split(func, args, func(*args, **kwargs))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for dtensor_args, dtensor_kwargs in to_dtensor:
                if not to_dtensor.successful():
                    continue
                actual = func(*dtensor_args, **dtensor_kwargs)
                actual = pytree.tree_map(
                    lambda e: e.full_tensor() if isinstance(e, DTensor) else e, actual)
                self.assertEqual(concat_if_split(func, args, actual), expected,
                                 msg=f"{resolve_name(func)}(*{dtensor_args}, **{dtensor_kwargs})")
                self.cases += 1

    @suppress_warnings
    @ops(SLICE_OPS, allowed_dtypes=(torch.float,))
    def test_dtensor_op_db(self, dtype: torch.dtype, op: Any) -> None:
        self.run_opinfo_test(dtype, op)

    @dtypes(torch.float)
    @precisionOverride({torch.float: 0.5})
    def test_precision_override(self, device: str, dtype: torch.dtype) -> None:
        self.assertEqual((self.precision, device), (0.5, "cpu"))
        # passes only with atol 0.5, on every rank
        self.assertEqual(torch.full((2,), 1.0 + self.rank), torch.full((2,), 1.4 + self.rank))


instantiate_device_type_tests(TestDTensorOpsSlice, globals(), only_for=("cpu",))


# -- the verdicts torch's multithreaded base gives ----------------------------------------------

def _device_type_class(generic: type) -> type:
    """``generic`` instantiated for cpu, as torch's file does at module level."""
    scope: dict[str, Any] = {generic.__name__: generic}
    instantiate_device_type_tests(generic, scope, only_for=("cpu",))
    (cls,) = scope.values()
    return cls


def test_the_slice_covers_its_ops():
    assert sorted(op.name for op in SLICE_OPS) == sorted(SLICE)
    names = sorted(n for n in dir(TestDTensorOpsSliceCPU)  # noqa: F821 - made by torch
                   if n.startswith("test_dtensor_op_db_"))
    assert len(names) == len(SLICE)


def test_without_the_override_the_same_comparison_fails_on_every_rank():
    class NoOverride(DTensorOpTestBase):
        world_size = 2

        @dtypes(torch.float)
        def test_close(self, device: str, dtype: torch.dtype) -> None:
            self.assertEqual(self.precision, 0.0)
            self.assertEqual(torch.full((2,), 1.0), torch.full((2,), 1.4))

    result = run_test_methods(_device_type_class(NoOverride), "test_close_cpu_float32")
    assert len(result.failures) == 1, result.errors
    assert "Mismatched elements: 2 / 2" in result.failures[0][1]
    assert "raised on rank 0 of 2" in result.failures[0][1]


def test_an_override_applies_on_each_rank_and_is_restored_after():
    seen: list[tuple[int, float]] = []

    class Override(DTensorOpTestBase):
        world_size = 3

        @dtypes(torch.float, torch.double)
        @precisionOverride({torch.float: 0.25})
        def test_seen(self, device: str, dtype: torch.dtype) -> None:
            seen.append((self.rank, self.precision))

    cls = _device_type_class(Override)
    result = run_test_methods(cls, "test_seen_cpu_float32", "test_seen_cpu_float64")
    assert result.wasSuccessful(), result.errors + result.failures
    assert sorted(seen) == [(0, 0.0), (0, 0.25), (1, 0.0), (1, 0.25), (2, 0.0), (2, 0.25)]
    assert cls("test_seen_cpu_float32").precision == 0.0  # the calling thread's: untouched


def test_expected_failures_and_skips_from_op_decorators():
    # torch's skipOps adds DecorateInfo(unittest.expectedFailure / unittest.skip) to op_db's
    # OpInfos; on copies here, so that op_db stays as it is
    def marked(name: str, mark: Any) -> Any:
        (op,) = (copy.deepcopy(op) for op in SLICE_OPS if op.name == name)
        op.decorators = (*op.decorators, DecorateInfo(mark, "Marked", "test_op"))
        return op

    class Marked(DTensorOpTestBase):
        world_size = 2

        @ops([marked("add", unittest.expectedFailure), marked("mul", unittest.expectedFailure),
              marked("t", unittest.skip("Skipped!"))], allowed_dtypes=(torch.float,))
        def test_op(self, dtype: torch.dtype, op: Any) -> None:
            if op.name == "add":
                self.assertEqual(self.rank, 0)  # fails on rank 1: an expected failure
            # mul passes: an unexpected success

    result = run_test_methods(_device_type_class(Marked), "test_op_add_cpu_float32",
                              "test_op_mul_cpu_float32", "test_op_t_cpu_float32")
    assert (len(result.expectedFailures), len(result.unexpectedSuccesses),
            len(result.skipped)) == (1, 1, 1)
    assert not result.failures and not result.errors


if __name__ == "__main__":
    run_tests()
