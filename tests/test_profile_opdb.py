"""benchmarks/profile_opdb.py on two OpInfos: every case is counted in one phase, and the
sweep's functions are put back afterwards (no timing asserted)."""

from __future__ import annotations

import pytest

from opdb_tests import sweep
from tests.bench_loader import load_benchmark

bench = load_benchmark("profile_opdb")


def test_phases_count_every_case_and_restore_the_sweep(capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    soundness, run_world = sweep.soundness, sweep.run_world
    found = bench.profile(["add", "neg"])
    assert sweep.soundness is soundness and sweep.run_world is run_world
    assert found["cases"]["soundness"] > 0 and found["cases"]["end to end"] > 0
    assert sum(found["cases"].values()) == found["swept"]
    assert sum(found["seconds"].values()) <= found["total"]
    bench.report(["add", "neg"], found)
    out = capsys.readouterr().out
    assert "soundness" in out and "end to end" in out and "ms/case" in out
