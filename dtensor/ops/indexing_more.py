"""Indexed writes and lookups: index_copy, index_fill, index_reduce, take, put, and the
value searches searchsorted, bucketize, isin.

Note [indexed writes along one dim]
index_copy/index_fill/index_reduce write rows of ``dim`` chosen by a global index: ``dim``
stays whole (a rank cannot tell which of its rows an index names without its offset), the
index is Replicate, and every other dim of self pairs with the same dim of source: each rank
writes whole rows of its piece. Each output element is one element of self or of source (or
the fill value), so a Partial on self and source jointly passes where the write commutes with
that reduction over ranks: copy with every kind (Note [moves keep every Partial] in _common);
a reduce with its own kind (amax: P(max), amin: P(min), prod: P(product)) and mean with
P(sum)/P(avg) (the mean of a row's values with fixed counts is linear in them).
"""

from __future__ import annotations

import torch

from dtensor.ops._common import LINEAR, MOVES, dim_of, partials_of
from dtensor.ops.registry import OpSpec, Strategy, sharding_rule
from dtensor.placements import Partial, Replicate, Shard

aten = torch.ops.aten
R = Replicate()


def _rows(op: OpSpec, x_ndim: int, dim: int, placements: tuple) -> list[Strategy]:
    """Note [indexed writes along one dim]: (self, index, source...) ``placements`` says per
    tensor whether it is self-shaped (True: Shard alike) or whole (False: Replicate)."""
    return [Strategy(tuple(Shard(d) if f else R for f in placements), (Shard(d),))
            for d in range(x_ndim) if d != dim]


@sharding_rule(aten.index_copy.default)
def index_copy(op: OpSpec) -> list[Strategy]:
    x = op.tensors()[0]
    dim = dim_of(op.arg(1, "dim"), x.ndim)
    found = [Strategy((R, R, R), (R,))] + _rows(op, x.ndim, dim, (True, False, True))
    return found + [Strategy((p, R, p), (p,)) for p in partials_of(x, MOVES)]


@sharding_rule(aten.index_fill.int_Scalar, aten.index_fill.int_Tensor)
def index_fill(op: OpSpec) -> list[Strategy]:
    """The filled rows hold ``value``: a Python value is on every rank, and n copies of c
    reduce to c under avg/max/min but to n * c under sum (P(sum) only for 0); a 0-d value
    tensor may itself be the same Partial as self (its addends filled in)."""
    tensors = op.tensors()
    x = tensors[0]
    dim = dim_of(op.arg(1, "dim"), x.ndim)
    n = len(tensors)
    found = [Strategy((R,) * n, (R,))] + _rows(op, x.ndim, dim, (True, False, False)[:n])
    if n == 3:  # value tensor
        found += [Strategy((p, R, p), (p,)) for p in partials_of(x, MOVES)]
    kinds = MOVES if not op.arg(3, "value") else MOVES[1:]
    return found + [Strategy((p, R) + (R,) * (n - 2), (p,)) for p in partials_of(x, kinds)
                    if n == 2 or p.reduce_op != "sum"]


_REDUCE_PARTIALS = {"amax": (Partial("max"),), "amin": (Partial("min"),),
                    "prod": (Partial("product"),), "mean": LINEAR}


@sharding_rule(aten.index_reduce.default)
def index_reduce(op: OpSpec) -> list[Strategy]:
    x = op.tensors()[0]
    dim = dim_of(op.arg(1, "dim"), x.ndim)
    found = [Strategy((R, R, R), (R,))] + _rows(op, x.ndim, dim, (True, False, True))
    kinds = _REDUCE_PARTIALS[op.arg(4, "reduce")]
    if not x.dtype.is_floating_point:
        return found  # an integer mean rounds, an integer prod wraps differently per dtype
    return found + [Strategy((p, R, p), (p,)) for p in kinds]


@sharding_rule(aten.take.default)
def take(op: OpSpec) -> list[Strategy]:
    """``take(x, index)``: x flattened, read at ``index``; the output has the index's shape.
    Any dim of the index shards (each rank reads its own positions from a whole x); each
    output element is one element of x, so x's Partials pass with the index Replicate."""
    x, index = op.tensors()
    found = [Strategy((R, R), (R,))]
    found += [Strategy((R, Shard(d)), (Shard(d),)) for d in range(index.ndim)]
    return found + [Strategy((p, R), (p,)) for p in partials_of(x, MOVES)]


@sharding_rule(aten.put.default)
def put(op: OpSpec) -> list[Strategy]:
    """``put(x, index, source, accumulate)``: flat positions of x set to (or, accumulating,
    increased by) source. Positions are global: x whole. Setting moves elements (every
    Partial on x and source jointly); accumulating adds them (P(sum)/P(avg) only)."""
    x = op.tensors()[0]
    kinds = LINEAR if op.arg(3, "accumulate", False) else MOVES
    return [Strategy((R, R, R), (R,))] + [Strategy((p, R, p), (p,))
                                          for p in partials_of(x, kinds)]


# -- searches ---------------------------------------------------------------------------------
@sharding_rule(aten.searchsorted.Tensor)
def searchsorted(op: OpSpec) -> list[Strategy]:
    """``searchsorted(seq, values, sorter=)``: each value's insertion point in its row of
    ``seq``. A 1-D seq serves every value: values shard on any dim, seq (and sorter) whole.
    An N-D seq pairs its leading dims with the values': those shard alike; the searched last
    dim stays whole. Positions are not addends: no Partial."""
    tensors = op.tensors()
    seq, values = tensors[0], tensors[1]
    n = len(tensors)
    found = [Strategy((R,) * n, (R,))]
    if seq.ndim == 1:
        return found + [Strategy((R, Shard(d)) + (R,) * (n - 2), (Shard(d),))
                        for d in range(values.ndim)]
    return found + [Strategy((Shard(d),) * n, (Shard(d),)) for d in range(seq.ndim - 1)]


@sharding_rule(aten.bucketize.Tensor)
def bucketize(op: OpSpec) -> list[Strategy]:
    """``bucketize(values, boundaries)``: searchsorted with a 1-D boundaries: values shard on
    any dim, boundaries whole."""
    values = op.tensors()[0]
    return [Strategy((R, R), (R,))] + [Strategy((Shard(d), R), (Shard(d),))
                                       for d in range(values.ndim)]


@sharding_rule(aten.isin.Tensor_Tensor, aten.isin.Tensor_Scalar, aten.isin.Scalar_Tensor)
def isin(op: OpSpec) -> list[Strategy]:
    """Per element: is it among the test elements (``invert``: is it not). Elements shard on
    any dim (test elements whole). Test elements sharded: an element is in the union of the
    pieces iff it is in some piece, a logical or = P(max) over bools (False, max's identity,
    for an empty piece); inverted, "in none" is an and = P(min)."""
    out = []
    tensors = op.tensors()
    args_are = [isinstance(a, type(tensors[0])) for a in op.args[:2]]
    elements = tensors[0] if args_are[0] else None
    test = tensors[-1] if args_are[1] else None
    n = len(tensors)
    out.append(Strategy((R,) * n, (R,)))
    if elements is not None:
        out += [Strategy((Shard(d),) + (R,) * (n - 1), (Shard(d),))
                for d in range(elements.ndim)]
    if test is not None:
        p = Partial("min" if op.kwarg("invert", False) else "max")
        out += [Strategy((R,) * (n - 1) + (Shard(d),), (p,)) for d in range(test.ndim)]
    return out
