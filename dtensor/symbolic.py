"""Symbolic sizes: a DTensor traced by ``torch.compile`` with dynamic shapes.

Note [symbolic sizes]
Under ``torch._dynamo.mark_dynamic`` or automatic dynamic, the tracer rebuilds a DTensor with
a global shape of ``torch.SymInt``s (``__tensor_unflatten__``'s ``outer_size``), and every
local size is an expression of them. The runtime then runs as it does eagerly, on those
sizes: a rule's, a layout's or a plan's arithmetic (``-(-s // n)``, a product, a sum) gives
an expression, and a comparison that decides something (is this dim divisible by the mesh?
is this piece empty?) becomes one of dynamo's guards. So a decision that depends on a size
is guarded, never assumed, and a later size that keeps every guard runs the same graph with
no recompile. Where only a value is needed, not a decision, the code keeps it an expression
(``sizes``, ``largest``: ``torch.sym_max``) rather than ``int()`` or ``max()``, which would
guard the size to its example value: a recompile at every new length. Costs read hints
(``hints``): they choose among strategies that are all right, so they need no guard.

The caches keyed by shapes cannot hold a SymInt (it has no hash, and an equality test would
guard it to the value it is compared with). A cached function is therefore wrapped by
``shape_cache``: called with symbolic sizes, it computes afresh; called with ints, it caches
as before. ``TensorSpec`` has no hash when symbolic, so the dispatcher's plan caches, the
planner's and the redistribute programs are bypassed the same way. Only a trace pays this:
each op is traced once per graph.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import torch

F = TypeVar("F", bound=Callable[..., Any])
_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


def is_symbolic(value: Any) -> bool:
    """A SymInt (SymFloat, SymBool) anywhere in nested tuples, lists and dicts, or a spec
    that says it holds one (its ``symbolic``)."""
    if isinstance(value, _SYMBOLIC):
        return True
    if isinstance(value, (tuple, list)):
        return any(map(is_symbolic, value))
    if isinstance(value, dict):
        return any(map(is_symbolic, value.values()))
    return getattr(value, "symbolic", None) is True


def hash_or_none(*fields: object) -> int | None:
    """The hash of a spec's fields; None where a size is symbolic (a spec's ``symbolic``)."""
    try:
        return hash(fields)
    except TypeError:
        if is_symbolic(fields):
            return None
        raise


def sizes_symbolic(sizes: Any) -> bool:
    """``sizes`` (a flat tuple of ints and SymInts) holds a SymInt."""
    return any(isinstance(v, _SYMBOLIC) for v in sizes)


def shape_cache(maxsize: int | None) -> Callable[[F], F]:
    """``functools.lru_cache(maxsize)`` for functions of shapes, which computes afresh when an
    argument holds a symbolic size (Note [symbolic sizes]). ``cache_info`` and
    ``cache_clear`` are the lru_cache's."""

    def wrap(fn: F) -> F:
        cached = functools.lru_cache(maxsize=maxsize)(fn)

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return cached(*args, **kwargs)
            except TypeError:
                if is_symbolic(args) or is_symbolic(kwargs):
                    return fn(*args, **kwargs)
                raise

        call.cache_info = cached.cache_info  # type: ignore[attr-defined]
        call.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
        return call  # type: ignore[return-value]

    return wrap


def hint(value: Any) -> Any:
    """An int for a SymInt (its example value in the trace), the value itself otherwise:
    for costs, which choose among correct strategies and need no guard."""
    if isinstance(value, torch.SymInt):
        return value.node.hint if value.node.hint is not None else value.node.require_hint()
    return value


def hints(sizes: Any) -> tuple:
    """``sizes`` as a tuple of ints, each SymInt at its hint."""
    sizes = tuple(sizes)
    return tuple(map(hint, sizes)) if sizes_symbolic(sizes) else sizes


def sizes(shape: Any) -> tuple:
    """``shape`` as a tuple of sizes: ints as ints, SymInts kept (``int()`` of a SymInt would
    specialize it to its hint: a guard of equality, a recompile at the next size)."""
    return tuple(n if isinstance(n, torch.SymInt) else int(n) for n in shape)


def largest(values: Any) -> Any:
    """``max(values)``, as an expression where one is symbolic (``max`` would guard on which
    is larger)."""
    values = list(values)
    if not sizes_symbolic(values):
        return max(values)
    out = values[0]
    for v in values[1:]:
        out = torch.sym_max(out, v)
    return out


def smallest(a: Any, b: Any) -> Any:
    """``min(a, b)``, as an expression where one is symbolic (``min`` would guard on which is
    smaller: for an uneven chunk's bounds, a guard on the dim's parity)."""
    if isinstance(a, _SYMBOLIC) or isinstance(b, _SYMBOLIC):
        return torch.sym_min(a, b)
    return min(a, b)
