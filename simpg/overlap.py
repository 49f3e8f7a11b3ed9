"""A step's exposed communication on a modelled device: how much of the collectives' time
the compute does not hide.

Each rank's step is a program-order list of events (recorded by ``simpg.steprecorder``, or
built by hand): :class:`Compute` (one local kernel, priced by a :class:`DeviceModel`),
:class:`Issue` (a collective enters the communication stream) and :class:`Wait` (the compute
stream waits for a collective's result). :func:`schedule` plays them on two streams per rank
and :func:`model_step` prices them first (Note [exposed communication]).

>>> ranks = (0, 1)
>>> events = {r: [Compute("mm", flops=3_000), Issue(0), Compute("mm", flops=2_000), Wait(0)]
...           for r in ranks}
>>> device = DeviceModel("toy", {"float32": 1e9}, hbm_Bps=1e12, kernel_floor_s=0.0)
>>> step = schedule(events, device.op_s, comm_s={0: 1e-6}, ranks_of={0: ranks})
>>> round(step.step_s * 1e6, 6), round(step.exposed_s * 1e6, 6), step.overlap
(5.0, 0.0, 1.0)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from simpg.costmodel import CostModel
from simpg.records import CollectiveRecord

__all__ = ["Compute", "Issue", "Wait", "Use", "Event", "WAIT_POINTS", "RankTimeline",
           "DeviceModel", "DEVICES", "interconnect", "INTERCONNECTS", "RankStep",
           "StepEstimate", "schedule", "model_step", "summary"]

# Note [exposed communication]
# What a step would take on a GPU-like device, from what each rank ran here. Per rank, two
# in-order streams, as NCCL and CUDA have them:
# - the compute stream runs the rank's local kernels (every aten op a rank ran outside
#   collectives) back to back. The CPU is assumed ahead of the device, as on CUDA when the
#   host launches faster than the kernels run: the stream never waits for the host.
# - the communication stream runs the rank's collectives in issue order. A collective starts
#   when (a) this stream is free on every participating rank, (b) its inputs are ready: the
#   compute stream has run every kernel issued before it on that rank, and (c) every
#   participating rank has issued it. It lasts what ``simpg.CostModel.estimate`` says, on
#   every participant.
# - a Wait (``work.wait()``, a synchronous collective returning, funcol's ``wait_tensor``)
#   makes the compute stream wait for the collective's end; the host does not wait.
# Exposed communication is the time the compute stream spends waiting: at Waits, plus the
# communication still running when the last kernel ends (the step ends when both streams
# have drained). So per rank: step = compute + exposed. A rank that waits for a slower peer's
# collective counts that skew as exposed too: it is waiting on communication. The serial
# communication time is the sum of the rank's collectives' durations; the overlap fraction
# is the share of it that compute hid, max(0, 1 - exposed / serial).
# Limits: one communication stream per rank (NCCL gives each process group its own, so a dp
# and a tp collective may overlap there; here they queue); a collective's link bandwidth is
# its alone (concurrent collectives of other groups do not slow it); kernels do not slow
# down while communication runs; ``.item()`` and other host syncs are not modelled as syncs.
# A wait is where the program waits: a library that makes a side stream wait on CUDA (torch's
# FSDP2 waits for its all-gathers on its all-gather stream, the compute stream on an event
# later) has no side stream on CPU, so its waits count on the compute stream (an upper
# bound on its exposed communication). The other bound: ``waits="first_use"`` ignores the
# Waits and stalls the compute stream only before the first kernel that touches one of the
# collective's tensors (a Use event), as a program whose every wait is on a side stream with
# an event before the consumer would; the truth for such a library lies between the two.
# In that mode a collective's inputs are ready when the last kernel that touched its tensors
# ends (Issue.after), not when every kernel issued before it has: a side-stream collective
# waits for its producer's event only.


@dataclass(frozen=True, slots=True)
class Compute:
    """One local kernel: its FLOPs (matmul, conv, attention; 0 for the rest) and the bytes
    it reads and writes. ``dtype`` picks the device's FLOP rate.

    >>> Compute("mm", flops=2 * 64**3, nbytes=3 * 64 * 64 * 4)
    Compute(op='mm', flops=524288, nbytes=49152, dtype='float32')
    """

    op: str
    flops: int = 0
    nbytes: int = 0
    dtype: str = "float32"


@dataclass(frozen=True, slots=True)
class Issue:
    """The rank issues collective ``collective`` (a ``CollectiveRecord.seq``). ``after``: the
    last kernel before it that touched one of its tensors, counted among the rank's Compute
    events from 0 (-1: none), for ``waits="first_use"``."""

    collective: int
    after: int = -1


@dataclass(frozen=True, slots=True)
class Wait:
    """The rank's compute stream waits for collective ``collective`` to end."""

    collective: int


