"""Estimate how long recorded collectives would take on a given interconnect.

A deliberately simple alpha-beta model: a collective costs ``hops * latency`` plus the
busiest rank's bytes over the slowest link it uses. Ring collectives use the links between
neighbouring group ranks; the busiest rank's bytes are what ``simpg.collectives.traffic``
put into the record. A trace is scheduled by letting each rank's clock advance through the
collectives it takes part in, in completion order.

>>> import torch
>>> from simpg.records import CollectiveRecord
>>> rec = CollectiveRecord(seq=0, op="all_gather", group="world", ranks=(0, 1),
...                        dtype=torch.float32, shapes=(((4,),), ((4,),)),
...                        bytes_sent=(16, 16), bytes_received=(16, 16))
>>> CostModel(LinkModel(latency_s=1e-6, bandwidth_Bps=16e6)).estimate(rec)
2e-06
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from simpg.records import CollectiveRecord

__all__ = ["LinkModel", "CostModel", "ScheduledCollective", "OpSummary", "TraceEstimate"]


@dataclass(frozen=True, slots=True)
class LinkModel:
    """One direction of a link: time for a message is ``latency_s + nbytes / bandwidth_Bps``.

    >>> LinkModel(latency_s=1e-6, bandwidth_Bps=1e9).time(1000)
    2e-06
    """

    latency_s: float
    bandwidth_Bps: float

    def __post_init__(self) -> None:
        if not self.latency_s >= 0:
            raise ValueError(f"LinkModel latency_s={self.latency_s!r}: expected >= 0 seconds")
        if not self.bandwidth_Bps > 0:
            raise ValueError(f"LinkModel bandwidth_Bps={self.bandwidth_Bps!r}: expected > 0 "
                             f"bytes per second")

    def time(self, nbytes: int) -> float:
        return self.latency_s + nbytes / self.bandwidth_Bps


# Latency hops by op. Ring algorithms (Note [ring traffic] in simpg.collectives): a ring
# all_gather / reduce_scatter / pipelined broadcast / reduce takes n-1 steps, all_reduce
# (reduce_scatter then all_gather) 2(n-1); a barrier is an all_reduce of nothing. A
# pairwise all_to_all takes n-1 exchange steps. gather/scatter post their n-1 messages at
# once from or to the root, and a point-to-point message is one hop.
_RING = "ring"
_ALL_PAIRS = "all_pairs"
_ROOT = "root"
_OPS: dict[str, tuple[str, int, int]] = {  # op -> (links used, hops = a*(n-1) + b)
    "all_gather": (_RING, 1, 0),
    "all_gather_into_tensor": (_RING, 1, 0),
    "reduce_scatter": (_RING, 1, 0),
    "reduce_scatter_tensor": (_RING, 1, 0),
    "broadcast": (_RING, 1, 0),
    "reduce": (_RING, 1, 0),
    "all_reduce": (_RING, 2, 0),
    "barrier": (_RING, 2, 0),
    "all_to_all": (_ALL_PAIRS, 1, 0),
    "all_to_all_single": (_ALL_PAIRS, 1, 0),
    "gather": (_ROOT, 0, 1),
    "scatter": (_ROOT, 0, 1),
    "send": (_RING, 0, 1),
    "recv": (_RING, 0, 1),
}


@dataclass(frozen=True, slots=True)
class CostModel:
    """Per-link latency and bandwidth for ranks packed ``ranks_per_node`` to a node.

    Global rank r lives on node ``r // ranks_per_node``. ``ranks_per_node=None`` means one
    node holding every rank; then ``inter_node`` is unused. Bandwidths are per direction
    per rank: a rank can send and receive at full rate at the same time.

    >>> CostModel.infiniband_cluster(ranks_per_node=8).link(0, 8) == _INFINIBAND_NDR
    True
    """

    intra_node: LinkModel
    inter_node: LinkModel | None = None
    ranks_per_node: int | None = None
    name: str = "custom"

    def __post_init__(self) -> None:
        if self.ranks_per_node is not None and self.ranks_per_node < 1:
            raise ValueError(f"CostModel ranks_per_node={self.ranks_per_node}: expected >= 1 "
                             f"or None (all ranks on one node)")

    # Note [preset figures]: approximate *effective* figures, i.e. what a collective
    # library sees, not link peaks. NVLink: NVIDIA's A100 and H100 SXM datasheets give
    # 600 GB/s and 900 GB/s of total bidirectional NVLink bandwidth per GPU (300 / 450 GB/s
    # per direction); ring collectives measured with NVIDIA's nccl-tests reach well below
    # peak, so we take 150 GB/s per direction and ~3 us per hop as round, conservative
    # numbers. InfiniBand: NDR is 400 Gb/s = 50 GB/s per direction per port (NVIDIA
    # ConnectX-7 / Quantum-2 product pages), with one port per GPU as in a DGX H100; we take
    # ~45 GB/s after protocol overhead and ~10 us per hop end to end (the ~1-2 us wire and
    # switch latency plus the library's network proxy). Good for comparing plans, not for
    # predicting a particular machine.
    @classmethod
    def nvlink_node(cls, gpus: int = 8) -> CostModel:
        """``gpus`` GPUs of one node, all pairs on NVLink.

        >>> CostModel.nvlink_node(8).ranks_per_node
        8
        """
        return cls(intra_node=_NVLINK, inter_node=None, ranks_per_node=gpus,
                   name=f"nvlink_node({gpus})")

    @classmethod
    def infiniband_cluster(cls, ranks_per_node: int = 8) -> CostModel:
        """Nodes of ``ranks_per_node`` GPUs on NVLink, joined by 400 Gb/s InfiniBand.

        >>> CostModel.infiniband_cluster(4).node_of(5)
        1
        """
        return cls(intra_node=_NVLINK, inter_node=_INFINIBAND_NDR,
                   ranks_per_node=ranks_per_node,
                   name=f"infiniband_cluster(ranks_per_node={ranks_per_node})")

    def node_of(self, rank: int) -> int:
        return 0 if self.ranks_per_node is None else rank // self.ranks_per_node

    def link(self, a: int, b: int) -> LinkModel:
        """The link between global ranks ``a`` and ``b``."""
        if self.node_of(a) == self.node_of(b):
            return self.intra_node
        if self.inter_node is None:
            raise ValueError(f"cost model {self.name} has no inter-node link, but ranks {a} "
                             f"and {b} are on nodes {self.node_of(a)} and {self.node_of(b)} "
                             f"(ranks_per_node={self.ranks_per_node}); pass inter_node or "
                             f"use a preset with several nodes")
        return self.inter_node

    def estimate(self, record: CollectiveRecord) -> float:
        """Seconds ``record`` takes: latency hops plus busiest rank's bytes on slowest link."""
        spec = _OPS.get(record.op)
        if spec is None:
            raise ValueError(f"cost model: record #{record.seq} has op {record.op!r}, expected "
                             f"one of {', '.join(_OPS)}")
        links_kind, per_step, extra = spec
        ranks = record.ranks
        n = len(ranks)
        if n <= 1:
            return 0.0
        links = [self.link(a, b) for a, b in _pairs(links_kind, ranks, record.root)]
        latency = max(link.latency_s for link in links)
        bandwidth = min(link.bandwidth_Bps for link in links)
        busiest = max(max(s, r) for s, r in zip(record.bytes_sent, record.bytes_received))
        return (per_step * (n - 1) + extra) * latency + busiest / bandwidth

    def estimate_trace(self, records: Iterable[CollectiveRecord]) -> TraceEstimate:
        """Schedule ``records`` (in ``seq`` order) and total their estimated time.

        A collective starts when every rank of its group is free and occupies all of them
        until it ends: collectives on one rank serialize, disjoint groups overlap.
        """
        free: dict[int, float] = {}
        busy: dict[int, float] = {}
        schedule = []
        for rec in sorted(records, key=lambda r: r.seq):
            start = max((free.get(r, 0.0) for r in rec.ranks), default=0.0)
            duration = self.estimate(rec)
            for r in rec.ranks:
                free[r] = start + duration
                busy[r] = busy.get(r, 0.0) + duration
            schedule.append(ScheduledCollective(rec, start, start + duration))
        return TraceEstimate(
            total_s=max(free.values(), default=0.0),
            per_op=_summarize(schedule),
            schedule=tuple(schedule),
            busy_s=tuple(sorted(busy.items())),
            model=self.name,
        )


