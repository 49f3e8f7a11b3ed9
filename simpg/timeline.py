"""Collective records as a Chrome / Perfetto trace: one track per rank, one slice per call.

Open the written file in https://ui.perfetto.dev or chrome://tracing. Times come from a
cost model's simulated schedule when one is given (what the collectives would take on that
interconnect), else from the wall times the simulator recorded (what they took here,
threads and all).

>>> import torch
>>> from simpg.records import CollectiveRecord
>>> rec = CollectiveRecord(seq=0, op="barrier", group="world", ranks=(0, 1),
...                        dtype=torch.float32, shapes=((), ()), bytes_sent=(0, 0),
...                        bytes_received=(0, 0), start_s=(1.0, 1.5), end_s=2.0)
>>> [(e["tid"], e["ts"], e["dur"]) for e in to_chrome_trace([rec])["traceEvents"]
...  if e["ph"] == "X"]
[(0, 0.0, 1000000.0), (1, 500000.0, 500000.0)]
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from typing import Any

from simpg.costmodel import CostModel
from simpg.overlap import StepEstimate
from simpg.records import CollectiveRecord

__all__ = ["to_chrome_trace", "write_chrome_trace", "modelled_chrome_trace"]

_PID = 0
_US = 1e6  # trace-event timestamps are in microseconds


def to_chrome_trace(records: Iterable[CollectiveRecord],
                    cost_model: CostModel | None = None) -> dict[str, Any]:
    """Trace-event JSON (as a dict) with an ``X`` event per collective per rank."""
    records = sorted(records, key=lambda r: r.seq)
    spans = _simulated_spans(records, cost_model) if cost_model else _wall_spans(records)
    ranks = sorted({r for rec in records for r in rec.ranks})
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": _PID, "args": {"name": "simpg"}},
    ]
    for r in ranks:
        events.append({"name": "thread_name", "ph": "M", "pid": _PID, "tid": r,
                       "args": {"name": f"rank {r}"}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": _PID, "tid": r,
                       "args": {"sort_index": r}})
    for rec, per_rank in zip(records, spans):
        for i, (rank, (start, end)) in enumerate(zip(rec.ranks, per_rank)):
            events.append({
                "name": rec.op, "cat": "collective", "ph": "X", "pid": _PID, "tid": rank,
                "ts": start * _US, "dur": max(end - start, 0.0) * _US,
                "args": _args(rec, i),
            })
    clock = f"cost model {cost_model.name}" if cost_model else "wall time"
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"generator": "simpg.timeline", "clock": clock}}


def write_chrome_trace(records: Iterable[CollectiveRecord], path: str | os.PathLike[str],
                       cost_model: CostModel | None = None) -> None:
    """Write ``to_chrome_trace(records, cost_model)`` as JSON to ``path``."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(to_chrome_trace(records, cost_model), f)


def _args(rec: CollectiveRecord, group_rank: int) -> dict[str, Any]:
    args: dict[str, Any] = {
        "seq": rec.seq,
        "group": rec.group,
        "group_rank": group_rank,
        "ranks": list(rec.ranks),
        "dtype": str(rec.dtype).removeprefix("torch."),
        "shapes": [list(s) for s in rec.shapes[group_rank]] if rec.shapes else [],
        "bytes_sent": rec.bytes_sent[group_rank],
        "bytes_received": rec.bytes_received[group_rank],
    }
    if rec.reduce_op is not None:
        args["reduce_op"] = rec.reduce_op
    if rec.root is not None:
        args["root"] = rec.root
    return args


Span = tuple[float, float]


def _simulated_spans(records: Sequence[CollectiveRecord],
                     cost_model: CostModel) -> list[list[Span]]:
    # In the simulated schedule every rank of a group starts and ends together.
    schedule = cost_model.estimate_trace(records).schedule
    return [[(s.start_s, s.end_s)] * len(s.record.ranks) for s in schedule]


def _wall_spans(records: Sequence[CollectiveRecord]) -> list[list[Span]]:
    """Per rank: from when it issued the collective to when the data moved, from t=0."""
    for rec in records:
        if len(rec.start_s) != len(rec.ranks):
            raise ValueError(f"record #{rec.seq} ({rec.op} on {rec.group}) has "
                             f"{len(rec.start_s)} start times for {len(rec.ranks)} ranks: "
                             f"expected one per rank, or pass a cost_model to use simulated "
                             f"times")
    origin = min((t for rec in records for t in rec.start_s), default=0.0)
    return [[(t - origin, rec.end_s - origin) for t in rec.start_s] for rec in records]


_COMPUTE, _COMM = 0, 1  # the two streams of a rank in a modelled step


def modelled_chrome_trace(step: StepEstimate,
                          records: Iterable[CollectiveRecord] = ()) -> dict[str, Any]:
    """A modelled step (``simpg.overlap``) as trace-event JSON: one process per rank, a
    compute stream (kernels, and the waits that expose communication) and a communication
    stream. ``records`` name the collectives (else ``#seq``).

    >>> from simpg.overlap import Compute, Issue, Wait, schedule
    >>> step = schedule({0: [Issue(0), Compute("mm", flops=1), Wait(0)]}, lambda op: 1.0,
    ...                 {0: 3.0}, {0: (0,)})
    >>> [(e["tid"], e["name"], e["ts"], e["dur"])
    ...  for e in modelled_chrome_trace(step)["traceEvents"] if e["ph"] == "X"]
    [(0, 'mm', 0.0, 1000000.0), (0, 'wait #0', 1000000.0, 2000000.0), (1, '#0', 0.0, 3000000.0)]
    """
    names = {rec.seq: rec.op for rec in records}
    events: list[dict[str, Any]] = []
    for r in sorted(rs.rank for rs in step.ranks):
        events.append({"name": "process_name", "ph": "M", "pid": r,
                       "args": {"name": f"rank {r}"}})
        for tid, label in ((_COMPUTE, "compute stream"), (_COMM, "communication stream")):
            events.append({"name": "thread_name", "ph": "M", "pid": r, "tid": tid,
                           "args": {"name": label}})
    for rank, what, start, end in step.compute_spans:
        events.append({"name": what, "cat": "wait" if what.startswith("wait") else "kernel",
                       "ph": "X", "pid": rank, "tid": _COMPUTE, "ts": start * _US,
                       "dur": (end - start) * _US})
    for seq, (start, end) in sorted(step.collectives.items()):
        for rank in dict.fromkeys(step.ranks_of.get(seq, ())):
            events.append({"name": names.get(seq, f"#{seq}"), "cat": "collective", "ph": "X",
                           "pid": rank, "tid": _COMM, "ts": start * _US,
                           "dur": (end - start) * _US, "args": {"seq": seq}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"generator": "simpg.timeline", "clock": "modelled device"}}
