"""The asynchronous save a rank has in flight, if any (Note [async save] in background.py).

One per rank: a ContextVar, so each simulated rank (a thread) has its own; in a real job,
the process's. Every save, synchronous or not, settles it first.

>>> settle_previous()  # nothing in flight: returns at once
"""

from __future__ import annotations

import contextvars
from concurrent.futures import Future

from dtensor.checkpoint.errors import SaveFailedError

_in_flight: contextvars.ContextVar[Future | None] = contextvars.ContextVar(
    "dtensor_checkpoint_in_flight", default=None)


def track(future: Future) -> None:
    """Make ``future`` this rank's save in flight (the previous one is settled already)."""
    _in_flight.set(future)


def settle_previous() -> None:
    """Wait for this rank's asynchronous save in flight; if it failed, raise its failure
    (once: the save after this one starts normally). Every rank sees the same outcome
    (rank 0's verdict), so every rank raises here or none does."""
    future = _in_flight.get()
    if future is None:
        return
    _in_flight.set(None)
    error = future.exception()
    if error is not None:
        raise SaveFailedError(f"the previous asynchronous save failed, so this save did not "
                              f"start (call it again to save): {error}") from error
