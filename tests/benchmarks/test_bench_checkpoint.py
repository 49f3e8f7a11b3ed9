"""Smoke test of benchmarks/bench_checkpoint.py at tiny sizes: both libraries save the
2x4 state, load it 8-way bit for bit, and every row of the table is printed (no timing
thresholds)."""

from __future__ import annotations

import pytest
from tests.support.bench_loader import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_checkpoint")


def test_both_libraries_round_trip_and_every_row_is_reported(bench, capsys):
    args = bench.parse_args(["--quick"])
    sides, nbytes = bench.compare(args)
    assert nbytes == bench.state_bytes(bench.global_state(args)) + 4
    for lib in bench.LIBS:
        side = sides[lib]
        assert side.correct, lib
        assert len(side.save_s) == len(side.load_s) == 1
        assert side.written >= nbytes and side.files > 0 and side.read > 0, lib
    # ours counts what it reads; every byte it counts went through read(2)
    assert nbytes <= sides["ours"].self_counted <= sides["ours"].read
    names = [name for name, _, _, _ in bench.rows(sides, nbytes)]
    assert names[:2] == ["save throughput (GB/s)", "load throughput, 2x4 -> 8-way (GB/s)"]
    bench.print_report(args, sides, nbytes, command="test")
    out = capsys.readouterr().out
    assert "| bytes read / bytes the target holds |" in out
    assert "| loaded bit-identical | yes | yes | - |" in out


def test_async_table_round_trips_both_libraries_and_prints_every_row(bench, capsys):
    args = bench.parse_args(["--quick"])
    sides = bench.compare_async(args)
    for lib in bench.LIBS:
        side = sides[lib]
        assert side.correct, lib
        assert len(side.call_s) == len(side.done_s) == 1 and len(side.idle_step_s) == 2
        assert side.busy_step_s and side.call_s[0] <= side.done_s[0], lib
    bench.print_async_report(args, sides)
    out = capsys.readouterr().out
    assert "| step time, in flight / none |" in out
    assert "| checkpoint holds the values at the call | yes | yes | - |" in out
