"""Smoke test of benchmarks/bench_pipeline.py at a tiny size: every schedule of both
libraries runs, both give the same losses, and every row is printed (no timing thresholds)."""

from __future__ import annotations

import pytest

from tests.support.bench_loader import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_pipeline")


def test_every_schedule_of_both_libraries_runs_and_is_reported(bench, capsys):
    args = bench.parse_args(["--quick", "--stages", "2", "--microbatches", "4"])
    rows = bench.compare(args)
    for name, _ in bench.SCHEDULES:
        ours, torch_row = rows[(name, "ours")], rows[(name, "torch")]
        assert ours.losses == pytest.approx(torch_row.losses, rel=1e-6), name
        assert len(ours.losses) == 4 and 0 <= ours.bubble < 1 and len(ours.peaks) == 2
        # instant messages can only shorten the wait
        assert 0 <= ours.schedule_bubble <= ours.bubble + 1e-9, name
    bench.print_report(args, rows, command="test")
    out = capsys.readouterr().out
    for name, _ in bench.SCHEDULES:
        assert f"| {name} |" in out


def test_the_textbook_bubble_is_the_idle_share_of_the_step(bench):
    assert bench.textbook(4, 8, 1) == pytest.approx(3 / 11)  # (p - 1) / (m + p - 1)
    assert bench.textbook(4, 8, 2) == pytest.approx(3 / 19)  # (p - 1) / v of m busy slots
