"""A call's plan: what propagation decided for one call signature, cached per mesh, and
the fast path's flattened form of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from dtensor.ops.propagate import Decision
from dtensor.spec import DTensorSpec
from dtensor.dispatch.decomposition_table import Decomposition
from functools import lru_cache

@dataclass(frozen=True)
class _Plan:
    """Everything a steady-state call needs, computed once per call signature."""

    decision: Decision  # None: the decomposition runs every such call (it had no strategy)
    out_specs: tuple[DTensorSpec, ...]
    in_place: bool
    local_out_shape: tuple[int, ...] | None  # this rank's first output piece, for size args
    inplace_view: bool  # squeeze_, t_, ...: the written DTensor changes shape and placements
    boxes: tuple | None  # this rank's input boxes, for a local function (Note [local functions])
    decompose: Decomposition | None  # Note [decompositions]
    # where the chosen local function is guarded: the plan for any rank's guard failing
    # (Note [guarded local functions] in dtensor/ops/registry.py)
    otherwise: "_Plan | None" = None


# Plans hold this rank's mesh (its process groups), so each mesh keeps its own:
# (op, described args, described kwargs, pinned) -> plan, one dict lookup per op.
def _plans_of(mesh: Any) -> dict[tuple, _Plan]:
    plans = mesh.__dict__.get("_dispatch_plans")  # Note [per-mesh caches] in mesh.py
    if plans is None:
        plans = mesh.__dict__["_dispatch_plans"] = {}
    return plans




@dataclass(frozen=True, slots=True)
class _FastPlan:
    op: Any  # the overload's C++ callable (func._op): OpOverload.__call__ is a Python frame
    outs: tuple[tuple, ...]  # per output: (DTensorSpec, TensorSpec, shape, stride, dtype, layout)
    container: type | None  # None: one tensor out; else tuple or list of them
    rewrite: tuple[tuple[int, list[int]], ...]  # Note [global size arguments], precomputed
    local: Any  # the strategy's local function, or None (Note [local functions])
    boxes: tuple | None
    returns_arg: int | None  # add_ returns its argument 0 (the DTensor the caller holds)
    dtensors: tuple[int, ...]  # the positions of the DTensor arguments
    lists: tuple[int, ...]  # the positions of lists of DTensors (cat's)
    moves: tuple[tuple[int, Callable[[torch.Tensor], torch.Tensor]], ...]  # Note [local moves]
    native: Any  # the compiled entry's plan, or None (Note [native fast path])


@lru_cache(maxsize=4096)
def _returns_no_tensor(func: Any) -> bool:
    """item() returns a Python number: there is no output to lay out (and no meta kernel)."""
    return all("Tensor" not in str(r.type) for r in func._schema.returns)


@lru_cache(maxsize=4096)
def _return_sources(func: Any) -> tuple[tuple[int, str] | None, ...]:
    """Per return of the op: (position, name) of the argument it writes and returns (add_
    returns self), else None. A view's return aliases its input without writing it: a new
    DTensor, not the input."""
    args = func._schema.arguments
    out = []
    for r in func._schema.returns:
        found = None
        if r.alias_info is not None:
            for i, a in enumerate(args):
                if (a.alias_info is not None and a.alias_info.is_write
                        and a.alias_info.before_set & r.alias_info.before_set):
                    found = (i, a.name)
                    break
        out.append(found)
    return tuple(out)


_SCALARS = frozenset({int, float, bool, type(None), str, complex, torch.dtype, torch.device,
                      torch.memory_format, torch.layout})


def _int_list(a: Any) -> bool:
    return (type(a) is list or type(a) is tuple) and all(type(v) is int for v in a)


def _dtensor_list(a: Any, DTensor: type) -> bool:
    return (type(a) is list or type(a) is tuple) and len(a) > 0 \
        and all(type(v) is DTensor for v in a)
