"""Named steps of the save protocol (Note [commit]) and a per-rank hook called at each, so
tests can crash or stall a rank at every step. A ContextVar: each simulated rank (a thread)
sets its own.

>>> seen = []
>>> with step_hook(seen.append):
...     reached("begin")
>>> seen
['begin']
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator

# in protocol order; the rank-0-only steps are marked
STEPS = ("begin", "dir_made", "partials_reduced", "file_written", "gathered",
         "metadata_written",  # rank 0
         "published",  # rank 0
         "done")

_hook: contextvars.ContextVar[Callable[[str], None] | None] = contextvars.ContextVar(
    "dtensor_checkpoint_hook", default=None)


@contextlib.contextmanager
def step_hook(fn: Callable[[str], None]) -> Iterator[None]:
    """Call ``fn(step)`` on this rank at each step of a save inside the block."""
    token = _hook.set(fn)
    try:
        yield
    finally:
        _hook.reset(token)


def reached(step: str) -> None:
    fn = _hook.get()
    if fn is not None:
        fn(step)
