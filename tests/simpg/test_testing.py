"""simpg.testing: test classes written for torch's DTensorTestBase, run on simulated ranks.

The classes below are written the way torch's own DTensor tests are (``@with_comms``,
``self.rank``, ``self.build_device_mesh()``, ``self.run_subtests``); pytest collects them as
unittest classes. The functions after them run small failing classes through unittest and
read the report.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import time
import unittest
import warnings
from types import ModuleType
from typing import Any

import pytest
import torch
import torch.distributed as dist

from simpg.testing import DTensorOpTestBase, DTensorTestBase, skip_if_lt_x_gpu, with_comms
from tests.support.simpg_helpers import FAST_S, integer_valued, run_test_methods


def _report(result: unittest.TestResult) -> str:
    return "\n".join(text for _, text in result.failures + result.errors)


# -- torch-style test classes, on ours and on torch's DTensor -----------------------------------

class DTensorAPITest(DTensorTestBase):
    """Written as for torch's base; ``api`` is the DTensor library under test."""

    @property
    def api(self) -> ModuleType:
        return importlib.import_module(self.dtensor_lib)

    def setUp(self) -> None:
        super().setUp()
        self.setup_rank = self.rank  # setUp runs once, outside the ranks

    @with_comms
    def test_redistribute_uneven_shards(self):
        api, mesh = self.api, self.build_device_mesh()
        # 10 rows over 4 ranks: 3, 3, 3, 1; 6 columns: 2, 2, 2, 0
        full = integer_valued(10, 6, seed=0)
        d = api.distribute_tensor(full, mesh, [api.Shard(0)])
        self.assertEqual(d.to_local(), full.chunk(4)[self.rank])
        r = d.redistribute(mesh, [api.Replicate()])
        self.assertEqual(r.placements, (api.Replicate(),))
        self.assertEqual(r.to_local(), full)
        s1 = r.redistribute(mesh, [api.Shard(1)])
        cols = list(torch.tensor_split(full, [2, 4, 6], dim=1))
        self.assertEqual(s1.to_local(), cols[self.rank])

    @with_comms
    def test_from_local_and_full_tensor(self):
        api, mesh = self.api, self.build_device_mesh()
        local = torch.full((2, 3), float(self.rank))
        d = api.DTensor.from_local(local, mesh, [api.Shard(0)])
        self.assertEqual(d.shape, torch.Size([8, 3]))
        self.assertEqual(d.full_tensor(), torch.arange(4.0).repeat_interleave(2)[:, None]
                         .expand(8, 3))
        p = api.DTensor.from_local(local, mesh, [api.Partial()])
        self.assertEqual(p.full_tensor(), torch.full((2, 3), 6.0))  # 0 + 1 + 2 + 3

    @with_comms
    def test_placements_round_trip(self):
        api, mesh = self.api, self.build_device_mesh()

        def check(src: Any, dst: Any, shape: tuple[int, int]) -> None:
            full = integer_valued(*shape, seed=sum(shape))
            d = api.distribute_tensor(full, mesh, [src]).redistribute(mesh, [dst])
            self.assertEqual(d.placements, (dst,))
            self.assertEqual(d.full_tensor(), full)

        places = [api.Shard(0), api.Shard(1), api.Replicate()]
        self.run_subtests({"src": places, "dst": places, "shape": [(5, 3), (8, 8)]}, check)

    @with_comms
    def test_two_dim_mesh_uneven(self):
        # the redistribute plan of a 2-d mesh depends on the rank's coordinate (torch caches it)
        api = self.api
        mesh = api.init_device_mesh(self.device_type, (2, 2))
        full = integer_valued(7, 5, seed=3)
        d = api.distribute_tensor(full, mesh, [api.Shard(0), api.Shard(0)])
        rows = full.chunk(2)[self.rank // 2].chunk(2)[self.rank % 2]
        self.assertEqual(d.to_local(), rows)
        self.assertEqual(d.redistribute(mesh, [api.Replicate(), api.Shard(1)]).full_tensor(),
                         full)

    def test_rank_is_the_calling_rank_and_the_instance_is_per_rank(self):
        self.assertEqual(self.setup_rank, self.MAIN_PROCESS_RANK)
        self.assertEqual((self.rank, self.world_size), (dist.get_rank(), dist.get_world_size()))
        self.mine = self.rank  # each rank has its own instance, as each process does in torch
        dist.barrier()  # the other ranks set theirs meanwhile
        self.assertEqual(self.mine, self.rank)


class TorchDTensorAPITest(DTensorAPITest):
    """The same class on torch's own DTensor."""

    dtensor_lib = "torch.distributed.tensor"


class SmallWorldOpTest(DTensorOpTestBase):
    world_size = 2

    def test_mesh_of_the_world(self):
        mesh = self.build_device_mesh()
        self.assertEqual(mesh.size(), 2)
        self.assertEqual(mesh.get_rank(), self.rank)

    @skip_if_lt_x_gpu(1000)
    def test_gpu_decorator_runs_on_cpu_ranks(self):
        self.assertEqual(self.device_type, "cpu")


# -- failures are reported with their rank and subtest ------------------------------------------

def test_a_failure_names_its_rank():
    class FailsOnRankTwo(DTensorTestBase):
        @with_comms
        def test_rank_two(self):
            t = torch.ones(3)
            dist.all_reduce(t)
            if self.rank == 2:
                self.assertEqual(t, torch.zeros(3))  # the others wait in the barrier

    result = run_test_methods(FailsOnRankTwo, "test_rank_two")
    assert len(result.failures) == 1 and not result.errors
    text = _report(result)
    assert "raised on rank 2 of 4" in text and "Mismatched elements: 3 / 3" in text


def test_every_failing_subtest_is_reported_with_its_rank_and_values():
    started: list[tuple[str, int, int]] = []

    class GridFails(DTensorTestBase):
        @with_comms
        def test_grid(self):
            from dtensor import Replicate, Shard, distribute_tensor

            mesh = self.build_device_mesh()

            def check(placement: Any, n: int) -> None:
                started.append((str(placement), n, self.rank))
                d = distribute_tensor(torch.arange(float(n)), mesh, [Replicate()])
                d = d.redistribute(mesh, [placement])
                if (str(placement), n, self.rank) in (("S(0)", 3, 1), ("R", 4, 3)):
                    self.assertEqual(d.full_tensor().sum(), -1.0, msg=f"on purpose {self.rank}")
                self.assertEqual(d.full_tensor(), torch.arange(float(n)))

            self.run_subtests({"placement": [Shard(0), Replicate()], "n": [3, 4]}, check)

    result = run_test_methods(GridFails, "test_grid")
    assert len(result.failures) == 1 and not result.errors
    text = _report(result)
    assert "test_grid: 2 failing subtest(s) of 4 on 4 simulated ranks" in text
    assert "[placement=Shard(dim=0), n=3] failed on rank 1 of 4" in text
    assert "[placement=Replicate(), n=4] failed on rank 3 of 4" in text
    assert "on purpose 1" in text and "on purpose 3" in text
    assert "n=4] failed on rank 1" not in text and "Shard(dim=0), n=4]" not in text
    assert len(started) == 4 * 4  # every combination started on every rank


@pytest.mark.parametrize("case", ["deadlock", "mismatch"])
def test_a_deadlock_or_mismatch_is_reported_not_hung(case):
    class Stuck(DTensorTestBase):
        world_size = 2

        def test_stuck(self):
            if case == "deadlock":
                if self.rank == 0:
                    dist.all_reduce(torch.ones(1))  # rank 1 never joins it
            else:
                dist.all_reduce(torch.ones(1 + self.rank))

    start = time.monotonic()
    result = run_test_methods(Stuck, "test_stuck")
    assert time.monotonic() - start < FAST_S
    assert len(result.errors) == 1 and not result.failures
    text = _report(result)
    expected = "DeadlockError" if case == "deadlock" else "CollectiveMismatchError"
    assert f"simpg.errors.{expected}" in text


def test_a_deadlocked_subtest_does_not_hide_a_failing_one():
    class DeadlockAndFailure(DTensorTestBase):
        world_size = 2

        @with_comms
        def test_cases(self):
            def check(case: str) -> None:
                if case == "deadlock" and self.rank == 1:
                    dist.all_reduce(torch.ones(1))  # rank 0 goes straight to the next case
                elif case == "fails":
                    t = torch.ones(1)
                    dist.all_reduce(t)
                    self.assertEqual(t.item(), 2.0 if self.rank == 0 else 3.0)

            self.run_subtests({"case": ["ok", "deadlock", "fails", "ok again"]}, check)

    start = time.monotonic()
    text = _report(run_test_methods(DeadlockAndFailure, "test_cases"))
    assert time.monotonic() - start < FAST_S
    assert "2 failing subtest(s)" in text
    assert "[case='deadlock'] failed on every rank of 2 (no rank to blame)" in text
    assert "[case='fails'] failed on rank 1 of 2" in text


def test_a_failure_in_subtest_names_the_rank_and_the_parameters():
    class SubTestFails(DTensorTestBase):
        world_size = 2

        def test_sub(self):
            for n in (1, 2):
                with self.subTest(n=n):
                    self.assertEqual(n * self.rank, 0)  # rank 1 fails at n=1

    text = _report(run_test_methods(SubTestFails, "test_sub"))
    assert "in subTest(n=1) on rank 1" in text and "raised on rank 1 of 2" in text


def test_unittest_marks_survive_the_rank_wrapper():
    class Marked(DTensorTestBase):
        world_size = 2

        @unittest.expectedFailure
        def test_expected(self):
            self.assertEqual(self.rank, 0)

        @unittest.skip("on purpose")
        def test_skipped(self):
            raise AssertionError("never runs")

    result = run_test_methods(Marked, "test_expected", "test_skipped")
    assert len(result.expectedFailures) == 1 and len(result.skipped) == 1
    assert result.wasSuccessful()


def test_gpu_decorator_skips_an_accelerator_test_without_enough_devices():
    class NeedsGpus(DTensorTestBase):
        world_size = 2
        device_type = "cuda"

        @skip_if_lt_x_gpu(1000)
        def test_gpus(self):
            raise AssertionError("must not run")

    result = run_test_methods(NeedsGpus, "test_gpus")
    found = torch.accelerator.device_count() if torch.accelerator.is_available() else 0
    assert [reason for _, reason in result.skipped] == [f"needs 1000 cuda devices, found {found}"]


def test_dtensors_compare_like_torch_compares_them():
    class Compare(DTensorTestBase):
        world_size = 2

        def test_compare(self):
            from dtensor import Replicate, Shard, distribute_tensor

            mesh = self.build_device_mesh()
            a = distribute_tensor(torch.arange(4.0), mesh, [Shard(0)])
            self.assertEqual(a, distribute_tensor(torch.arange(4.0), mesh, [Shard(0)]))
            with self.assertRaisesRegex(AssertionError, "placements do not match"):
                self.assertEqual(a, distribute_tensor(torch.arange(4.0), mesh, [Replicate()]))
            with self.assertRaisesRegex(TypeError, "ambiguous"):
                self.assertEqual(a, torch.arange(4.0))
            self.assertNotEqual(a.full_tensor(), torch.zeros(4))

    result = run_test_methods(Compare, "test_compare")
    assert result.wasSuccessful(), _report(result)


def test_warning_filters_changed_on_the_ranks_are_the_callers_again_after():
    class Quiet(DTensorTestBase):
        world_size = 2

        def test_quiet(self):
            # torch's @suppress_warnings: the ranks' blocks interleave at the barrier, so each
            # rank's exit restores the filters another rank saw on entry
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                dist.barrier()
                dist.barrier()  # rank 1 waits here while rank 0 leaves its block first

    import torch._dynamo  # noqa: F401 - torch's TestCase.run imports it; it adds filters

    before = list(warnings.filters)
    result = run_test_methods(Quiet, "test_quiet")
    assert result.wasSuccessful(), _report(result)
    assert warnings.filters == before


def test_torch_caches_are_fresh_for_each_rank():
    sizes: list[int] = []

    class Probe(TorchDTensorAPITest):
        def test_probe(self):
            from torch.distributed.tensor._redistribute import _gen_transform_infos

            self.test_two_dim_mesh_uneven()
            sizes.append(_gen_transform_infos.cache_info().currsize)

    result = run_test_methods(Probe, "test_probe")
    assert result.wasSuccessful(), _report(result)
    from torch.distributed.tensor._redistribute import _gen_transform_infos, _planner_cache

    assert max(sizes) > 0  # the plans were cached during the test...
    assert _gen_transform_infos.cache_info().currsize == 0 and not _planner_cache  # ...not after


def test_run_subtests_outside_the_ranks_is_an_error():
    class Outside(DTensorTestBase):
        def test_nothing(self):
            pass

    with pytest.raises(RuntimeError, match="inside a test method, on the simulated ranks"):
        Outside("test_nothing").run_subtests({"n": [1]}, lambda n: None)


def test_importing_it_loads_neither_dtensor_library_nor_torch_test_utils():
    # torch's common_utils changes process-wide state on import (Note [torch assertEqual]):
    # only a test class derived from the bases brings it in
    code = ("import sys, simpg.testing; "
            "print(sorted(m for m in sys.modules if m == 'dtensor' "
            "or m.startswith('torch.distributed.tensor') "
            "or m == 'torch.testing._internal.common_utils')); "
            "from torch.testing._internal.common_utils import TestCase; "
            "T = type('T', (simpg.testing.DTensorOpTestBase,), {}); "
            "print(issubclass(T, TestCase), issubclass(simpg.testing.DTensorTestBase, TestCase))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.split("\n")[:2] == ["[]", "True True"]
