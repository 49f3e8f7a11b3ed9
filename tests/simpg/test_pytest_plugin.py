"""The pytest plugin in a project of its own: no conftest, only what installing this package
gives (the pytest11 entry point), run as a user runs pytest."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

USER_TESTS = '''
import pytest, torch, torch.distributed as dist, simpg
import dtensor
from dtensor import Shard


@pytest.mark.world(4)
def test_sum():
    t = torch.ones(2)
    dist.all_reduce(t)
    assert t.tolist() == [4.0, 4.0]


@pytest.mark.world(4)
def test_grid():
    def check(n):
        t = torch.ones(n)
        dist.all_reduce(t)
        assert not (n == 1 and dist.get_rank() == 1), "n=1 fails on rank 1"
        assert not (n == 2 and dist.get_rank() == 2), "n=2 fails on rank 2"

    simpg.run_subtests({"n": [1, 2, 3]}, check)


@pytest.mark.world(2)
def test_full_tensor_on_one_rank_only():
    mesh = dtensor.init_device_mesh("cpu", (2,))
    d = dtensor.distribute_tensor(torch.arange(4.0), mesh, [Shard(0)])
    if dist.get_rank() == 0:
        d.full_tensor()  # LINE_FULL_TENSOR
'''


def _pytest(project: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "PYTHONPATH"))}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=project, env=env, capture_output=True, text=True, timeout=300)


def test_marker_and_subtests_work_in_a_fresh_project(tmp_path):
    (tmp_path / "test_user.py").write_text(USER_TESTS)
    out = _pytest(tmp_path, "-q", "test_user.py")
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    assert "1 passed" in text and "2 failed" in text
    assert "PytestUnknownMarkWarning" not in text and "not initialized" not in text
    # every failing combination, at the user's line, with no simpg frame and no log noise
    assert "2 failing subtest(s) of 3 on 4 simulated ranks" in text
    assert "[n=1] failed on rank 1 of 4 at" in text and "n=1 fails on rank 1" in text
    assert "[n=2] failed on rank 2 of 4 at" in text and "n=2 fails on rank 2" in text
    assert "simpg/runner.py" not in text and "simpg/subtests.py" not in text
    assert "DEBUG" not in text
    line = USER_TESTS.splitlines().index("        d.full_tensor()  # LINE_FULL_TENSOR") + 1
    assert re.search(rf"rank 0: waiting in all_gather.* at \S*test_user.py:{line} via ",
                     text), text

    # the printed command reruns just that combination; --full-trace shows simpg's frames
    rerun = re.search(r"rerun just this: (pytest .*--subtest n=2)", text).group(1)
    again = _pytest(tmp_path, "-q", "--full-trace", *shlex.split(rerun)[1:])
    text = again.stdout + again.stderr
    assert "1 failing subtest(s) of 3" in text and "[n=2] failed on rank 2" in text
    assert "[n=1] failed" not in text
    assert "simpg/runner.py" in text


def test_a_bad_world_marker_is_an_error_at_collection(tmp_path):
    (tmp_path / "test_bad.py").write_text(
        "import pytest\n\n@pytest.mark.world(0)\ndef test_zero():\n    pass\n")
    out = _pytest(tmp_path, "-q", "test_bad.py")
    assert out.returncode == 4  # pytest's usage error
    assert "@pytest.mark.world(0): the world size must be an int >= 1" in out.stderr
