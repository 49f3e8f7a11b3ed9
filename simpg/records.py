"""One record per completed collective: what the trace, the cost model and the timeline read."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class CollectiveRecord:
    """A collective as every rank of its group issued it.

    Per-rank tuples are indexed by the rank's position in ``ranks`` (its group rank).
    ``bytes_sent`` / ``bytes_received`` follow the usual ring algorithms (see
    ``simpg.collectives.traffic``); a point-to-point message is a record with two ranks.
    """

    seq: int  # completion order within the world, from 0
    op: str  # "all_reduce", "all_gather", "send", ...
    group: str  # the group's name, e.g. "world" or "ranks(0,2)"
    ranks: tuple[int, ...]  # global ranks of the group, in group-rank order
    dtype: torch.dtype
    shapes: tuple[tuple[tuple[int, ...], ...], ...]  # per rank: the shapes of its input tensors
    bytes_sent: tuple[int, ...]
    bytes_received: tuple[int, ...]
    reduce_op: str | None = None  # "sum", "avg", ... for reductions
    root: int | None = None  # group rank of the root for broadcast/reduce/gather/scatter
    start_s: tuple[float, ...] = ()  # per rank: wall time (perf_counter) when it was issued
    end_s: float = 0.0  # wall time when the data moved

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes_sent)
