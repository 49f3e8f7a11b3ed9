"""simpg.costmodel and simpg.timeline: estimates, presets, trace schedule, Chrome JSON."""

from __future__ import annotations

import doctest
import json
import math
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from simpg import collectives as C
from simpg import costmodel, timeline
from simpg.costmodel import CostModel, LinkModel, TraceEstimate
from simpg.records import CollectiveRecord
from simpg.timeline import to_chrome_trace, write_chrome_trace

ITEMSIZE = 4  # float32


def record(op: str, ranks: tuple[int, ...], nbytes: int = 1 << 20, *, seq: int = 0,
           root: int | None = None, start_s: tuple[float, ...] = (),
           end_s: float = 0.0) -> CollectiveRecord:
    """A record as the process group would make it: bytes from ``collectives.traffic``."""
    n = len(ranks)
    piece = nbytes // n
    kwargs: dict[str, object] = {
        "all_reduce": {"numel": nbytes // ITEMSIZE, "itemsize": ITEMSIZE, "group_size": n},
        "all_gather": {"in_bytes": [nbytes] * n},
        "reduce_scatter_tensor": {"out_bytes": [piece] * n},
        "all_to_all_single": {"send_bytes": [[piece] * n] * n},
        "broadcast": {"nbytes": nbytes, "root": root, "group_size": n},
        "reduce": {"nbytes": nbytes, "root": root, "group_size": n},
        "gather": {"in_bytes": [nbytes] * n, "root": root},
        "scatter": {"out_bytes": [nbytes] * n, "root": root},
        "send": {"nbytes": nbytes},
        "barrier": {"group_size": n},
    }[op]  # type: ignore[assignment]
    sent, received = C.traffic(op, **kwargs)
    return CollectiveRecord(
        seq=seq, op=op, group=f"ranks{ranks}", ranks=ranks, dtype=torch.float32,
        shapes=tuple(((nbytes // ITEMSIZE,),) for _ in ranks), bytes_sent=sent,
        bytes_received=received, reduce_op="sum" if "reduce" in op else None, root=root,
        start_s=start_s, end_s=end_s)


ROOTED = {"broadcast", "reduce", "gather", "scatter"}
OPS = ["all_reduce", "all_gather", "reduce_scatter_tensor", "all_to_all_single", "broadcast",
       "reduce", "gather", "scatter"]
NVLINK = CostModel.nvlink_node(8)
CLUSTER = CostModel.infiniband_cluster(ranks_per_node=8)


def _rec(op: str, n: int, nbytes: int, first: int = 0) -> CollectiveRecord:
    return record(op, tuple(range(first, first + n)), nbytes,
                  root=(n - 1) if op in ROOTED else None)


# --------------------------------------------------------------------------- estimates

def test_all_reduce_hand_computed() -> None:
    # 4 ranks on NVLink, 1 MiB: 2(n-1) = 6 hops of 3 us, and each rank sends
    # 2 * (S - S/4) = 1.5 MiB at 150 GB/s.
    expected = 6 * 3e-6 + 1.5 * (1 << 20) / 150e9
    assert math.isclose(NVLINK.estimate(_rec("all_reduce", 4, 1 << 20)), expected)
    # A point-to-point message is one hop plus its bytes.
    model = CostModel(LinkModel(latency_s=1e-6, bandwidth_Bps=1e9))
    assert math.isclose(model.estimate(record("send", (0, 1), 1000)), 2e-6)


@settings(deadline=None, max_examples=30)
@given(op=st.sampled_from(OPS), n=st.integers(2, 16),
       small=st.integers(0, 1 << 20), extra=st.integers(1 << 12, 1 << 22))
def test_estimate_grows_with_bytes(op: str, n: int, small: int, extra: int) -> None:
    small -= small % (n * ITEMSIZE)  # whole elements and pieces, like real inputs
    big = small + extra - extra % (n * ITEMSIZE) + n * ITEMSIZE
    for model in (CostModel.nvlink_node(16), CLUSTER):
        assert model.estimate(_rec(op, n, small)) < model.estimate(_rec(op, n, big))


@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "broadcast", "all_to_all_single"])
@pytest.mark.parametrize("model", [CostModel.nvlink_node(32), CLUSTER], ids=lambda m: m.name)
def test_estimate_grows_with_ranks(op: str, model: CostModel) -> None:
    # all_gather's per-rank input is fixed, so its total grows with n too; for the others
    # the same S is spread over more ranks, and the extra latency hops still make it slower.
    times = [model.estimate(_rec(op, n, 1 << 16)) for n in (2, 3, 4, 8, 16, 32)]
    assert times == sorted(times) and len(set(times)) == len(times), times


def test_group_of_one_and_barrier() -> None:
    for op in OPS:
        assert NVLINK.estimate(_rec(op, 1, 1 << 20)) == 0.0
    # A barrier moves no bytes: only its 2(n-1) hops.
    assert math.isclose(NVLINK.estimate(_rec("barrier", 8, 0)), 14 * 3e-6)


def test_multi_node_slower_than_one_node() -> None:
    for op in OPS:
        one_node = CostModel.nvlink_node(16).estimate(_rec(op, 16, 1 << 24))
        two_nodes = CLUSTER.estimate(_rec(op, 16, 1 << 24))
        assert two_nodes > 2 * one_node, op
        # Inside one node the cluster is the NVLink node.
        assert CLUSTER.estimate(_rec(op, 8, 1 << 24)) == NVLINK.estimate(_rec(op, 8, 1 << 24))
    # A group of one rank per node (ranks 0, 8) crosses InfiniBand even though it is small.
    cross = CLUSTER.estimate(record("all_reduce", (0, 8), 1 << 20))
    assert cross > NVLINK.estimate(record("all_reduce", (0, 1), 1 << 20))


def test_cost_model_errors() -> None:
    with pytest.raises(ValueError, match=re.escape(
            "cost model nvlink_node(8) has no inter-node link, but ranks 7 and 8 are on nodes "
            "0 and 1 (ranks_per_node=8)")):
        NVLINK.estimate(_rec("all_reduce", 9, 1024))
    bogus = CollectiveRecord(seq=3, op="allreduce", group="world", ranks=(0, 1),
                             dtype=torch.float32, shapes=((), ()), bytes_sent=(0, 0),
                             bytes_received=(0, 0))
    with pytest.raises(ValueError, match=r"record #3 has op 'allreduce', expected one of "
                                         r"all_gather, "):
        NVLINK.estimate(bogus)
    with pytest.raises(ValueError, match=r"bandwidth_Bps=0: expected > 0 bytes per second"):
        LinkModel(latency_s=1e-6, bandwidth_Bps=0)
    with pytest.raises(ValueError, match=r"latency_s=-1.0: expected >= 0 seconds"):
        LinkModel(latency_s=-1.0, bandwidth_Bps=1.0)
    with pytest.raises(ValueError, match=r"ranks_per_node=0: expected >= 1 or None"):
        CostModel(LinkModel(0.0, 1.0), ranks_per_node=0)


# --------------------------------------------------------------------------- trace schedule

def _trace() -> list[CollectiveRecord]:
    return [
        record("all_reduce", (0, 1), seq=0),
        record("all_gather", (2, 3), seq=1),  # disjoint from seq 0: overlaps it
        record("all_reduce", (0, 1), seq=2),  # same ranks as seq 0: after it
        record("broadcast", (0, 1, 2, 3), seq=3, root=0),  # waits for everyone
        record("send", (3, 0), seq=4),
    ]


def test_trace_schedule_serializes_per_rank() -> None:
    records = _trace()
    est = NVLINK.estimate_trace(reversed(records))  # order comes from seq, not the input
    s = est.schedule
    d = [NVLINK.estimate(r) for r in records]
    assert [x.record.seq for x in s] == [0, 1, 2, 3, 4]
    assert (s[0].start_s, s[1].start_s) == (0.0, 0.0)
    assert s[2].start_s == s[0].end_s == d[0]
    assert s[3].start_s == max(s[2].end_s, s[1].end_s) == 2 * d[0]
    assert s[4].start_s == s[3].end_s
    assert est.total_s == s[4].end_s == 2 * d[0] + d[3] + d[4]
    assert dict(est.busy_s) == {0: 2 * d[0] + d[3] + d[4], 1: 2 * d[0] + d[3],
                                2: d[1] + d[3], 3: d[1] + d[3] + d[4]}
    rows = {row.op: row for row in est.per_op}
    assert rows["all_reduce"].count == 2 and rows["all_reduce"].seconds == 2 * d[0]
    assert rows["all_gather"].bytes == sum(records[1].bytes_sent)
    assert [row.seconds for row in est.per_op] == sorted(
        (row.seconds for row in est.per_op), reverse=True)


def test_trace_estimate_str_is_a_table() -> None:
    text = str(NVLINK.estimate_trace(_trace()))
    lines = text.splitlines()
    assert lines[0].startswith("estimated ") and "for 5 collectives on nvlink_node(8)" in lines[0]
    assert lines[1].split() == ["op", "count", "bytes", "time", "share"]
    ar = next(line for line in lines if line.startswith("all_reduce"))
    assert ar.split()[1] == "2" and ar.split()[2:4] == ["4.0", "MiB"]
    assert str(TraceEstimate(0.0, (), (), ())).splitlines()[0] == (
        "estimated 0.000 us for 0 collectives on custom")


# --------------------------------------------------------------------------- chrome trace

def _x_events(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


def _check_trace_shape(trace: dict[str, Any], ranks: set[int]) -> None:
    assert json.loads(json.dumps(trace)) == trace
    events = trace["traceEvents"]
    assert isinstance(events, list)
    for e in events:
        assert e["ph"] in ("X", "M") and e["pid"] == 0
        if e["ph"] == "X":
            assert isinstance(e["ts"], float) and isinstance(e["dur"], float)
            assert e["dur"] >= 0 and e["ts"] >= 0 and e["tid"] in ranks
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert names == {r: f"rank {r}" for r in ranks}


def test_chrome_trace_from_cost_model() -> None:
    records = _trace()
    trace = to_chrome_trace(records, NVLINK)
    _check_trace_shape(trace, {0, 1, 2, 3})
    events = _x_events(trace)
    est = NVLINK.estimate_trace(records)
    for rank in range(4):
        mine = [e for e in events if e["tid"] == rank]
        expected = [x for x in est.schedule if rank in x.record.ranks]
        assert [e["name"] for e in mine] == [x.record.op for x in expected]
        for e, x in zip(mine, expected):
            assert math.isclose(e["ts"], x.start_s * 1e6)
            assert math.isclose(e["dur"], (x.end_s - x.start_s) * 1e6)
        ends = [e["ts"] + e["dur"] for e in mine]
        assert all(b["ts"] >= a - 1e-9 for a, b in zip(ends, mine[1:]))
    send = next(e for e in events if e["name"] == "send" and e["tid"] == 3)
    assert send["args"] == {"seq": 4, "group": "ranks(3, 0)", "group_rank": 0,
                            "ranks": [3, 0], "dtype": "float32", "shapes": [[262144]],
                            "bytes_sent": 1 << 20, "bytes_received": 0}
    bcast = next(e for e in events if e["name"] == "broadcast" and e["tid"] == 2)
    assert bcast["args"]["root"] == 0


def test_chrome_trace_from_wall_times(tmp_path: Path) -> None:
    records = [record("all_reduce", (0, 1), seq=0, start_s=(10.0, 10.25), end_s=10.5),
               record("all_gather", (1, 2), seq=1, start_s=(10.5, 10.0), end_s=11.0)]
    path = tmp_path / "trace.json"
    write_chrome_trace(records, path)
    trace = json.loads(path.read_text())
    _check_trace_shape(trace, {0, 1, 2})
    spans = {(e["name"], e["tid"]): (e["ts"], e["dur"]) for e in _x_events(trace)}
    assert spans == {("all_reduce", 0): (0.0, 0.5e6), ("all_reduce", 1): (0.25e6, 0.25e6),
                     ("all_gather", 1): (0.5e6, 0.5e6), ("all_gather", 2): (0.0, 1e6)}
    assert trace["otherData"]["clock"] == "wall time"


def test_chrome_trace_without_wall_times_needs_a_cost_model() -> None:
    with pytest.raises(ValueError, match=re.escape(
            "record #0 (all_reduce on ranks(0, 1)) has 0 start times for 2 ranks: expected "
            "one per rank, or pass a cost_model")):
        to_chrome_trace([record("all_reduce", (0, 1))])
    assert _x_events(to_chrome_trace([])) == []


@pytest.mark.parametrize("module", [costmodel, timeline], ids=lambda m: m.__name__)
def test_docstring_examples_run(module: ModuleType) -> None:
    result = doctest.testmod(module, raise_on_error=False)
    assert result.attempted > 0 and result.failed == 0
