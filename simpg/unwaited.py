"""What a world leaves behind when it ends: work never waited, collectives never completed,
messages never received.

Note [un-waited work]
A real backend runs ``async_op=True`` collectives in the background: until ``wait()``
returns, the tensors may still be written, so a rank that reads them early reads garbage, and
ranks end up with different values. simpg completes a collective when its last rank arrives,
so the same program reads complete data on some ranks and stale data on others, depending on
the schedule. A program that never waits is wrong on every backend; simpg cannot see each
read, so it reports at the end of the world: a warning (``UnwaitedWorkWarning``) naming each
call and its call site, or an ``UnwaitedWorkError`` under ``simpg.run(..., strict_async=True)``.
Work that could never complete (a collective some ranks of its group never issued, a message
no rank received, a receive no rank sent to) is a ``DeadlockError`` in every mode: on a real
backend it hangs.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from simpg.errors import DeadlockError, UnwaitedWorkError, UnwaitedWorkWarning

if TYPE_CHECKING:
    from simpg.rendezvous import Rendezvous


def check_unwaited(rendezvous: Rendezvous, strict: bool) -> None:
    """Raise or warn about what the ended world left behind (Note [un-waited work])."""
    never = rendezvous.never_completed()
    if never:
        raise DeadlockError(
            f"the world ended with {len(never)} operation(s) that can never complete (a real "
            "backend would hang on them):\n  " + "\n  ".join(never))
    unwaited = rendezvous.unwaited_works()
    if not unwaited:
        return
    message = (f"{len(unwaited)} collective(s) issued with async_op=True were never waited: "
               "without wait() a real backend may still be writing the tensors when they are "
               "read\n  " + "\n  ".join(unwaited))
    if strict:
        raise UnwaitedWorkError(message)
    warnings.warn(message, UnwaitedWorkWarning, stacklevel=3)
