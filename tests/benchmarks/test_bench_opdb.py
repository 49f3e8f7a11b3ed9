"""Smoke test of benchmarks/bench_opdb.py on one small OpInfo: the three harnesses each run it
and count its cases, torch's two subprocesses import neither simpg nor dtensor (checked on
every answer), the default tier's test is put back as it was, the table prints its notes.
No timing asserted."""

from __future__ import annotations

import pytest
from tests.support.bench_loader import load_benchmark

from opdb_tests import sweep, test_opdb


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_opdb")


def test_three_harnesses_run_the_same_opinfo(bench, capsys: pytest.CaptureFixture[str]) -> None:
    functions = sweep.soundness, test_opdb.soundness, sweep.run_world
    keys = ["abs"]  # 3 torch cases (its float32 samples), about 30 of ours
    totals = bench.compare(keys, chunk=1, progress=False)
    assert (sweep.soundness, test_opdb.soundness, sweep.run_world) == functions
    assert set(totals) == {*bench.TORCH_MODES.values(), bench.OURS}
    for name, t in totals.items():
        assert t["per_op"]["abs"]["outcome"] == "pass", name
        assert t["cases"] == t["per_op"]["abs"]["cases"] > 0, name
    threaded, local = (totals[bench.TORCH_MODES[m]]["per_op"]["abs"] for m in bench.TORCH_MODES)
    for field in ("outcome", "cases", "samples"):  # the same test, on two process groups
        assert threaded[field] == local[field], field
    bench.report(keys, totals)
    out = capsys.readouterr().out
    assert "ours / faster torch harness" in out and "uneven S" in out and "even Shard" in out


def test_keys_are_spread_over_op_db(bench) -> None:
    every = bench._keys(None)
    some = bench._keys(5)
    assert len(some) == 5 and some[0] == every[0] and set(some) <= set(every)
    assert [every.index(k) for k in some] == sorted(every.index(k) for k in some)