@dataclass(frozen=True, slots=True)
class Use:
    """The first kernel after collective ``collective`` was issued that reads or writes one of
    its tensors comes next (the point a stream-perfect program would wait at)."""

    collective: int


Event = Compute | Issue | Wait | Use
WAIT_POINTS = ("program", "first_use")  # where the compute stream waits: Wait or Use events


@dataclass(frozen=True, slots=True)
class RankTimeline:
    """One rank's recorded step: its events in program order and the records of the
    collectives it took part in (their seq is what Issue and Wait name)."""

    rank: int
    events: tuple[Event, ...]
    records: tuple[CollectiveRecord, ...]


@dataclass(frozen=True, slots=True)
class DeviceModel:
    """A device's throughput: kernel time is the roofline ``max(flops / peak(dtype),
    nbytes / hbm_Bps)``, at least ``kernel_floor_s`` for any kernel that moves data.

    >>> DEVICES["h100"].op_s(Compute("mm", flops=10**12, nbytes=0, dtype="bfloat16"))
    0.0014285714285714286
    """

    name: str
    peak_flops: Mapping[str, float]  # dtype name -> FLOP/s; "float32" is the fallback
    hbm_Bps: float
    kernel_floor_s: float

    def __post_init__(self) -> None:
        if "float32" not in self.peak_flops:
            raise ValueError(f"DeviceModel {self.name!r}: peak_flops has dtypes "
                             f"{sorted(self.peak_flops)}, expected a 'float32' entry (the "
                             f"rate for dtypes it does not name)")
        bad = {k: v for k, v in self.peak_flops.items() if not v > 0}
        if bad or not self.hbm_Bps > 0 or not self.kernel_floor_s >= 0:
            raise ValueError(f"DeviceModel {self.name!r}: expected FLOP rates > 0 (got "
                             f"{bad or 'ok'}), hbm_Bps > 0 (got {self.hbm_Bps}) and "
                             f"kernel_floor_s >= 0 (got {self.kernel_floor_s})")

    def op_s(self, op: Compute) -> float:
        if op.flops == 0 and op.nbytes == 0:
            return 0.0  # a view or an allocation: no kernel
        peak = self.peak_flops.get(op.dtype, self.peak_flops["float32"])
        return max(op.flops / peak, op.nbytes / self.hbm_Bps, self.kernel_floor_s)


# Note [device presets]: an H100 SXM, from NVIDIA's datasheet: 67 TFLOP/s FP32 (no tensor
# cores; PyTorch's default fp32 matmul does not use TF32), 989 TFLOP/s dense BF16/FP16 on
# tensor cores, 3.35 TB/s HBM3. We take 70% of the FLOP peaks (what large matmuls reach) and
# 80% of HBM (what a streaming elementwise kernel reaches): 47 / 700 TFLOP/s and 2.7 TB/s.
# A kernel takes at least ~2 us on the device (launch gap and tail of a tiny grid), which
# dominates small models: the figures compare plans, they do not predict a machine.
DEVICES: dict[str, DeviceModel] = {
    "h100": DeviceModel("h100", {"float32": 47e12, "bfloat16": 700e12, "float16": 700e12},
                        hbm_Bps=2.7e12, kernel_floor_s=2e-6),
}


INTERCONNECTS = ("nvlink-node", "ib-cluster")


def interconnect(name: str, ranks_per_node: int = 8, gpus: int = 8) -> CostModel:
    """The named network preset: ``"nvlink-node"`` (``gpus`` GPUs, 8 by default, on one
    NVLink domain) or ``"ib-cluster"``
    (nodes of ``ranks_per_node`` GPUs on NVLink, 400 Gb/s InfiniBand between them); the
    figures are ``simpg.CostModel``'s (Note [preset figures] in simpg.costmodel).

    >>> interconnect("ib-cluster", ranks_per_node=2).name
    'infiniband_cluster(ranks_per_node=2)'
    """
    if name == "nvlink-node":
        return CostModel.nvlink_node(gpus)
    if name == "ib-cluster":
        return CostModel.infiniband_cluster(ranks_per_node=ranks_per_node)
    raise ValueError(f"interconnect {name!r}: expected one of {', '.join(INTERCONNECTS)}")


