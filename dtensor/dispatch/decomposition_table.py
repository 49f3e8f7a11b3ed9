"""The table of decompositions: ops that run as a program of other ops instead of one
local call (the programs themselves live in ``dtensor.decompositions``).

Note [decompositions]
An op whose sharded form needs communication inside it (log_softmax over a sharded dim needs
a max and a sum across ranks) cannot be a pure rule. It may register a decomposition
``fn(func, args, kwargs)`` that computes it from local steps and collectives and returns the
result, or returns NotImplemented to run the op as usual (through its rule, which it must
have). A call's plan keeps its op's decomposition, looked up once when the plan is made, so
other ops pay nothing; register at import (dtensor.parallel.loss does): a plan made before
does not see it.
"""

from __future__ import annotations

from typing import Any, Callable


import dtensor.ops  # noqa: F401  (registers the rules)
from dtensor.ops.registry import REGISTRY


Decomposition = Callable[[Any, tuple, dict], Any]
DECOMPOSITIONS: dict[Any, Decomposition] = {}


def register_decomposition(op: Any, fn: Decomposition) -> None:
    """Run ``fn(func, args, kwargs)`` for ``op`` before its rule (Note [decompositions])."""
    if op not in REGISTRY:
        raise ValueError(f"{op} has no sharding rule: a decomposition needs one to run when it "
                         "returns NotImplemented")
    if DECOMPOSITIONS.get(op, fn) is not fn:
        raise ValueError(f"{op} already has a decomposition: {DECOMPOSITIONS[op].__module__}."
                         f"{DECOMPOSITIONS[op].__qualname__}")
    DECOMPOSITIONS[op] = fn
