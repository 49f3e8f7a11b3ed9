"""Where the ranks' calls meet: one slot per collective of a group, one mailbox per receiver.

Only the rank holding the baton (Note [one rank runs at a time]) touches slots and mailboxes,
so they need no lock. The last rank to arrive at a slot checks that every rank issued the same
collective, runs the pure collective function over all inputs, and copies the outputs into
each rank's buffers; the others sleep meanwhile.
"""

from __future__ import annotations

import contextvars
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import torch
import torch.distributed as dist

from simpg.collectives import Traffic
from simpg.errors import CollectiveMismatchError
from simpg.frames import is_library_file
from simpg.records import CollectiveRecord
from simpg.scheduler import Scheduler

# The rank's observer of its own issue and wait points (simpg.steprecorder sets it): its
# ``issued(work)`` runs when the rank's call returns a Work, ``waited(work)`` when a wait on
# it returns. None, the default, costs one lookup per call (Note [issue and wait points]).
comm_observer: contextvars.ContextVar[Any] = contextvars.ContextVar("simpg_comm_observer",
                                                                    default=None)

# where a completed collective's record goes: the traces open when it completes
Sink = Callable[[CollectiveRecord], None]


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """A process group as every member sees it: its c10d name and its global ranks."""

    name: str
    ranks: tuple[int, ...]
    label: str  # "world" or "ranks(0,2)"

    @property
    def size(self) -> int:
        return len(self.ranks)


@dataclass(eq=False, slots=True)
class Call:
    """One rank's side of one collective."""

    op: str
    group: GroupInfo
    group_rank: int
    dtype: torch.dtype | None
    signature: tuple  # what must be equal on every rank of the group
    summary: Callable[[], str]  # e.g. "all_reduce(shape=(4,), ...)"; built only for reports
    payload: Any  # the tensors and options the compute function reads
    site: Site  # the user code that issued it; str() gives file:line
    issued_s: float = field(default_factory=time.perf_counter)

    def describe(self) -> str:
        return f"{self.summary()} on group {self.group.label} at {self.site}"


# what a collective returns once it ran: outputs by group rank, and its traffic, computed only
# when a trace is open
Result = tuple[list[Any], Callable[[], Traffic]]
Compute = Callable[[list[Call]], Result]


class Slot:
    """The k-th collective of one group: ready once every member has arrived and it ran."""

    is_collective = True

    def __init__(self, group: GroupInfo, seq: tuple[int, int]) -> None:
        self.group, self.seq, self.size = group, seq, len(group.ranks)
        self.calls: list[Call | None] = [None] * self.size
        self.arrived = 0
        self.done = False
        self.outputs: list[Any] = []


class Work(dist.Work):
    """A rank's handle on a collective or message; ``wait()`` runs other ranks meanwhile."""

    __slots__ = ("_world", "_call", "_slot", "_unwaited")  # one per call per rank: no dict

    def __init__(self, world: Scheduler, call: Call, slot: Slot | PendingRecv,
                 unwaited: dict[int, Work]) -> None:
        super().__init__()
        self._world, self._call, self._slot, self._unwaited = world, call, slot, unwaited
        unwaited[id(self)] = self  # Note [un-waited work]
        observer = comm_observer.get()  # Note [issue and wait points] in simpg.steprecorder
        if observer is not None:
            observer.issued(self)

    @property
    def is_collective(self) -> bool:  # read by deadlock reports only
        return isinstance(self._slot, Slot)

    def ready(self) -> bool:
        return self._slot.done

    def describe(self) -> str:
        slot = self._slot
        if isinstance(slot, Slot):
            missing = [slot.group.ranks[i] for i, c in enumerate(slot.calls) if c is None]
            return (f"{self._call.describe()} (call #{slot.seq[1]} of the group; "
                    f"waiting for ranks {missing})")
        return self._call.describe()

    def __del__(self) -> None:
        # a completed slot holds every rank's payload and output; this rank's leave it with
        # this rank's Work, not with the last rank to drop its own (Note [peak live bytes])
        slot = self._slot
        if isinstance(slot, Slot) and slot.done:
            i = self._call.group_rank
            slot.calls[i] = None
            if slot.outputs:
                slot.outputs[i] = None

    def wait(self, timeout: Any = None) -> bool:
        self._unwaited.pop(id(self), None)
        if not self._slot.done:
            self._world.wait_until(self)
        self._world.check_failed()  # a mismatch completes the slot without data
        observer = comm_observer.get()
        if observer is not None:
            observer.waited(self)
        return True

    def is_completed(self) -> bool:
        return self._slot.done

    def is_success(self) -> bool:
        return self._slot.done and self._world.failure is None

    def exception(self) -> Any:
        return None

    def result(self) -> list[torch.Tensor]:
        self.wait()
        out = self._slot.outputs[self._call.group_rank] if isinstance(self._slot, Slot) else None
        return [t for t in _flatten(out) if isinstance(t, torch.Tensor)]

    def source_rank(self) -> int:
        self.wait()
        if not isinstance(self._slot, PendingRecv) or self._slot.source is None:
            raise RuntimeError("source_rank() is only defined for a completed receive")
        return self._slot.source

    _source_rank = source_rank

    def get_future(self) -> torch.futures.Future:
        fut: torch.futures.Future = torch.futures.Future()
        fut.set_result(self.result())
        return fut

    def synchronize(self) -> None:
        self.wait()

    def block_current_stream(self) -> None:
        self.wait()