@dataclass(frozen=True, slots=True)
class RankStep:
    """One rank's modelled step (seconds); ``step_s == compute_s + exposed_s``."""

    rank: int
    step_s: float
    compute_s: float  # kernels on the compute stream
    comm_s: float  # serial sum of the rank's collectives
    exposed_s: float  # compute stream waiting on communication

    @property
    def overlap(self) -> float:
        """Share of the serial communication time that compute hid."""
        return max(0.0, 1.0 - self.exposed_s / self.comm_s) if self.comm_s > 0 else 0.0


@dataclass(frozen=True, slots=True)
class StepEstimate:
    """Every rank's modelled step; the summary figures are the slowest rank's."""

    ranks: tuple[RankStep, ...]
    collectives: Mapping[int, tuple[float, float]] = field(default_factory=dict)  # seq->span
    ranks_of: Mapping[int, tuple[int, ...]] = field(default_factory=dict)  # seq -> ranks
    # the compute streams: (rank, what, start_s, end_s), kernels and waits ("wait #seq")
    compute_spans: tuple[tuple[int, str, float, float], ...] = ()

    @property
    def slowest(self) -> RankStep:
        return max(self.ranks, key=lambda r: (r.step_s, -r.rank))

    @property
    def step_s(self) -> float:
        return self.slowest.step_s

    @property
    def compute_s(self) -> float:
        return self.slowest.compute_s

    @property
    def comm_s(self) -> float:
        return self.slowest.comm_s

    @property
    def exposed_s(self) -> float:
        return self.slowest.exposed_s

    @property
    def overlap(self) -> float:
        return self.slowest.overlap

    def __str__(self) -> str:
        s = self.slowest
        return (f"step {s.step_s * 1e6:.1f} us: compute {s.compute_s * 1e6:.1f} + exposed "
                f"{s.exposed_s * 1e6:.1f} (comm {s.comm_s * 1e6:.1f} serial, {s.overlap:.0%} "
                f"hidden; rank {s.rank})")


@dataclass(slots=True)
class _Stream:
    """A rank's position in its events and its two streams' clocks."""

    events: Sequence[Event]
    pc: int = 0
    compute_t: float = 0.0  # when the compute stream is next free
    comm_t: float = 0.0  # when the communication stream is next free
    compute_s: float = 0.0
    comm_s: float = 0.0
    exposed_s: float = 0.0
    in_flight: int | None = None  # the last issued collective not yet scheduled
    spans: list[tuple[int, str, float, float]] = field(default_factory=list)
    kernel_end: list[float] = field(default_factory=list)  # per Compute event, in order


def schedule(events: Mapping[int, Sequence[Event]], compute_s: Callable[[Compute], float],
             comm_s: Mapping[int, float], ranks_of: Mapping[int, Sequence[int]],
             waits: str = "program", p2p: frozenset[int] = frozenset()) -> StepEstimate:
    """Play each rank's ``events`` on a compute and a communication stream (Note [exposed
    communication]). ``comm_s`` and ``ranks_of`` give each collective's duration and its
    participating global ranks; ``waits`` picks the events the compute stream waits at:
    "program" (Wait) or "first_use" (Use); ``p2p``: the collectives that are point-to-point
    transfers (Note [point-to-point in the model]). Deterministic: ranks advance in rank
    order, in rounds.

    >>> s = schedule({0: [Issue(7), Wait(7)]}, lambda op: 0.0, {7: 2.0}, {7: (0,)})
    >>> (s.step_s, s.exposed_s, s.overlap)
    (2.0, 2.0, 0.0)
    """
    if waits not in WAIT_POINTS:
        raise ValueError(f"waits={waits!r}: expected one of {', '.join(WAIT_POINTS)}")
    skipped = Use if waits == "program" else Wait
    streams = {r: _Stream([e for e in evs if not isinstance(e, skipped)])
               for r, evs in sorted(events.items())}
    for seq, ranks in ranks_of.items():
        if seq not in comm_s:
            raise ValueError(f"collective {seq} has participants {tuple(ranks)} but no "
                             f"duration in comm_s")
        missing = [r for r in ranks if r not in streams]
        if missing:
            raise ValueError(f"collective {seq} involves ranks {tuple(ranks)}, but ranks "
                             f"{missing} have no events: expected every participant's events")
    ready: dict[int, dict[int, float]] = {}  # seq -> rank -> when its inputs are ready
    spans: dict[int, tuple[float, float]] = {}
    while any(s.pc < len(s.events) for s in streams.values()):
        progressed = False
        for rank, stream in streams.items():
            progressed |= _advance(rank, stream, streams, compute_s, comm_s, ranks_of,
                                   ready, spans, waits == "first_use", p2p)
        if not progressed:
            raise ValueError("the modelled streams cannot progress: "
                             + _stuck(streams, ranks_of, ready))
    steps = []
    for rank, s in streams.items():
        if s.in_flight is not None:
            raise ValueError(f"rank {rank}: collective {s.in_flight} was issued but never "
                             f"issued by all of {tuple(ranks_of[s.in_flight])}")
        end = max(s.compute_t, s.comm_t)
        steps.append(RankStep(rank, end, s.compute_s, s.comm_s, end - s.compute_s))
    return StepEstimate(tuple(steps), spans, {k: tuple(v) for k, v in ranks_of.items()},
                        tuple(x for st in streams.values() for x in st.spans))


