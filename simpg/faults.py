"""Fault injection: make a chosen rank raise, or stall, at its k-th collective."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from simpg.scheduler import Scheduler


@dataclass(frozen=True)
class RaiseAt:
    """Rank ``rank`` raises ``error`` when it issues its ``call``-th collective (from 1).

    >>> import simpg
    >>> simpg.run(lambda: None, 2, faults=[simpg.RaiseAt(rank=1, call=1)])  # no call: no fault
    [None, None]
    """

    rank: int
    call: int
    error: BaseException = field(default_factory=lambda: RuntimeError("fault injected by simpg"))


@dataclass(frozen=True)
class StallAt:
    """Rank ``rank`` hangs at its ``call``-th collective, as a rank whose GPU locked up."""

    rank: int
    call: int


Fault = RaiseAt | StallAt


class _Stalled:
    is_collective = False

    def __init__(self, what: str) -> None:
        self._what = what

    def ready(self) -> bool:
        return False

    def describe(self) -> str:
        return self._what


def check_faults(faults: tuple[Fault, ...] | list[Fault],
                 world_size: int) -> dict[int, list[Fault]]:
    by_rank: dict[int, list[Fault]] = {}
    for f in faults:
        if not isinstance(f, (RaiseAt, StallAt)):
            raise TypeError(f"faults: expected RaiseAt or StallAt, got {f!r}")
        if not 0 <= f.rank < world_size:
            raise ValueError(f"{f!r}: rank must be in [0, {world_size - 1}]")
        if f.call < 1:
            raise ValueError(f"{f!r}: call counts collectives from 1, got {f.call}")
        by_rank.setdefault(f.rank, []).append(f)
    return by_rank


def apply_fault(world: Scheduler, faults: Mapping[int, Sequence[Fault]], rank: int, op: str,
                site: object) -> None:
    """Count the collective that ``rank`` (the calling one) issues and fire a fault planned
    for it in ``faults`` (the world's, by rank). A world without faults only counts: callers
    on the hot path check ``world.faults`` first and call ``world.count_call`` themselves
    (Note [lean issue])."""
    k = world.count_call(rank)
    if not faults:
        return
    for fault in faults.get(rank, ()):
        if fault.call != k:
            continue
        if isinstance(fault, RaiseAt):
            error = copy.copy(fault.error)  # a fresh instance each run: notes do not pile up
            error.__notes__ = list(getattr(fault.error, "__notes__", ()))
            error.add_note(f"[simpg] fault injected at call #{k} of rank "
                           f"{rank}: {op} at {site}")
            raise error
        world.wait_until(_Stalled(f"{op} at {site}: stalled by fault injection (call #{k})"))