class PendingRecv:
    """A posted receive: done once a matching send delivered into its buffer."""

    is_collective = False

    def __init__(self, src: int | None, tag: int, buffer: torch.Tensor, call: Call) -> None:
        self.src, self.tag, self.buffer, self.call = src, tag, buffer, call
        self.done = False
        self.source: int | None = None


@dataclass
class _Message:
    src: int
    tag: int
    tensor: torch.Tensor
    call: Call


class Rendezvous:
    """All pending collectives and messages of one world.

    ``compute``: how each collective runs (``simpg.ops.COMPUTE``); ``sinks``: where the
    record of each completed collective goes (``simpg.trace``; a trace opened inside a rank
    adds its own while open).
    """

    def __init__(self, world: Scheduler, compute: Mapping[str, Compute],
                 sinks: Iterable[Sink] = ()) -> None:
        self.world = world
        self._compute = compute
        self.sinks: list[Sink] = list(sinks)
        self._slots: dict[tuple[str, tuple[int, int]], Slot] = {}
        self._inbox: dict[tuple[str, int], deque[_Message]] = {}
        self._posted: dict[tuple[str, int], list[PendingRecv]] = {}
        self._group_ranks: dict[str, tuple[int, ...]] = {}
        self.completed = 0
        self.unwaited: dict[int, Work] = {}  # id -> work not waited yet

    def unwaited_works(self) -> list[str]:
        """Each work issued and never waited, as 'rank r: call at file:line'."""
        works = sorted(self.unwaited.values(), key=lambda w: w._call.issued_s)
        return [f"rank {w._call.group.ranks[w._call.group_rank]}: {w._call.describe()}"
                for w in works]

    def never_completed(self) -> list[str]:
        """Collectives, messages and receives left pending when the world ended."""
        out = []
        for slot in self._slots.values():
            missing = [slot.group.ranks[i] for i, c in enumerate(slot.calls) if c is None]
            for i, c in enumerate(slot.calls):
                if c is not None:
                    out.append(f"rank {slot.group.ranks[i]}: {c.describe()} (ranks {missing} "
                               "of the group never issued it)")
        for (_, dst), msgs in self._inbox.items():
            for m in msgs:
                out.append(f"rank {m.call.group.ranks[m.src]}: {m.call.describe()} was never "
                           f"received by group rank {dst}")
        for recvs in self._posted.values():
            for r in recvs:
                out.append(f"rank {r.call.group.ranks[r.call.group_rank]}: "
                           f"{r.call.describe()} never got a message")
        return out

    def clear(self) -> None:
        """Forget pending collectives and messages (at the end of a subtest)."""
        self._slots.clear()
        self._inbox.clear()
        self._posted.clear()
        self.unwaited.clear()

    def register_group(self, group: GroupInfo) -> None:
        known = self._group_ranks.setdefault(group.name, group.ranks)
        if known != group.ranks:
            raise CollectiveMismatchError(
                f"ranks created process group {group.name!r} with different members: "
                f"{list(known)} and {list(group.ranks)}"
            )

    # -- collectives -------------------------------------------------------------------------
    def collective(self, call: Call, seq: tuple[int, int]) -> Work:
        """``seq``: (subtest epoch, index of the call in the group's stream)."""
        key = (call.group.name, seq)
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = Slot(call.group, seq)
        slot.calls[call.group_rank] = call
        slot.arrived += 1
        if slot.arrived == slot.size:
            del self._slots[key]
            self._complete(slot)
        return Work(self.world, call, slot, self.unwaited)

    def _complete(self, slot: Slot) -> None:
        calls: list[Call] = slot.calls  # type: ignore[assignment]
        first = calls[0]
        signature = first.signature
        for c in calls:
            if c.signature != signature:
                self._mismatch(slot, "ranks issued different collectives")
                return
        try:
            outputs, traffic = self._compute[first.op](calls)
        except ValueError as e:  # inputs that disagree across ranks
            self._mismatch(slot, str(e))
            return
        slot.outputs = outputs
        slot.done = True
        self._record(first.op, first.group, calls, traffic)

    def _mismatch(self, slot: Slot, reason: str) -> None:
        lines = [
            f"rank {slot.group.ranks[i]}: {c.describe()}" for i, c in enumerate(slot.calls) if c
        ]
        err = CollectiveMismatchError(
            f"collective #{slot.seq[1]} on group {slot.group.label} does not match across ranks: "
            f"{reason}\n  " + "\n  ".join(lines)
        )
        slot.done = True
        self.world.fail(err, None)

    # -- point to point ----------------------------------------------------------------------
    def send(self, call: Call, dst: int, tag: int, tensor: torch.Tensor) -> Work:
        msg = _Message(call.group_rank, tag, tensor.detach().clone(), call)
        key = (call.group.name, dst)
        posted = self._posted.get(key, [])
        for i, recv in enumerate(posted):
            if recv.tag == tag and recv.src in (None, msg.src):
                del posted[i]
                self._deliver(msg, recv)
                break
        else:
            self._inbox.setdefault(key, deque()).append(msg)
        done = PendingRecv(None, tag, tensor, call)
        done.done = True
        return Work(self.world, call, done, self.unwaited)

    def recv(self, call: Call, src: int | None, tag: int, buffer: torch.Tensor) -> Work:
        recv = PendingRecv(src, tag, buffer, call)
        key = (call.group.name, call.group_rank)
        inbox = self._inbox.get(key, deque())
        for msg in inbox:
            if msg.tag == tag and src in (None, msg.src):
                inbox.remove(msg)
                self._deliver(msg, recv)
                break
        else:
            self._posted.setdefault(key, []).append(recv)
        return Work(self.world, call, recv, self.unwaited)

    def _deliver(self, msg: _Message, recv: PendingRecv) -> None:
        buf = recv.buffer
        if msg.tensor.shape != buf.shape or msg.tensor.dtype != buf.dtype:
            err = CollectiveMismatchError(
                "a message does not fit its receive buffer:\n"
                f"  rank {msg.call.group.ranks[msg.src]}: {msg.call.describe()}\n"
                f"  rank {recv.call.group.ranks[recv.call.group_rank]}: {recv.call.describe()}"
            )
            recv.done = True
            self.world.fail(err, None)
            return
        buf.detach().copy_(msg.tensor)  # Note [hide collective writes from autograd]
        recv.done, recv.source = True, msg.src
        group = msg.call.group
        nbytes = msg.tensor.numel() * msg.tensor.element_size()
        self._record(
            "send",
            GroupInfo(group.name, (group.ranks[msg.src], group.ranks[recv.call.group_rank]),
                      group.label),
            [msg.call, recv.call],
            lambda: ((nbytes, 0), (0, nbytes)),
        )

    # -- trace ---------------------------------------------------------------------------------
    def _record(
        self, op: str, group: GroupInfo, calls: list[Call], traffic: Callable[[], Traffic]
    ) -> None:
        seq = self.completed
        self.completed += 1
        sinks = self.sinks
        if not sinks:
            return
        first = calls[0]
        sent, received = traffic()
        record = CollectiveRecord(
            seq=seq,
            op=op,
            group=group.label,
            ranks=group.ranks,
            dtype=first.dtype,  # type: ignore[arg-type]
            shapes=tuple(_shapes(c.payload) for c in calls),
            bytes_sent=tuple(sent),
            bytes_received=tuple(received),
            reduce_op=_option(first, "reduce_op"),
            root=_option(first, "root"),
            start_s=tuple(c.issued_s for c in calls),
            end_s=time.perf_counter(),
        )
        for sink in list(sinks):
            sink(record)