def _advance(rank: int, s: _Stream, streams: Mapping[int, _Stream],
             compute_s: Callable[[Compute], float], comm_s: Mapping[int, float],
             ranks_of: Mapping[int, Sequence[int]], ready: dict[int, dict[int, float]],
             spans: dict[int, tuple[float, float]], by_data: bool,
             p2p: frozenset[int] = frozenset()) -> bool:
    """Run ``rank``'s events until one must wait for another rank; True if any ran."""
    start_pc = s.pc
    while s.pc < len(s.events):
        event = s.events[s.pc]
        if isinstance(event, Compute):
            duration = compute_s(event)
            if duration > 0:
                s.spans.append((rank, event.op, s.compute_t, s.compute_t + duration))
            s.compute_t += duration
            s.compute_s += duration
            s.kernel_end.append(s.compute_t)
        elif isinstance(event, Issue):
            seq = event.collective
            if seq not in ranks_of or rank not in ranks_of[seq]:
                raise ValueError(f"rank {rank} issues collective {seq}, whose participants "
                                 f"are {tuple(ranks_of.get(seq, ()))}")
            if s.in_flight is not None and seq not in p2p:
                break  # the communication stream is in order: the previous one first
            if rank in ready.setdefault(seq, {}):
                raise ValueError(f"rank {rank} issues collective {seq} twice")
            if not by_data:
                ready[seq][rank] = s.compute_t  # inputs: every kernel issued before it
            elif event.after < len(s.kernel_end):  # inputs: the kernel that last touched them
                ready[seq][rank] = s.kernel_end[event.after] if event.after >= 0 else 0.0
            else:
                raise ValueError(f"rank {rank}: collective {seq} is issued after kernel "
                                 f"{event.after}, but only {len(s.kernel_end)} ran before it")
            if seq in p2p:  # Note [point-to-point in the model]
                if len(ready[seq]) == len(ranks_of[seq]):
                    _start_p2p(seq, streams, comm_s[seq], ranks_of[seq], ready, spans)
                s.pc += 1
                continue
            s.in_flight = seq
            if len(ready[seq]) == len(ranks_of[seq]):
                _start(seq, streams, comm_s[seq], ranks_of[seq], ready, spans)
        elif isinstance(event, (Wait, Use)):
            span = spans.get(event.collective)
            if span is None:
                if event.collective not in ready or rank not in ready[event.collective]:
                    raise ValueError(f"rank {rank} waits for collective {event.collective} "
                                     f"before issuing it")
                break  # not started: some participant has not issued it yet
            if span[1] > s.compute_t:
                s.spans.append((rank, f"wait #{event.collective}", s.compute_t, span[1]))
                s.compute_t = span[1]
        else:
            raise TypeError(f"rank {rank}: event {event!r} is not a Compute, Issue, Wait "
                            f"or Use")
        s.pc += 1
    return s.pc != start_pc


def _start(seq: int, streams: Mapping[int, _Stream], duration: float,
           ranks: Sequence[int], ready: dict[int, dict[int, float]],
           spans: dict[int, tuple[float, float]]) -> None:
    start = max(max(ready[seq][r], streams[r].comm_t) for r in ranks)
    spans[seq] = (start, start + duration)
    for r in dict.fromkeys(ranks):  # a rank sending to itself is one participant
        streams[r].comm_t = start + duration
        streams[r].comm_s += duration
        streams[r].in_flight = None


