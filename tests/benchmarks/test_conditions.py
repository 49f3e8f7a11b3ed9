"""benchmarks/conditions.py: the machine and spread lines every benchmark prints under its
table (no timing asserted)."""

from __future__ import annotations

import os

from benchmarks import conditions


def test_machine_line_shares_of_the_cpus_time() -> None:
    cpus = os.cpu_count() or 1
    start = conditions.Sample(wall=100.0, load=(1.0, 2.0, 3.0), busy_s=1000.0, steal_s=5.0,
                              own_s=10.0)
    # over 10 s the CPUs were busy 10 * cpus * 0.75 s, of which this run 10 * cpus * 0.25 s
    end = conditions.Sample(wall=110.0, load=(4.0, 2.5, 3.0), busy_s=1000.0 + 7.5 * cpus,
                            steal_s=5.0 + 1.0 * cpus, own_s=10.0 + 2.5 * cpus)
    line = conditions.machine_line(start, end)
    assert line.startswith(f"machine: {cpus} CPUs")
    assert "load 1.00 / 2.00 / 3.00 at start, 4.00 / 2.50 / 3.00 at end" in line
    assert ("over the run's 10 s other processes used 50% of the CPUs' time, this run 25%, "
            "steal 10%") in line


def test_machine_line_without_proc_stat_or_load() -> None:
    s = conditions.Sample(wall=1.0, load=None, busy_s=None, steal_s=None, own_s=0.0)
    line = conditions.machine_line(s, s)
    assert "load unknown at start, unknown at end" in line and "other processes" not in line


def test_a_real_run_prints_both_lines() -> None:
    footer = conditions.Conditions().footer("none")
    spread, blank, machine = footer.split("\n")
    assert (spread, blank) == ("spread: none", "") and machine.startswith("machine: ")
    report = f"| a |\n|---|\n| 1 |\n\n{footer}\n\nsteps"
    assert conditions.report_lines(report) == footer


def test_spread_and_worst_over_best() -> None:
    assert conditions.spread([2.0, 4.0, 3.0]) == "2 / 3 / 4 (min / median / max of 3)"
    assert conditions.spread([2.0]) == "2 (one round: no spread)"
    assert conditions.spread([]) == "no rounds"
    rounds = {"a": [1.0, 1.2], "b": [1.0, 3.0, 2.0], "c": [5.0]}
    assert conditions.worst_over_best(rounds) == (
        "slowest round / fastest round per figure: median 2.1, max 3 (b), "
        "over 2 to 3 rounds each")
    assert conditions.worst_over_best({"c": [5.0]}).startswith("one round per figure")
