"""A simulated world, built whole: its scheduler and every collaborator its ranks' calls meet.

Note [a world built whole]
``World(...)`` takes every collaborator at construction, typed, and nothing assigns them
afterwards: the rendezvous (built here over ``simpg.ops.COMPUTE``, with the trace sinks open
when the world starts), the capabilities the groups declare (Note [behaving as gloo]), the
faults to inject, and whether the ranks' threads are simpg's own to interrupt
(``interrupt_stuck``). The scheduling itself lives in ``simpg.scheduler``, which knows nothing
of collectives, so the modules between the two (the rendezvous, the fault injection) import
the scheduler and the world imports them: no import runs upward.

>>> from simpg.capabilities import PROFILES
>>> from simpg.faults import RaiseAt
>>> world = World(2, capabilities=PROFILES["gloo"], faults=[RaiseAt(rank=1, call=3)])
>>> world.size, world.capabilities.name, world.faults
(2, 'gloo', {1: [RaiseAt(rank=1, call=3, error=RuntimeError('fault injected by simpg'))]})
"""

from __future__ import annotations

import contextvars
from typing import Any, Iterable, Sequence

import torch

from simpg.capabilities import Capabilities
from simpg.faults import Fault, check_faults
from simpg.ops import COMPUTE
from simpg.rendezvous import Rendezvous, Sink
from simpg.scheduler import Scheduler

# (world, global rank) of the rank running in this context; set by simpg.run or on joining
rank_context: contextvars.ContextVar[tuple[World, int] | None] = contextvars.ContextVar(
    "simpg_rank", default=None
)


class World(Scheduler):
    """One simulated world: a ``Scheduler`` with its rendezvous, capabilities and faults.

    ``faults`` are checked against ``size`` here (``simpg.faults.check_faults``) and kept by
    rank; ``trace_sinks`` receive the record of every collective the world completes.
    """

    def __init__(
        self,
        size: int,
        *,
        capabilities: Capabilities,
        faults: Sequence[Fault] = (),
        trace_sinks: Iterable[Sink] = (),
        interrupt_stuck: bool = False,
        timeout: float = 60.0,
        schedule_seed: int | None = None,
        members_ready: bool = False,
        rng_state: torch.Tensor | None = None,
        switches: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(size, timeout=timeout, schedule_seed=schedule_seed,
                         members_ready=members_ready, rng_state=rng_state, switches=switches,
                         interrupt_stuck=interrupt_stuck)
        if not isinstance(capabilities, Capabilities):
            raise TypeError(f"capabilities must be a simpg Capabilities profile (see "
                            f"simpg.capabilities.PROFILES), got {capabilities!r}")
        self.capabilities = capabilities
        self.faults: dict[int, list[Fault]] = check_faults(tuple(faults), size)
        self.rendezvous = Rendezvous(self, COMPUTE, trace_sinks)
        # torch's DTensor sharding decisions, made once for every rank (simpg.propagation_share)
        self.propagation_share: dict[Any, Any] = {}

    def _open_gate(self) -> None:
        super()._open_gate()
        self.rendezvous.clear()  # an aborted subtest's messages must not reach the next one
