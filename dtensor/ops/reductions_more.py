"""More reductions: aminmax, count_nonzero, trace, dist, histc; and renorm, which reduces to
rescale.

Per mesh dim, as in ``reductions`` (Note [uneven shards in reductions]): a dim not reduced
shards (each rank reduces whole rows); a reduced dim sharded becomes the Partial that
combines the pieces' results, where one does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from dtensor.ops._common import LINEAR, linear_partials
from dtensor.ops.indexing import aligned_shards
from dtensor.ops.reductions import no_empty_piece, reduction_strategies
from dtensor.ops.registry import Box, OpSpec, Strategy, local_function, sharding_rule
from dtensor.placements import Partial, Replicate, Shard

aten = torch.ops.aten
R = Replicate()


def _all_or(dim: Any, ndim: int) -> frozenset[int]:
    """The dims a ``dim`` argument names: all for None or an empty list."""
    if dim is None or (isinstance(dim, tuple) and not dim):
        return frozenset(range(ndim))
    dims = dim if isinstance(dim, tuple) else (dim,)
    return frozenset(d % ndim for d in dims) if ndim else frozenset()


@sharding_rule(aten.aminmax.default)
def aminmax(op: OpSpec) -> list[Strategy]:
    """(amin, amax) over ``dim`` (all dims if None): min(a1 ++ a2) = min(min a1, min a2), so a
    sharded reduced dim gives (P(min), P(max)) where no piece is empty (neither has an
    identity). No Partial passes: the min of P(max) addends says nothing of the min."""
    t = op.tensors()[0]
    reduced = _all_or(op.kwarg("dim"), t.ndim)
    keepdim = bool(op.kwarg("keepdim", False))
    found = reduction_strategies(op, t, reduced, keepdim, None, "", (), 2)
    for d in sorted(reduced):
        if no_empty_piece(op, t.shape[d]):
            found.append(Strategy((Shard(d),), (Partial("min"), Partial("max"))))
    return found


@sharding_rule(aten.count_nonzero.default, aten.count_nonzero.dim_IntList)
def count_nonzero(op: OpSpec) -> list[Strategy]:
    """sum(x != 0) over ``dim``: a count, so a sharded reduced dim gives P(sum) (an empty
    piece counts 0). The count of a Partial's addends is not the count of the value."""
    t = op.tensors()[0]
    return reduction_strategies(op, t, _all_or(op.arg(1, "dim"), t.ndim), False, "sum", "",
                                (), 1)


# Note [trace of a piece]
# trace(x) = sum_i x[i, i]. A rank holding rows [r0, r1) and columns [c0, c1) holds exactly
# the diagonal entries with r0 <= i < r1 and c0 <= i < c1: in its piece, the diagonal with
# offset r0 - c0. Summing those gives each rank an addend of the trace: Partial(sum), for any
# sharding of either dim (an empty piece, or one off the diagonal, adds 0). trace is linear,
# so P(sum)/P(avg) pass through. Every strategy runs the local function (the boxes of a
# Replicate or Partial input start at 0: offset 0, the plain trace).
_TRACE = "trace_piece"


@sharding_rule(aten.trace.default)
def trace(op: OpSpec) -> list[Strategy]:
    found = [Strategy((R,), (R,), local=_TRACE)]
    found += [Strategy((Shard(d),), (Partial("sum"),), local=_TRACE) for d in (0, 1)]
    return found + linear_partials(op, 0, LINEAR, local=_TRACE)


@local_function(_TRACE)
def _trace_piece(func: Any, args: tuple, kwargs: dict, boxes: Sequence[Box | None]) -> Any:
    x, box = args[0], boxes[0]
    if box is None:
        raise ValueError("trace local function: needs its input's box")
    (r0, _), (c0, _) = box
    diag = torch.diagonal(x, offset=r0 - c0)  # local (i, i + r0 - c0): global (r0+i, r0+i)
    return diag.sum(dtype=func(x[:0, :0]).dtype)  # trace's dtype (int64 for integers)


# ord -> Partial of the pieces' results: |d|_1 and |d|_0 add over elements, |d|_inf and
# |d|_-inf are the max / min |d| (no identity: no empty piece). Other p take a root of a sum.
_DIST_ORDS = {1.0: ("sum", False), 0.0: ("sum", False), math.inf: ("max", True),
              -math.inf: ("min", True)}


@sharding_rule(aten.dist.default)
def dist(op: OpSpec) -> list[Strategy]:
    """||a - b||_p over every element of the broadcast: a dim sharded alike in both (Replicate
    where one broadcasts) gives the pieces' norms, combined by the Partial of ``_DIST_ORDS``.
    Not linear (a norm): no Partial input passes."""
    tensors = op.tensors()
    shape = tuple(torch.broadcast_shapes(*(t.shape for t in tensors)))
    found = [Strategy((R, R), (R,))]
    kind = _DIST_ORDS.get(float(op.arg(2, "p", 2)))
    if kind is None:
        return found
    reduce_op, nonempty = kind
    for d, size in enumerate(shape):
        if nonempty and not no_empty_piece(op, size):
            continue
        found.append(Strategy(aligned_shards(tensors, shape, d), (Partial(reduce_op),)))
    return found


@sharding_rule(aten.histc.default)
def histc(op: OpSpec) -> list[Strategy]:
    """Counts of the elements in ``bins`` equal bins of [min, max]: with the range given, a
    count over a union of pieces is the sum of the pieces' counts, P(sum) for any sharded dim
    (an empty piece counts nothing). min == max takes the range from the data: the pieces'
    ranges differ, so Replicate."""
    t = op.tensors()[0]
    found = [Strategy((R,), (R,))]
    if op.arg(2, "min", 0) == op.arg(3, "max", 0):
        return found
    return found + [Strategy((Shard(d),), (Partial("sum"),)) for d in range(t.ndim)]


@sharding_rule(aten.renorm.default)
def renorm(op: OpSpec) -> list[Strategy]:
    """Each slice x.select(dim, i) is scaled so its p-norm is at most ``maxnorm``: the norm
    spans every other dim, so only ``dim`` shards (each rank rescales whole slices). Not
    linear (the scale depends on the norm): no Partial."""
    t = op.tensors()[0]
    found = [Strategy((R,), (R,))]
    if t.ndim:
        d = op.arg(2, "dim") % t.ndim
        found.append(Strategy((Shard(d),), (Shard(d),)))
    return found


@sharding_rule(aten.equal.default, aten.allclose.default)
def whole_comparison(op: OpSpec) -> list[Strategy]:
    """``equal(a, b)`` / ``allclose(a, b, ...)``: one Python bool over every element. The
    pieces' answers would need an and across ranks, which a rule cannot do (no tensor output
    to hold a Partial): both inputs whole (a Partial reduced first), the same bool on every
    rank."""
    return [Strategy((R, R), ())]