_NVLINK = LinkModel(latency_s=3e-6, bandwidth_Bps=150e9)  # Note [preset figures]
_INFINIBAND_NDR = LinkModel(latency_s=10e-6, bandwidth_Bps=45e9)  # Note [preset figures]


def _pairs(kind: str, ranks: Sequence[int], root: int | None) -> list[tuple[int, int]]:
    n = len(ranks)
    if kind == _RING:
        return [(ranks[i], ranks[(i + 1) % n]) for i in range(n)]
    if kind == _ROOT:
        if root is None:
            raise ValueError(f"cost model: a rooted collective on ranks {tuple(ranks)} has "
                             f"root=None, expected its root's group rank")
        return [(ranks[root], r) for r in ranks if r != ranks[root]]
    return [(a, b) for a in ranks for b in ranks if a != b]


@dataclass(frozen=True, slots=True)
class ScheduledCollective:
    record: CollectiveRecord
    start_s: float  # simulated time from the start of the trace
    end_s: float


@dataclass(frozen=True, slots=True)
class OpSummary:
    op: str
    count: int
    seconds: float  # sum of the estimated durations
    bytes: int  # sum of bytes sent over all ranks


def _summarize(schedule: Sequence[ScheduledCollective]) -> tuple[OpSummary, ...]:
    acc: dict[str, tuple[int, float, int]] = {}
    for item in schedule:
        count, seconds, nbytes = acc.get(item.record.op, (0, 0.0, 0))
        acc[item.record.op] = (count + 1, seconds + item.end_s - item.start_s,
                               nbytes + item.record.total_bytes)
    rows = [OpSummary(op, c, s, b) for op, (c, s, b) in acc.items()]
    return tuple(sorted(rows, key=lambda row: (-row.seconds, row.op)))


