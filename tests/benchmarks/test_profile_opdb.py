"""benchmarks/profile_opdb.py on two OpInfos: every case is counted in one phase, and the
sweep's functions are put back afterwards (no timing asserted)."""

from __future__ import annotations

import pytest

from opdb_tests import sweep
from tests.support.bench_loader import load_benchmark

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


def test_stack_shares_count_busy_samples_inclusively_once_per_stack() -> None:
    raw = [
        "rank_main (runner.py:1);_world_body (sweep.py:2);torch_dispatch (dispatch.py:3);"
        "decide (propagate.py:4) 6",
        "rank_main (runner.py:1);_world_body (sweep.py:2);f (a.py:1);f (a.py:2) 3",
        "rank_main (runner.py:1);_world_body (sweep.py:2);Waker.wait (world.py:62) 50",
        "main (x.py:1);decide (propagate.py:4) 7",  # outside the worlds
    ]
    busy, inclusive = bench.stack_shares(raw)
    assert busy == 9
    assert inclusive["decide"] == 6 and inclusive["torch_dispatch"] == 6
    assert inclusive["f"] == 3 and inclusive["_world_body"] == 9
    assert "Waker.wait" not in inclusive
