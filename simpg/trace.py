"""``simpg.trace()``: record every collective issued inside a block."""

from __future__ import annotations

import contextvars
import threading
from collections import Counter
from types import TracebackType
from typing import Any, Callable

from simpg.records import CollectiveRecord
from simpg.world import World, rank_context

_open: contextvars.ContextVar[tuple[Trace, ...]] = contextvars.ContextVar("simpg_traces",
                                                                         default=())


class Trace:
    """The collectives completed while the block was open, in completion order.

    Opened around ``simpg.run`` it sees every rank; opened inside a rank it sees the
    collectives that rank takes part in.

    >>> import torch, torch.distributed as dist, simpg
    >>> with simpg.trace() as t:
    ...     _ = simpg.run(lambda: dist.all_reduce(torch.ones(256)), 4)
    >>> [(r.op, r.bytes_received) for r in t.records]
    [('all_reduce', (1536, 1536, 1536, 1536))]
    """

    def __init__(self) -> None:
        self.records: list[CollectiveRecord] = []
        self._lock = threading.Lock()
        self._token: contextvars.Token | None = None
        self._world_sink: tuple[World, Callable[[CollectiveRecord], None]] | None = None

    def _add(self, record: CollectiveRecord) -> None:
        with self._lock:
            self.records.append(record)

    def __enter__(self) -> Trace:
        self._token = _open.set(_open.get() + (self,))
        ctx = rank_context.get()
        if ctx is not None:
            world, rank = ctx

            def sink(record: CollectiveRecord) -> None:
                if rank in record.ranks:
                    self._add(record)

            world.rendezvous.sinks.append(sink)  # a rank's trace hooks into its world
            self._world_sink = (world, sink)
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._token is not None:
            _open.reset(self._token)
        if self._world_sink is not None:
            world, sink = self._world_sink
            world.rendezvous.sinks.remove(sink)

    # -- summaries -----------------------------------------------------------------------------
    def count(self) -> Counter[str]:
        return Counter(r.op for r in self.records)

    def bytes_received(self) -> dict[int, int]:
        """Total bytes each global rank received."""
        totals: dict[int, int] = {}
        for r in self.records:
            for rank, b in zip(r.ranks, r.bytes_received):
                totals[rank] = totals.get(rank, 0) + b
        return totals

    def estimate(self, cost_model: Any) -> Any:
        """Estimated time of the traced collectives under a ``simpg.CostModel``."""
        return cost_model.estimate_trace(self.records)

    def write_chrome_trace(self, path: str, cost_model: Any = None) -> None:
        from simpg.timeline import write_chrome_trace

        write_chrome_trace(self.records, path, cost_model=cost_model)

    def __str__(self) -> str:
        lines = [f"{'#':>4} {'op':<24} {'group':<16} {'dtype':<16} {'recv bytes/rank':>16}"]
        for r in self.records:
            lines.append(f"{r.seq:>4} {r.op:<24} {r.group:<16} {str(r.dtype):<16} "
                         f"{max(r.bytes_received, default=0):>16}")
        return "\n".join(lines)


def trace() -> Trace:
    """Record the collectives issued inside a ``with`` block; see :class:`Trace`.

    >>> import torch, torch.distributed as dist, simpg
    >>> def body():
    ...     with simpg.trace() as t:  # inside a rank: the collectives it takes part in
    ...         dist.all_reduce(torch.ones(2))
    ...         dist.broadcast(torch.ones(2), src=0)
    ...     return [r.op for r in t.records]
    >>> simpg.run(body, 2)
    [['all_reduce', 'broadcast'], ['all_reduce', 'broadcast']]
    """
    return Trace()


def active_sinks() -> list[Callable[[CollectiveRecord], None]]:
    """The sinks of the traces open in the calling context (``simpg.run`` hands them over)."""
    return [t._add for t in _open.get()]