@dataclass(frozen=True, slots=True)
class TraceEstimate:
    """The simulated schedule of a trace, its makespan and a per-op breakdown."""

    total_s: float  # when the last rank finishes
    per_op: tuple[OpSummary, ...]  # most expensive first
    schedule: tuple[ScheduledCollective, ...]  # in seq order
    busy_s: tuple[tuple[int, float], ...]  # (global rank, seconds in collectives)
    model: str = "custom"

    def __str__(self) -> str:
        total_op_s = sum(row.seconds for row in self.per_op)
        lines = [f"estimated {_fmt_s(self.total_s)} for {len(self.schedule)} collectives "
                 f"on {self.model}",
                 f"{'op':<24}{'count':>7}{'bytes':>12}{'time':>12}{'share':>8}"]
        for row in self.per_op:
            share = row.seconds / total_op_s if total_op_s > 0 else 0.0
            lines.append(f"{row.op:<24}{row.count:>7}{_fmt_bytes(row.bytes):>12}"
                         f"{_fmt_s(row.seconds):>12}{share:>8.1%}")
        return "\n".join(lines)


def _fmt_s(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3f} {unit}"
    return f"{seconds / 1e-6:.3f} us"


def _fmt_bytes(nbytes: int) -> str:
    if nbytes < 1024:
        return f"{nbytes} B"
    value, unit = nbytes / 1024, "KiB"
    for bigger in ("MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{value:.1f} {unit}"
