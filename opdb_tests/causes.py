"""The kind of a failure (its *cause*): a short, stable string with no numbers in it, which
``expected_failures.py`` lists per (variant, tier) and the tests compare exactly.

Causes read like ``no rule: aten.rsub.Tensor``, ``no strategy: aten.digamma_.default``,
``RuntimeError in aten.mm.default``, ``wrong values``, ``unsound strategy: aten.cumsum.default``.
The human part (max error, message, traceback) goes in the failure's reason, which is
rewritten whenever the list is regenerated.

>>> of_exception(ValueError("x"))
'ValueError outside dispatch'
"""

from __future__ import annotations

import traceback
from typing import Any

import torch

# end-to-end mismatches (checks._end_to_end): fixed strings, the reason carries the numbers
WRONG_VALUES = "wrong values"
WRONG_GRADIENT = "wrong gradient"
WRONG_META = "wrong shape or dtype"
WRONG_PLACEMENT = "output placement differs from the rule's prediction"
WRONG_STRUCTURE = "wrong output structure"


def raising_op(tb: Any) -> Any:
    """The innermost aten overload being dispatched when the traceback was raised: a frame
    local ``func`` (dispatch, ``__torch_dispatch__``) or ``op`` holding an ``OpOverload``,
    or an ``OpSpec`` whose ``op`` is one; None if no frame had one."""
    found = None
    while tb is not None:
        for name in ("func", "op"):
            v = tb.tb_frame.f_locals.get(name)
            v = getattr(v, "op", v) if not isinstance(v, torch._ops.OpOverload) else v
            if isinstance(v, torch._ops.OpOverload):
                found = v
                break
        tb = tb.tb_next
    return found


def of_exception(ex: BaseException) -> str:
    """``no rule: OP`` for a missing rule, ``no strategy: OP`` when no strategy fits, else
    ``TYPE in OP`` (the aten op being dispatched) or ``TYPE outside dispatch``."""
    from dtensor.dispatch import NoShardingRuleError
    from dtensor.ops.propagate import ShardingError

    op = raising_op(ex.__traceback__)
    where = str(op) if op is not None else None
    if isinstance(ex, NoShardingRuleError):
        return f"no rule: {where or _first_word(ex)}"
    if isinstance(ex, ShardingError):
        return f"no strategy: {where or _first_word(ex)}"
    return f"{type(ex).__name__} in {where}" if where else f"{type(ex).__name__} outside dispatch"


def _first_word(ex: BaseException) -> str:
    words = str(ex).split()
    return words[0].rstrip(":") if words else "?"


def reason_of(ex: BaseException, limit: int = 300) -> str:
    """The first line of an exception's message, with its type."""
    return f"{type(ex).__name__}: {ex}".split("\n")[0][:limit]


def with_traceback(ex: BaseException) -> str:
    """The whole traceback, for failures where the first line is not enough (sample
    generation)."""
    return "".join(traceback.format_exception(type(ex), ex, ex.__traceback__)).rstrip()


def category(cause: str) -> str:
    """What the coverage tally groups by: the cause without its aten op."""
    for sep in (": ", " in "):
        if sep in cause:
            return cause.split(sep, 1)[0] + ("" if sep == ": " else " (raised in an op)")
    return cause
