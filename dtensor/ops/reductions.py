"""Reductions: sum, mean, prod, amax/amin, max/min, argmax/argmin, var/std, norms, any/all,
logsumexp; aminmax, count_nonzero, trace, dist, histc; and renorm, which reduces to rescale.

Per mesh dim, a reduction can
- keep a Shard on a dim it does not reduce (renumbered when ``keepdim=False``): each rank
  reduces whole rows of its own piece, so its result is exactly its chunk of the output;
- turn a Shard on a reduced dim into a Partial, when the reduction of the per-rank results
  is the reduction of the whole (each row of ``_TABLE`` says which Partial, if any);
- pass a Partial input through, when the op commutes with that Partial's reduction.

Note [uneven shards in reductions]
Shards follow ``torch.chunk``: pieces can be unequal or empty. ``mean`` of unequal pieces is
not the average of the pieces' means, so ``S(d) -> P(avg)`` needs every piece of ``d`` equal
(see ``even_pieces``). ``amax``/``max`` raise on an empty reduced dim (no identity), so
``S(d) -> P(max)`` needs every piece non-empty (see ``no_empty_piece``). A tensor dim sharded over
several mesh dims is split nested, in mesh-dim order, and a rule sees one mesh dim at a time:
both checks assume the worst case over which earlier mesh dims shard the same tensor dim.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from dtensor.ops._common import LINEAR, even_pieces, linear_partials, no_empty_piece
from dtensor.ops.indexing import aligned_shards
from dtensor.ops.registry import (Box, OpSpec, Strategy, TensorSpec, local_function, sharding_rule,
                                  takes_split_rules)
from dtensor.placements import Partial, Replicate, Shard

aten = torch.ops.aten
R = Replicate()


@dataclass(frozen=True, slots=True)
class Reduction:
    """How one reduction op behaves under sharding (one row of ``_TABLE``)."""

    dim_pos: int | None  # position of the dim argument (also found by name); None: all dims
    keepdim_pos: int | None  # position of keepdim; None: the op has no keepdim (drops all)
    over_shard: str | None  # Partial made from a Shard on a reduced dim; None: needs R there
    needs: str = ""  # "" | "even" | "nonempty": Note [uneven shards in reductions]
    through: tuple[str, ...] = ()  # Partial inputs the op commutes with
    outputs: int = 1


_LINEAR = ("sum", "avg")
_SUM = Reduction(1, 2, "sum", through=_LINEAR)
_MEAN = Reduction(1, 2, "avg", "even", through=_LINEAR)

_TABLE: dict[object, Reduction] = {
    # sum(a1 ++ a2) = sum(a1) + sum(a2); sum is linear, so P(sum)/P(avg) pass through
    aten.sum.default: Reduction(None, None, "sum", through=_LINEAR),
    aten.sum.dim_IntList: _SUM,
    aten.nansum.default: Reduction(1, 2, "sum"),  # NaN pieces of a Partial are not NaN sums
    # mean of equal pieces is the average of their means; unequal pieces: no Partial says it
    aten.mean.default: Reduction(None, None, "avg", "even", through=_LINEAR),
    aten.mean.dim: _MEAN,
    # prod(a1 ++ a2) = prod(a1) * prod(a2), and an empty piece's prod is 1 (the identity);
    # prod(a * b) = prod(a) * prod(b), so P(product) passes through
    aten.prod.default: Reduction(None, None, "product", through=("product",)),
    aten.prod.dim_int: Reduction(1, 2, "product", through=("product",)),
    # amax(a1 ++ a2) = max(amax(a1), amax(a2)); amax(max(a, b)) = max(amax(a), amax(b))
    aten.amax.default: Reduction(1, 2, "max", "nonempty", through=("max",)),
    aten.amin.default: Reduction(1, 2, "min", "nonempty", through=("min",)),
    aten.max.default: Reduction(None, None, "max", "nonempty", through=("max",)),
    aten.min.default: Reduction(None, None, "min", "nonempty", through=("min",)),
    # values would be P(max) but indices are local to each piece: reduced dim needs R
    aten.max.dim: Reduction(1, 2, None, outputs=2),
    aten.min.dim: Reduction(1, 2, None, outputs=2),
    aten.argmax.default: Reduction(1, 2, None),  # dim=None: index into the flattened whole
    aten.argmin.default: Reduction(1, 2, None),
    # variance needs the global mean first: no Partial of local variances gives it
    aten.var.correction: Reduction(1, 3, None),
    aten.std.correction: Reduction(1, 3, None),
    aten.var_mean.correction: Reduction(1, 3, None, outputs=2),
    aten.std_mean.correction: Reduction(1, 3, None, outputs=2),
    # logsumexp(a1 ++ a2) = log(exp(l1) + exp(l2)): no Partial kind says that
    aten.logsumexp.default: Reduction(1, 2, None),
    # any(a1 ++ a2) = any(a1) or any(a2) = max over bools; any of an empty piece is False
    # (max's identity on bools), all of an empty piece is True (min's), so no "nonempty"
    aten.any.default: Reduction(None, None, "max"),
    aten.any.dim: Reduction(1, 2, "max"),
    aten.any.dims: Reduction(1, 2, "max"),
    aten.all.default: Reduction(None, None, "min"),
    aten.all.dim: Reduction(1, 2, "min"),
    aten.all.dims: Reduction(1, 2, "min"),
}


def reduced_dims(op: OpSpec, row: Reduction, ndim: int) -> frozenset[int]:
    """The dims the call reduces: all of them for no dim, None, or an empty list."""
    dim = None if row.dim_pos is None else op.arg(row.dim_pos, "dim")
    if dim is None or (isinstance(dim, tuple) and len(dim) == 0):
        return frozenset(range(ndim))
    dims = dim if isinstance(dim, tuple) else (dim,)
    # a 0-d tensor accepts dim 0 / -1 and reduces nothing
    return frozenset(d % ndim for d in dims) if ndim else frozenset()


def _keepdim(op: OpSpec, row: Reduction) -> bool:
    if row.keepdim_pos is None:
        return False
    return bool(op.arg(row.keepdim_pos, "keepdim", False))


def _out_dim(d: int, reduced: frozenset[int], keepdim: bool) -> int:
    return d if keepdim else d - sum(1 for r in reduced if r < d)


def reduction_strategies(op: OpSpec, t: TensorSpec, reduced: frozenset[int], keepdim: bool,
                         over_shard: str | None, needs: str, through: tuple[str, ...],
                         outputs: int) -> list[Strategy]:
    """Strategies for a reduction of ``t`` over ``reduced``; shared with the norm family."""
    out: list[Strategy] = [Strategy((Replicate(),), (Replicate(),) * outputs)]
    for d in range(t.ndim):
        if d not in reduced:  # whole rows of d on each rank: the result is d's chunk
            out.append(Strategy((Shard(d),), (Shard(_out_dim(d, reduced, keepdim)),) * outputs))
            continue
        if over_shard is None:
            continue
        if needs == "even" and not even_pieces(op, t.shape[d]):
            continue
        if needs == "nonempty" and not no_empty_piece(op, t.shape[d]):
            continue
        out.append(Strategy((Shard(d),), (Partial(over_shard),) * outputs))
    if t.dtype != torch.bool:  # bool has no addends; max/min pieces of a bool are not bools
        exact = not (t.dtype.is_floating_point or t.dtype.is_complex)
        # P(avg) of integers would round when divided
        out += [Strategy((Partial(k),), (Partial(k),) * outputs) for k in through
                if not (k == "avg" and exact) and (k != "product" or _same_dtype(op, t))]
    return out


def _same_dtype(op: OpSpec, t: TensorSpec) -> bool:
    """prod computes in the output dtype: a Partial(product) of int8 pieces wraps in int8, so
    the product of per-rank prods (in int64) is not the prod of the value."""
    out = op.kwarg("dtype") or (torch.int64 if not (t.dtype.is_floating_point
                                                    or t.dtype.is_complex) else t.dtype)
    return out == t.dtype


@takes_split_rules  # Note [split rules in propagation]
def _rule(op: OpSpec) -> list[Strategy]:
    row = _TABLE[op.op]
    t = op.tensors()[0]
    reduced = reduced_dims(op, row, t.ndim)
    if op.op in (aten.argmax.default, aten.argmin.default) and op.arg(1, "dim") is None:
        # the index is into the flattened whole tensor: no piece knows its offset
        return [Strategy((Replicate(),), (Replicate(),))]
    return reduction_strategies(op, t, reduced, _keepdim(op, row), row.over_shard, row.needs,
                                row.through, row.outputs)


sharding_rule(*_TABLE)(_rule)


# ord -> (Partial from a sharded reduced dim, condition): |x|_1 and |x|_0 are sums over
# elements, |x|_inf / |x|_-inf are max / min of |x| (no identity on an empty piece). Other
# ords are sum(|x|^p)^(1/p): the root of a sum is not a sum of roots, so R is needed.
_NORM_ORDS: dict[float, tuple[str, str]] = {
    1.0: ("sum", ""), 0.0: ("sum", ""),
    math.inf: ("max", "nonempty"), -math.inf: ("min", "nonempty"),
}


@sharding_rule(aten.linalg_vector_norm.default)
def vector_norm(op: OpSpec) -> list[Strategy]:
    """``linalg_vector_norm(x, ord, dim, keepdim, dtype)``; a norm of a Partial is not a
    Partial of norms (|a + b| != |a| + |b|), so no Partial passes through."""
    t = op.tensors()[0]
    ord_ = float(op.arg(1, "ord", 2))
    over, needs = _NORM_ORDS.get(ord_, (None, ""))
    dim = op.arg(2, "dim")
    if dim is None or (isinstance(dim, tuple) and len(dim) == 0):
        reduced = frozenset(range(t.ndim))
    else:
        dims = dim if isinstance(dim, tuple) else (dim,)
        reduced = frozenset(d % t.ndim for d in dims) if t.ndim else frozenset()
    return reduction_strategies(op, t, reduced, bool(op.arg(3, "keepdim", False)), over, needs,
                                (), 1)



@sharding_rule(aten.linalg__powsum.default)
def powsum(op: OpSpec) -> list[Strategy]:
    """``linalg__powsum(x, ord, dim, keepdim, dtype)`` = sum(|x|^ord) over ``dim``: a sum of
    elementwise values for every ord (0 counts nonzeros, +-inf gives inf, 1 or 0 per
    element), so a sharded reduced dim gives Partial(sum) and an empty piece adds 0, as
    vector_norm's root would not. No Partial passes through (|a + b|^p is not |a|^p + |b|^p)."""
    t = op.tensors()[0]
    dim = op.arg(2, "dim")
    if dim is None or (isinstance(dim, tuple) and len(dim) == 0):
        reduced = frozenset(range(t.ndim))
    else:
        dims = dim if isinstance(dim, tuple) else (dim,)
        reduced = frozenset(d % t.ndim for d in dims) if t.ndim else frozenset()
    return reduction_strategies(op, t, reduced, bool(op.arg(3, "keepdim", False)), "sum", "",
                                (), 1)


# -- aminmax, count_nonzero, trace, dist, histc, renorm ----------------------------------------
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