# Note [point-to-point in the model]
# A send/recv pair (a pipeline stage's activations and gradients) does not queue on the
# in-order communication stream: NCCL runs point-to-point transfers on their own stream per
# peer, and stages send to and receive from different peers in orders no single stream could
# keep. A transfer starts once both ends have issued it and the sender's inputs are ready,
# and lasts what the cost model says; it counts in both ranks' serial communication time.
def _start_p2p(seq: int, streams: Mapping[int, _Stream], duration: float,
               ranks: Sequence[int], ready: dict[int, dict[int, float]],
               spans: dict[int, tuple[float, float]]) -> None:
    start = max(ready[seq][r] for r in ranks)
    spans[seq] = (start, start + duration)
    for r in dict.fromkeys(ranks):
        streams[r].comm_s += duration
        streams[r].comm_t = max(streams[r].comm_t, start + duration)


def _stuck(streams: Mapping[int, _Stream], ranks_of: Mapping[int, Sequence[int]],
           ready: dict[int, dict[int, float]]) -> str:
    lines = []
    for rank, s in streams.items():
        if s.pc < len(s.events):
            seq = s.in_flight
            waiting = ([r for r in ranks_of[seq] if r not in ready.get(seq, {})]
                       if seq is not None else [])
            lines.append(f"rank {rank} at event {s.pc} ({s.events[s.pc]!r}), collective "
                         f"{seq} in flight waiting for ranks {waiting}")
    return "; ".join(lines) + (" (expected every rank to issue shared collectives in the "
                               "same order on its one communication stream)")


def model_step(timelines: Sequence[RankTimeline], device: DeviceModel,
               network: CostModel, waits: str = "program") -> StepEstimate:
    """Price recorded timelines (kernels by ``device``, collectives by ``network``) and
    schedule them (``waits`` as in :func:`schedule`). Every participant of every collective
    must be among ``timelines``.

    >>> import torch
    >>> rec = CollectiveRecord(seq=3, op="all_reduce", group="world", ranks=(0, 1),
    ...                        dtype=torch.float32, shapes=(((1,),), ((1,),)),
    ...                        bytes_sent=(0, 0), bytes_received=(0, 0))
    >>> tls = [RankTimeline(r, (Issue(3), Wait(3)), (rec,)) for r in (0, 1)]
    >>> round(model_step(tls, DEVICES["h100"], interconnect("nvlink-node")).exposed_s * 1e6, 6)
    6.0
    """
    records: dict[int, CollectiveRecord] = {}
    for tl in timelines:
        for rec in tl.records:
            records.setdefault(rec.seq, rec)
    durations = {seq: network.estimate(rec) for seq, rec in records.items()}
    ranks_of = {seq: rec.ranks for seq, rec in records.items()}
    p2p = frozenset(seq for seq, rec in records.items() if rec.op == "send")
    return schedule({tl.rank: tl.events for tl in timelines}, device.op_s, durations, ranks_of,
                    waits, p2p)


def summary(timelines: Sequence[RankTimeline], ranks_per_node: int,
            device: str = "h100") -> str:
    """One line per network preset: the recorded step modelled on ``device`` (what the main
    job prints). ``ranks_per_node`` places ranks for "ib-cluster".

    >>> import torch
    >>> rec = CollectiveRecord(seq=0, op="all_reduce", group="world", ranks=(0, 1),
    ...                        dtype=torch.float32, shapes=(((1,),), ((1,),)),
    ...                        bytes_sent=(0, 0), bytes_received=(0, 0))
    >>> tls = [RankTimeline(r, (Issue(0), Wait(0)), (rec,)) for r in (0, 1)]
    >>> print(summary(tls, ranks_per_node=1))
    h100 nvlink-node: step 6.0 us: compute 0.0 + exposed 6.0 (comm 6.0 serial, 0% hidden; rank 0)
    h100 ib-cluster: step 20.0 us: compute 0.0 + exposed 20.0 (comm 20.0 serial, 0% hidden; rank 0)
    """
    gpus = max(8, len(timelines))  # a world past 8 ranks: one NVLink domain of them all
    return "\n".join(
        f"{device} {preset}: "
        f"{model_step(timelines, DEVICES[device], interconnect(preset, ranks_per_node, gpus))}"
        for preset in INTERCONNECTS)
