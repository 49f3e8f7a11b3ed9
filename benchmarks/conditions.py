"""The conditions a benchmark ran under: two lines every benchmark prints under its table (and
keeps in its README block), so that no figure can be read without them.

- ``machine:`` the CPUs, the load average (1, 5, 15 minutes) at the start and at the end of
  the run, and, where Linux's ``/proc/stat`` says, how much of the CPUs' time during the run
  went to other processes (busy time of all CPUs less this process's and its finished
  children's own) and was stolen by the hypervisor.
- ``spread:`` how much the rounds a figure is taken from (best of N, median of N) differ:
  min / median / max, or the slowest round over the fastest. A figure whose rounds differ by
  2x on a loaded machine says less than one whose rounds agree to 5%.

A run starts with ``Conditions()`` and prints ``footer(...)`` under its table at its end:

>>> run = Conditions()
>>> run.machine_line().startswith(f"machine: {os.cpu_count()} CPUs; load ")
True
>>> spread([3.0, 1.0, 2.0, 10.0])
'1 / 2.5 / 10 (min / median / max of 4)'
>>> worst_over_best({"add": [1.0, 1.1], "mm": [2.0, 5.0], "sum": [4.0, 4.0]})
'slowest round / fastest round per figure: median 1.1, max 2.5 (mm), over 2 rounds each'
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class Sample:
    """The machine at one moment: a clock, the load average, CPU time counters (seconds)."""

    wall: float
    load: tuple[float, float, float] | None
    busy_s: float | None  # all CPUs' non-idle time since boot, steal excluded (/proc/stat)
    steal_s: float | None  # time the hypervisor gave to other guests (/proc/stat)
    own_s: float  # this process and its waited-for children, user + system


def _proc_stat() -> tuple[float, float] | None:
    """(busy, steal) seconds of all CPUs since boot, or None where /proc/stat is missing."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    # user nice system idle iowait irq softirq steal [guest guest_nice: already in user, nice]
    ticks = [int(x) for x in fields[1:9]] + [0] * (8 - len(fields[1:9]))
    user, nice, system, _idle, _iowait, irq, softirq, steal = ticks
    return (user + nice + system + irq + softirq) / _CLK_TCK, steal / _CLK_TCK


def sample() -> Sample:
    stat = _proc_stat()
    t = os.times()
    try:
        load: tuple[float, float, float] | None = os.getloadavg()
    except OSError:
        load = None
    return Sample(wall=time.monotonic(), load=load,
                  busy_s=stat[0] if stat else None, steal_s=stat[1] if stat else None,
                  own_s=t.user + t.system + t.children_user + t.children_system)


def _load(s: Sample) -> str:
    return "unknown" if s.load is None else " / ".join(f"{x:.2f}" for x in s.load)


def machine_line(start: Sample, end: Sample) -> str:
    """``machine: ...``: CPUs, load at start and end, others' and stolen CPU share between."""
    cpus = os.cpu_count() or 1
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cpus
    head = f"machine: {cpus} CPUs" + (f" ({usable} usable here)" if usable != cpus else "")
    parts = [head, f"load {_load(start)} at start, {_load(end)} at end (1 / 5 / 15 min)"]
    capacity = (end.wall - start.wall) * cpus
    if start.busy_s is not None and end.busy_s is not None and capacity > 0:
        own = end.own_s - start.own_s
        others = max(0.0, end.busy_s - start.busy_s - own)
        stolen = (end.steal_s or 0.0) - (start.steal_s or 0.0)
        parts.append(f"over the run's {end.wall - start.wall:.0f} s other processes used "
                     f"{others / capacity:.0%} of the CPUs' time, this run {own / capacity:.0%}, "
                     f"steal {stolen / capacity:.0%}")
    return "; ".join(parts)


class Conditions:
    """The machine from construction to each ``machine_line()`` call."""

    def __init__(self) -> None:
        self.start = sample()

    def machine_line(self) -> str:
        return machine_line(self.start, sample())

    def footer(self, spread_text: str) -> str:
        """The two lines to print under a table, a blank line apart (two paragraphs in a
        README block): ``spread: <spread_text>`` and the machine line, as of now."""
        return f"spread: {spread_text}\n\n{self.machine_line()}"


def _g(x: float) -> str:
    return f"{x:.3g}"


def spread(values: Sequence[float]) -> str:
    """``min / median / max (min / median / max of N)`` of ``values``."""
    if not values:
        return "no rounds"
    if len(values) == 1:
        return f"{_g(values[0])} (one round: no spread)"
    return (f"{_g(min(values))} / {_g(statistics.median(values))} / {_g(max(values))} "
            f"(min / median / max of {len(values)})")


def worst_over_best(rounds: Mapping[str, Sequence[float]]) -> str:
    """For figures each taken from several rounds: the median and the largest ratio of a
    figure's slowest round to its fastest, naming the figure with the largest."""
    ratios = {name: max(r) / min(r) for name, r in rounds.items() if len(r) > 1 and min(r) > 0}
    if not ratios:
        return "one round per figure: no spread to show"
    worst = max(ratios, key=ratios.__getitem__)
    counts = sorted({len(rounds[n]) for n in ratios})
    each = (f"{counts[0]} rounds each" if len(counts) == 1
            else f"{counts[0]} to {counts[-1]} rounds each")
    return (f"slowest round / fastest round per figure: median "
            f"{_g(statistics.median(ratios.values()))}, max {_g(ratios[worst])} ({worst}), "
            f"over {each}")


def report_lines(report: str) -> str:
    """The ``spread:`` and ``machine:`` lines of a printed report (for a README block that
    keeps only the report's table)."""
    return "\n\n".join(line for line in report.splitlines()
                       if line.startswith(("spread:", "machine:")))