def _option(call: Call, name: str) -> Any:
    return call.payload.get(name) if isinstance(call.payload, dict) else None


def _flatten(x: Any) -> list[Any]:
    if isinstance(x, (list, tuple)):
        return [y for item in x for y in _flatten(item)]
    return [x]


def _shapes(payload: Any) -> tuple[tuple[int, ...], ...]:
    inputs = payload.get("inputs", payload) if isinstance(payload, dict) else payload
    return tuple(tuple(t.shape) for t in _flatten(inputs) if isinstance(t, torch.Tensor))


# modules between user code and the process group: a call site is the first frame outside them
_SKIP = ("simpg.process_group", "simpg.rendezvous", "simpg.faults", "torch.distributed",
         "torch._ops", "torch.utils", "torch._tensor", "typing_extensions", "contextlib")
_BETWEEN, _LIBRARY, _USER = 0, 1, 2
_code_kind: dict[Any, int] = {}  # code object -> _BETWEEN, _LIBRARY or _USER


class Site:
    """Where user code issued a call: ``str()`` gives ``file:line``, and ``via file:line``
    when a library (a DTensor runtime, say) issued it on the user's behalf.

    Note [lazy call sites]: every call records its site, and reports (deadlocks, mismatches,
    un-waited work, faults) are rare, so the site keeps the frames' code and instruction
    offsets, both read without work, and finds the lines only when a report prints them.
    The frames themselves are not kept: they would hold the caller's locals (tensors) alive,
    and their lines move on as they run.
    """

    __slots__ = ("code", "lasti", "via_code", "via_lasti", "doing")

    def __init__(self, code: Any, lasti: int, via_code: Any = None, via_lasti: int = -1) -> None:
        self.code, self.lasti = code, lasti
        self.via_code, self.via_lasti = via_code, via_lasti
        # what the runtime said it was doing (Note [activity] in dtensor/comm/activity.py)
        activity = sys.modules.get("dtensor.comm.activity")
        self.doing = None if activity is None else activity.CURRENT.get()

    @staticmethod
    def _line(code: Any, lasti: int) -> int | None:
        for start, end, line in code.co_lines():  # what frame.f_lineno looks up
            if start <= lasti < end:
                return line
        return None

    @property
    def lineno(self) -> int | None:
        return None if self.code is None else self._line(self.code, self.lasti)

    def __str__(self) -> str:
        if self.code is None:
            return "<unknown>"
        here = f"{self.code.co_filename}:{self.lineno}"
        if self.via_code is not None:
            here += f" via {self.via_code.co_filename}:{self._line(self.via_code, self.via_lasti)}"
        return here if self.doing is None else f"{here} ({self.doing})"

    def __repr__(self) -> str:
        return f"Site({str(self)!r})"


def _kind(frame: Any) -> int:
    code = frame.f_code
    kind = _code_kind.get(code)
    if kind is None:
        if frame.f_globals.get("__name__", "").startswith(_SKIP):
            kind = _BETWEEN
        else:
            kind = _LIBRARY if is_library_file(code.co_filename) else _USER
        _code_kind[code] = kind
    return kind


def caller_site() -> Site:
    """The user code that issued the call (Note [the user's frame]): the first frame outside
    simpg and torch.distributed, and, when that is library code, the first user frame above
    it, reported with the library frame as ``via``."""
    frame = sys._getframe(1)
    via = None
    while frame is not None:
        kind = _code_kind.get(frame.f_code)
        if kind is None:
            kind = _kind(frame)
        if kind == _USER:
            if via is None:
                return Site(frame.f_code, frame.f_lasti)
            return Site(frame.f_code, frame.f_lasti, via.f_code, via.f_lasti)
        if kind == _LIBRARY and via is None:
            via = frame
        frame = frame.f_back
    if via is not None:  # only library code issued it
        return Site(via.f_code, via.f_lasti)
    return Site(None, -1)
