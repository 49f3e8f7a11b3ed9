"""benchmarks/bench_simpg.py's report and its figures, on small worlds (no timing asserted)."""

from __future__ import annotations

import pytest

import simpg
from tests.support.bench_loader import load_benchmark

bench = load_benchmark("bench_simpg")
REPS = {"rounds": 1, "starts": 1, "gloo_starts": 1, "warmup": 1, "small": 4, "large": 1}


def test_rank_figures_check_results_and_count_switches() -> None:
    figures = simpg.run(bench.rank_figures, 2, REPS)
    assert figures[1] is None
    f = figures[0]
    assert f["all_reduce_1k_us"] > 0 and f["all_gather_1k_us"] > 0
    assert f["all_reduce_1k_cpu_us"] > 0  # every thread's CPU time, in-process backends only
    # every figure derives from the same timed loop: moved bytes = 2 ranks x (read + write)
    assert f["all_reduce_4m_moved_gbps"] == pytest.approx(4 * f["all_reduce_4m_gbps"])
    # one hand-over per rank per collective at least: two ranks switch at least once a call
    assert f["all_reduce_1k_switches"] >= 1


def test_sweep_figure_on_rank_0_only() -> None:
    out = simpg.run(bench.sweep_figure, 3, REPS)
    assert out[0] > 0 and out[1:] == [None, None]


def test_sweep_figures_count_cpu_time_of_every_thread() -> None:
    figures = simpg.run(bench.sweep_figures, 3, REPS)[0]
    assert figures["sweep_cpu_us"] > 0


def test_sweep_prints_the_cpu_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    results = {"simpg": {4: {"sweep_us": 40.0, "sweep_cpu_us": 30.0}},
               "torch_mt": {4: {"sweep_us": 80.0, "sweep_cpu_us": 120.0}}}
    bench.print_sweep(results)
    assert "| 4 | 40.0 | 10.0 | 80.0 | 20.0 | 0.5 | 0.25 |" in capsys.readouterr().out


def test_report_prints_ratios_bound_and_sweep(capsys: pytest.CaptureFixture[str]) -> None:
    figs = {"start_stop_ms": 1.0, "all_reduce_1k_us": 10.0, "all_reduce_1k_switches": 4.0,
            "all_reduce_1k_preempted": 0.0, "all_gather_1k_us": 20.0,
            "all_reduce_4m_gbps": 1.0, "all_reduce_4m_moved_gbps": 4.0}
    results = {
        "simpg": {4: figs, 8: {**figs, "all_reduce_4m_moved_gbps": 8.0},
                  **{n: {"sweep_us": 5.0 * n} for n in (2, 16, 32, 64)}},
        "torch_mt": {4: {**figs, "all_reduce_1k_us": 40.0}, 8: figs,
                     **{n: {"sweep_us": 10.0 * n} for n in (2, 16, 32, 64)}},
    }
    results["simpg"][4]["sweep_us"] = results["simpg"][8]["sweep_us"] = 1.0
    bench.print_table(results, ["gloo"], ["bench_simpg.py"], memcpy=8.0, loaded=True)
    bench.print_sweep(results)
    out = capsys.readouterr().out
    assert "| all_reduce 1 KB (µs/call) | 4 | 10.0 | 40.0 | failed | 0.25 | – |" in out
    assert "one busy process per core (--loaded)" in out
    assert "reaches 50% of it at 4 ranks, 100% of it at 8 ranks" in out
    assert "| 64 | 320.0 | 5.0 | 640.0 | 10.0 | 0.5 | – |" in out


def test_ops_world_measures_every_op_on_our_dtensor() -> None:
    figures = simpg.run(bench._dtensor_rank, bench.OPS_WORLD, REPS)
    assert figures[1:] == [None] * (bench.OPS_WORLD - 1)
    assert set(bench.OP_NAMES) <= set(figures[0]) and all(
        figures[0][name] > 0 for name in bench.OP_NAMES)


def test_ops_world_measures_every_op_on_torch_local_tensor_mode() -> None:
    figures = bench.measure_torch_local_tensor(REPS, True)[bench.OPS_WORLD]
    assert all(figures[name] > 0 for name in bench.OP_NAMES)


def test_ops_report_prints_ours_over_torch(capsys: pytest.CaptureFixture[str]) -> None:
    ours = {name: 10.0 for name in bench.OP_NAMES}
    bench.print_ops({"dtensor_simpg": {8: ours},
                     "torch_local_tensor": {8: {**ours, "add": 40.0}}})
    out = capsys.readouterr().out
    assert "| add | 10.0 | 40.0 | 0.25 |" in out
    assert "| mm 64x64 | 10.0 | 10.0 | 1 |" in out


def test_spread_line_names_the_per_op_figures() -> None:
    results = {"dtensor_simpg": {8: {"add": 1.0, "add" + bench.SPREAD: 3.0}},
               "simpg": {4: {"all_reduce_1k_us": 1.0, "all_reduce_1k_us" + bench.SPREAD: 1.5}}}
    text = bench.spread_text(results, {"rounds": 3, "gloo_starts": 1})
    assert "max 3 (dtensor_simpg add at 8 ranks)" in text
