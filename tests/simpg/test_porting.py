"""Porting a torch DTensor test file onto simpg by changing one import.

This module is written like torch's own DTensor tests: it imports torch's DTensor names (and
not ours), so ``build_device_mesh()`` must hand it torch's mesh without any switch (Note
[choosing the DTensor library]); a file like it runs under torch's ``run_tests()``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types
import unittest
from pathlib import Path

import torch
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

from simpg.dtensor_lib import OURS, TORCHS, choose_library
from simpg.testing import DTensorTestBase, with_comms

ROOT = Path(__file__).resolve().parents[2]


class TorchNamesTest(DTensorTestBase):
    """No ``dtensor_lib``: the module's imports say torch's."""

    world_size = 2

    @with_comms
    def test_torch_mesh_for_torch_tensors(self):
        mesh = self.build_device_mesh()
        self.assertEqual(self.dtensor_lib, TORCHS)
        d = distribute_tensor(torch.arange(5.0), mesh, [Shard(0)])  # 3 + 2 rows
        self.assertIsInstance(d, DTensor)
        self.assertEqual(d.to_local(), torch.arange(5.0).chunk(2)[self.rank])
        self.assertEqual(d.redistribute(mesh, [Replicate()]).to_local(), torch.arange(5.0))


def test_assert_equal_on_rank_checks_one_rank_as_torch_does():
    class OnRank(DTensorTestBase):
        world_size = 2

        def test_on_rank(self):
            self.assertEqualOnRank(self.rank, 0)  # rank 1 would fail: only rank 0 checks
            self.assertNotEqualOnRank(self.rank, 0, rank=1)
            with self.assertRaises(AssertionError):
                self.assertEqualOnRank(self.rank, 5, rank=self.rank)

    result = OnRank("test_on_rank").run()
    assert result.wasSuccessful(), result.failures + result.errors


def _module(name: str, source: str) -> types.ModuleType:
    """A test module made from ``source``, as if imported from a file."""
    module = types.ModuleType(name)
    sys.modules[name] = module
    try:
        exec(compile(textwrap.dedent(source), f"<{name}>", "exec"), vars(module))
    finally:
        del sys.modules[name]
    return module


def test_the_library_is_read_from_the_test_module():
    assert choose_library(TorchNamesTest.test_torch_mesh_for_torch_tensors,
                          TorchNamesTest).lib == TORCHS
    ours = _module("ours_only", """
        from dtensor import Shard, distribute_tensor
        def test(): pass
    """)
    assert choose_library(ours.test, object).lib == OURS
    neither = _module("neither", "def test(): pass")
    assert choose_library(neither.test, object).lib == OURS  # the default, as before


def test_a_module_with_both_libraries_must_say_which():
    both = _module("both_libraries", """
        import dtensor
        from torch.distributed.tensor import distribute_tensor
        from simpg.testing import DTensorTestBase

        class Both(DTensorTestBase):
            world_size = 2

            def test_mesh(self):
                self.build_device_mesh()

        class BothSaid(Both):
            dtensor_lib = "torch.distributed.tensor"
    """)
    result = unittest.TestResult()
    unittest.TestSuite([both.Both("test_mesh"), both.BothSaid("test_mesh")]).run(result)
    assert len(result.errors) == 1 and not result.failures  # BothSaid passes
    text = result.errors[0][1]
    assert "cannot tell which DTensor library this test uses" in text
    assert "both_libraries.dtensor" in text and "both_libraries.distribute_tensor" in text
    assert "dtensor_lib = 'torch.distributed.tensor'" in text


PORTED = '''
import torch
from torch.distributed.tensor import DTensor, Shard, distribute_tensor
from torch.testing._internal.common_utils import (
    instantiate_parametrized_tests,
    parametrize,
    run_tests,
)
from simpg.testing import DTensorTestBase, with_comms  # was: ...common_dtensor


class DTensorTest(DTensorTestBase):
    @with_comms
    def test_dtensor_constructor(self):
        device_mesh = self.build_device_mesh()
        local_tensor = torch.randn(3, 3, requires_grad=True)
        dist_tensor = DTensor.from_local(local_tensor, device_mesh, [Shard(0)])
        self.assertEqual(dist_tensor.size(), torch.Size((self.world_size * 3, 3)))

    @with_comms
    def test_full_tensor(self):
        full = torch.arange(10.0)
        dt = distribute_tensor(full, self.build_device_mesh(), [Shard(0)])
        self.assertEqual(dt.full_tensor(), full)

    @with_comms
    @parametrize("dim", [0, 1])
    def test_shard_dim(self, dim):
        full = torch.arange(70.0).reshape(7, 10)  # uneven on both dims: 2, 2, 2, 1 and 3, 3, 3, 1
        dt = distribute_tensor(full, self.build_device_mesh(), [Shard(dim)])
        self.assertEqual(dt.to_local(), full.chunk(self.world_size, dim)[self.rank])


instantiate_parametrized_tests(DTensorTest)


if __name__ == "__main__":
    run_tests()
'''


def test_torch_run_tests_runs_a_ported_file(tmp_path):
    path = tmp_path / "test_ported.py"
    path.write_text(PORTED)
    # with CI set, torch's run_tests() writes XML reports through xmlrunner, which torch's
    # own CI installs; that is torch's reporting, not what this test is about
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    out = subprocess.run([sys.executable, str(path), "-v"], capture_output=True, text=True,
                         cwd=ROOT, timeout=300, env={**env, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Ran 4 tests" in out.stderr and "OK" in out.stderr
    assert "test_shard_dim_dim_1 (__main__.DTensorTest" in out.stderr
