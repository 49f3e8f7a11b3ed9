"""What the runtime is doing on this thread, for reports that name a collective's call site.

Note [activity]
A collective issued deep inside the runtime (a pipeline stage's receive, say) is reported by
simpg with the user's line and the library line between; neither says which stage or
micro-batch it was for. The runtime names that here (``doing("stage 1: backward of
micro-batch 0 of 2")``) and simpg, where it is imported, adds the innermost name to the call
site it records. A context variable: each thread (each simulated rank) has its own, and it
costs one ``set`` and ``reset`` per labelled block, nothing per collective off simpg.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

CURRENT: ContextVar[str | None] = ContextVar("dtensor_activity", default=None)


@contextlib.contextmanager
def doing(what: str) -> Iterator[None]:
    """Name what this thread does inside the block (Note [activity]).

    >>> with doing("stage 0: forward of micro-batch 1 of 2"):
    ...     CURRENT.get()
    'stage 0: forward of micro-batch 1 of 2'
    >>> CURRENT.get() is None
    True
    """
    token = CURRENT.set(what)
    try:
        yield
    finally:
        CURRENT.reset(token)
