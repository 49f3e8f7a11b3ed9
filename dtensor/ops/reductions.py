"""Reductions: sum, mean, prod, amax/amin, max/min, argmax/argmin, var/std, norms, any/all,
logsumexp.

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

import itertools
import math
from dataclasses import dataclass

import torch

from dtensor.layout import chunk_bounds
from dtensor.ops.registry import OpSpec, Strategy, TensorSpec, sharding_rule
from dtensor.placements import Partial, Replicate, Shard

aten = torch.ops.aten


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


def _piece_sizes(n: int, splits: tuple[int, ...]) -> list[int]:
    """Sizes of the leaves when ``n`` is chunked by each of ``splits`` in turn (nested)."""
    sizes = [n]
    for k in splits:
        sizes = [b - a for s in sizes for a, b in (chunk_bounds(s, k, i) for i in range(k))]
    return sizes


def _earlier_subsets(op: OpSpec) -> list[tuple[int, ...]]:
    """Mesh-dim sizes of every subset of the earlier mesh dims, then this one (nesting)."""
    earlier = op.mesh_shape[:op.mesh_dim]
    return [tuple(earlier[i] for i in keep) + (op.mesh_dim_size,)
            for r in range(len(earlier) + 1) for keep in itertools.combinations(
                range(len(earlier)), r)]


def even_pieces(op: OpSpec, n: int) -> bool:
    """Every piece of a dim of size ``n`` is equal, whichever earlier mesh dims shard it."""
    return n % math.prod(op.mesh_shape[:op.mesh_dim + 1]) == 0


def no_empty_piece(op: OpSpec, n: int) -> bool:
    """No piece of a dim of size ``n`` is empty, whichever earlier mesh dims shard it."""
    return all(min(_piece_sizes(n, s)) > 0 for s in _earlier_subsets(op))


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
