"""Indexing ops: index_select, gather, scatter, advanced indexing, index_put, masked_fill,
embedding; the indexed writes index_copy, index_fill, index_reduce, take, put; the value
searches searchsorted, bucketize, isin.

Per mesh dim, an indexing op can run on matching pieces when the indexed dim is whole on
every rank: either the data is sharded on a dim the op does not index (each rank indexes its
own rows), or the data is Replicate and the index is sharded (each rank looks up its own
indices, so the output is sharded the same way). Selecting elements commutes with every
Partial reduction (Note [selection keeps Partial]).

Note [selection keeps Partial]
An op whose output elements are copies of input elements picked by a Replicate index (gather,
index_select, index, embedding) keeps P(sum), P(avg), P(max) and P(min): picking from each
rank's addend and reducing equals reducing and picking.
Writing a *constant* (masked_fill value, scatter.value) into a Partial keeps P(avg), P(max),
P(min) — every rank writes the same c, and avg/max/min of n copies of c is c — but not P(sum):
c would be summed n times (unless c == 0).

Note [sharded data dim needs a local function]
Data sharded on the dim an index points into (embedding weight on the vocab dim, gather's
source on ``dim``) gives Partial(sum) outputs if each rank looks up only the rows it holds,
shifted by its offset, and writes zeros for the rest: not the aten op on the local pieces, so
such a strategy names a local function (Note [local functions] in registry.py). Embedding has
one; gather's source sharded on ``dim`` does not yet.

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

from typing import Sequence

import torch

from dtensor.ops._common import MOVES, dim_of, partials_of
from dtensor.ops.registry import OpSpec, Strategy, TensorSpec, local_function, sharding_rule
from dtensor.placements import Partial, Placement, Replicate, Shard

aten = torch.ops.aten

R = Replicate()
PARTIALS = tuple(Partial(k) for k in ("sum", "avg", "max", "min"))
LINEAR = (Partial("sum"), Partial("avg"))


def partials(t: TensorSpec, kinds: Sequence[Partial] = PARTIALS) -> list[Partial]:
    """``kinds`` that can hold ``t``'s dtype: P(avg) divides, so integer and bool tensors
    cannot be Partial(avg)."""
    exact = t.dtype.is_floating_point or t.dtype.is_complex
    return [p for p in kinds if p.reduce_op != "avg" or exact]


def _dim(d: int, ndim: int) -> int:
    return d % ndim if ndim else 0


def aligned_shards(tensors: Sequence[TensorSpec | None], out_shape: Sequence[int], out_dim: int
                   ) -> tuple[Placement, ...]:
    """Per tensor, the Shard of the dim that broadcasts onto ``out_dim`` of ``out_shape``, or
    Replicate where it broadcasts (size 1 or missing) and so every rank needs it whole."""
    ins: list[Placement] = []
    for t in tensors:
        if t is None:
            continue
        d = out_dim - (len(out_shape) - t.ndim)
        ok = d >= 0 and t.shape[d] == out_shape[out_dim]
        ins.append(Shard(d) if ok else R)
    return tuple(ins)


# -- index_select, gather -------------------------------------------------------------------
@sharding_rule(aten.index_select.default)
def index_select(op: OpSpec) -> list[Strategy]:
    x, index = op.tensors()
    dim = _dim(op.arg(1, "dim"), x.ndim)
    out = [Strategy((R, R), (R,))]
    # rows of x along another dim: each rank selects from its own rows
    out += [Strategy((Shard(d), R), (Shard(d),)) for d in range(x.ndim) if d != dim]
    # a 1-D index's chunks are the output's chunks along dim; a 0-d x has no dim to chunk
    # (and index_select on it rejects an empty index piece)
    if index.ndim == 1 and x.ndim > 0:
        out.append(Strategy((R, Shard(0)), (Shard(dim),)))
    out += [Strategy((p, R), (p,)) for p in partials(x)]  # Note [selection keeps Partial]
    return out


@sharding_rule(aten.gather.default)
def gather(op: OpSpec) -> list[Strategy]:
    x, index = op.tensors()
    dim = _dim(op.arg(1, "dim"), x.ndim)
    out = [Strategy((R, R), (R,))]
    # out[i][j] = x[i][index[i][j]] (dim=1): row i of the output needs row i of x and index,
    # so both shard along d with equal extents (else their chunks hold different rows)
    out += [Strategy((Shard(d), Shard(d)), (Shard(d),)) for d in range(x.ndim)
            if d != dim and x.shape[d] == index.shape[d]]
    if index.ndim:  # columns j of the index pick from the whole row: x stays whole
        out.append(Strategy((R, Shard(dim)), (Shard(dim),)))
    out += [Strategy((p, R), (p,)) for p in partials(x)]  # Note [selection keeps Partial]
    return out


# -- scatter family -------------------------------------------------------------------------
def _scatter_rows(x: TensorSpec, dim: int, rest: list[TensorSpec]) -> list[Strategy]:
    """S(d) on self, index (and src) for d != dim with equal extents: rows scatter alone."""
    return [Strategy((Shard(d),) * (1 + len(rest)), (Shard(d),)) for d in range(x.ndim)
            if d != dim and all(t.shape[d] == x.shape[d] for t in rest)]


@sharding_rule(aten.scatter.src, aten.scatter_.src)
def scatter_src(op: OpSpec) -> list[Strategy]:
    x, index, src = op.tensors()
    dim = _dim(op.arg(1, "dim"), x.ndim)
    out = [Strategy((R, R, R), (R,))] + _scatter_rows(x, dim, [index, src])
    # every element is copied from self or from src: reducing commutes with the choice
    out += [Strategy((p, R, p), (p,)) for p in partials(x)]
    return out


@sharding_rule(aten.scatter.value, aten.scatter_.value)
def scatter_value(op: OpSpec) -> list[Strategy]:
    x, index = op.tensors()
    dim = _dim(op.arg(1, "dim"), x.ndim)
    out = [Strategy((R, R), (R,))] + _scatter_rows(x, dim, [index])
    value = op.arg(3, "value")
    # Note [selection keeps Partial]: a constant keeps P(avg/max/min); P(sum) only for 0
    out += [Strategy((p, R), (p,)) for p in partials(x)
            if p.reduce_op != "sum" or value == 0]
    return out


@sharding_rule(aten.scatter_add.default, aten.scatter_add_.default)
def scatter_add(op: OpSpec) -> list[Strategy]:
    x, index, src = op.tensors()
    dim = _dim(op.arg(1, "dim"), x.ndim)
    out = [Strategy((R, R, R), (R,))] + _scatter_rows(x, dim, [index, src])
    # x + scatter(src) is linear in (x, src) jointly: P + scatter(P) is P
    out += [Strategy((p, R, p), (p,)) for p in partials(x, LINEAR)]
    if index.ndim and index.shape[dim] == src.shape[dim]:
        # each rank adds its columns of (index, src) to its addend of x: the sum over ranks
        # adds every column once. P(sum) only: with avg each column would be divided by n
        out.append(Strategy((Partial("sum"), Shard(dim), Shard(dim)), (Partial("sum"),)))
    return out


@sharding_rule(aten.scatter_reduce.two, aten.scatter_reduce_.two)
def scatter_reduce(op: OpSpec) -> list[Strategy]:
    x, index, src = op.tensors()
    dim = _dim(op.arg(1, "dim"), x.ndim)
    # rows along d != dim reduce alone, whatever the reduction; no Partial: mean/prod mix ranks
    return [Strategy((R, R, R), (R,))] + _scatter_rows(x, dim, [index, src])


@sharding_rule(aten.index_add.default, aten.index_add_.default)
def index_add(op: OpSpec) -> list[Strategy]:
    x, index, source = op.tensors()
    dim = _dim(op.arg(1, "dim"), x.ndim)
    out = [Strategy((R, R, R), (R,))]
    # source has x's extent on every dim but dim: rows along d != dim add alone
    out += [Strategy((Shard(d), R, Shard(d)), (Shard(d),)) for d in range(x.ndim) if d != dim]
    # x + alpha * put(source) is linear in (x, source) jointly
    out += [Strategy((p, R, p), (p,)) for p in partials(x, LINEAR)]
    if index.ndim == 1 and x.ndim:
        # each rank adds its slice of source at its indices; the sum adds every slice once
        out.append(Strategy((Partial("sum"), Shard(0), Shard(dim)), (Partial("sum"),)))
    return out


# -- advanced indexing ----------------------------------------------------------------------
def _index_layout(x: TensorSpec, indices: Sequence[TensorSpec | None]
                  ) -> tuple[tuple[int, ...], int, dict[int, int]] | None:
    """For integer indices: the broadcast index shape, where its dims start in the output,
    and the output dim of each dim of ``x`` that is not indexed. None for bool masks."""
    given = [(i, t) for i, t in enumerate(indices) if t is not None]
    if any(t.dtype in (torch.bool, torch.uint8) for _, t in given):
        return None
    shape = tuple(torch.broadcast_shapes(*[t.shape for _, t in given])) if given else ()
    indexed = [i for i, _ in given]
    rest = [d for d in range(x.ndim) if d not in indexed]
    if indexed and indexed == list(range(indexed[0], indexed[-1] + 1)):
        start = indexed[0]  # adjacent indexed dims: the index shape replaces them in place
        where = {d: d if d < start else d - len(indexed) + len(shape) for d in rest}
    else:  # separated (or none): index dims first, then the rest in order
        start = 0
        where = {d: len(shape) + k for k, d in enumerate(rest)}
    return shape, start, where


def _index_strategies(x: TensorSpec, indices: Sequence[TensorSpec | None],
                      values: TensorSpec | None) -> list[Strategy]:
    """Strategies shared by index (``values`` None) and index_put: x sharded on a dim that is
    not indexed (each rank indexes its own rows); the index tensors sharded along their
    broadcast dims (index: each rank looks up its own entries; index_put: see below)."""
    layout = _index_layout(x, indices)
    if layout is None:
        return []
    shape, start, where = layout
    n_idx = sum(t is not None for t in indices)
    res_shape = [0] * (len(shape) + len(where))  # the shape of x[indices]
    for d, o in where.items():
        res_shape[o] = x.shape[d]
    for j, s in enumerate(shape):
        res_shape[start + j] = s
    out = []
    for d, o in where.items():
        if values is None:
            out.append(Strategy((Shard(d),) + (R,) * n_idx, (Shard(o),)))
        else:  # values broadcast onto x[indices]: their dim aligned with o goes with d
            v = aligned_shards([values], res_shape, o)
            out.append(Strategy((Shard(d),) + (R,) * n_idx + v, (Shard(d),)))
    for j in range(len(shape)):
        if values is None:
            out.append(Strategy((R,) + aligned_shards(indices, shape, j), (Shard(start + j),)))
        else:
            # index_put(accumulate=True): each rank puts its own index entries (and values)
            # into its addend of x; the sum over ranks puts every entry once. P(sum) only
            ins = (Partial("sum"),) + aligned_shards(indices, shape, j)
            ins += aligned_shards([values], res_shape, start + j)
            out.append(Strategy(ins, (Partial("sum"),)))
    return out


@sharding_rule(aten.index.Tensor, aten._unsafe_index.Tensor)  # the same, unchecked bounds
def index(op: OpSpec) -> list[Strategy]:
    x = op.tensors()[0]
    indices = op.arg(1, "indices")
    n_idx = sum(t is not None for t in indices)
    out = [Strategy((R,) * (1 + n_idx), (R,))] + _index_strategies(x, indices, None)
    # picking commutes with every Partial: Note [selection keeps Partial]
    out += [Strategy((p,) + (R,) * n_idx, (p,)) for p in partials(x)]
    return out


@sharding_rule(aten.index_put.default, aten.index_put_.default)
def index_put(op: OpSpec) -> list[Strategy]:
    x = op.tensors()[0]
    indices = op.arg(1, "indices")
    accumulate = bool(op.arg(3, "accumulate", False))
    n_idx = sum(t is not None for t in indices)
    r_idx = (R,) * n_idx
    out = [Strategy((R,) + r_idx + (R,), (R,))]
    strategies = _index_strategies(x, indices, op.arg(2, "values"))
    # sharded index entries only add up under accumulate (P(sum) strategies)
    out += [s for s in strategies if accumulate or not isinstance(s.outputs[0], Partial)]
    if accumulate:  # x + put(v) is linear in (x, v) jointly
        out += [Strategy((p,) + r_idx + (p,), (p,)) for p in partials(x, LINEAR)]
    else:  # every element comes from x or from values: reducing commutes with the choice
        out += [Strategy((p,) + r_idx + (p,), (p,)) for p in partials(x)]
        # Replicate values written into a Partial: Note [selection keeps Partial]
        out += [Strategy((p,) + r_idx + (R,), (p,)) for p in partials(x)
                if p.reduce_op != "sum"]
    return out


# -- masked_fill ----------------------------------------------------------------------------
@sharding_rule(aten.masked_fill.Scalar, aten.masked_fill_.Scalar, aten.masked_fill.Tensor,
               aten.masked_fill_.Tensor)
def masked_fill(op: OpSpec) -> list[Strategy]:
    tensors = op.tensors()
    x = tensors[0]
    in_place = op.op._schema.name.endswith("_")
    shape = x.shape if in_place else tuple(torch.broadcast_shapes(x.shape, tensors[1].shape))
    out = [Strategy((R,) * len(tensors), (R,))]
    for d in range(len(shape)):  # elementwise: shard self and mask alike (value is 0-d)
        ins = aligned_shards(tensors[:2], shape, d) + (R,) * (len(tensors) - 2)
        out.append(Strategy(ins, (Shard(d),)))
    value = op.arg(2, "value")
    zero = not isinstance(value, TensorSpec) and value == 0
    if tuple(x.shape) == tuple(shape):  # a broadcast self would be a Partial of n copies
        # Note [selection keeps Partial]: a constant keeps P(avg/max/min); P(sum) if it is 0
        out += [Strategy((p,) + (R,) * (len(tensors) - 1), (p,)) for p in partials(x)
                if p.reduce_op != "sum" or zero]
    return out


# -- embedding ------------------------------------------------------------------------------
@sharding_rule(aten.embedding.default)
def embedding(op: OpSpec) -> list[Strategy]:
    weight, ids = op.tensors()
    out = [Strategy((R, R), (R,))]
    # the embedding dim of every looked-up row: out[..., e] = weight[ids[...], e]
    out.append(Strategy((Shard(1), R), (Shard(ids.ndim),)))
    # each rank looks up its own ids in the whole table
    out += [Strategy((R, Shard(d)), (Shard(d),)) for d in range(ids.ndim)]
    out += [Strategy((p, R), (p,)) for p in partials(weight)]  # Note [selection keeps Partial]
    # vocab-sharded weight: each rank looks up the ids in its rows and writes zeros for the
    # rest, so the ranks' outputs add up to the lookup (Note [local functions])
    out.append(Strategy((Shard(0), R), (Partial("sum"),), local="embedding_own_rows"))
    # rows and ids sharded alike, where every rank's ids name its own rows (torch.vmap over
    # stacked tables): a local lookup, the output sharded as the ids (Note [guarded local
    # functions])
    out += [Strategy((Shard(0), Shard(d)), (Shard(d),), local=_OWN_BLOCK)
            for d in range(ids.ndim)]
    return out


def _ids_in_own_rows(func: object, args: tuple, kwargs: dict,
                     boxes: Sequence[Sequence[tuple[int, int]] | None]) -> bool:
    (lo, hi), *_ = boxes[0]
    ids = args[1]
    return ids.numel() == 0 or bool(((ids >= lo) & (ids < hi)).all())


_OWN_BLOCK = "embedding_own_block"


@local_function(_OWN_BLOCK, guard=_ids_in_own_rows)
def embedding_own_block(func: object, args: tuple, kwargs: dict,
                        boxes: Sequence[Sequence[tuple[int, int]] | None]) -> torch.Tensor:
    """The lookup of ids that all fall in this rank's rows ``[lo, hi)``."""
    weight, ids = args[0], args[1]
    (lo, _), *_ = boxes[0]
    return func(weight, ids - lo, *args[2:], **kwargs)


@local_function("embedding_own_rows")
def embedding_own_rows(func: object, args: tuple, kwargs: dict,
                       boxes: Sequence[Sequence[tuple[int, int]] | None]) -> torch.Tensor:
    weight, ids = args[0], args[1]
    (lo, hi), *_ = boxes[0]
    mine = (ids >= lo) & (ids < hi)
    if hi == lo:  # an empty piece of the vocabulary: nothing to look up
        return weight.new_zeros(tuple(ids.shape) + tuple(weight.shape[1:]))
    rows = func(weight, torch.where(mine, ids - lo, torch.zeros_like(ids)), *args[2:], **kwargs)
    return rows * mine.unsqueeze(-1).to(rows.dtype)


@sharding_rule(aten.embedding_dense_backward.default)
def embedding_dense_backward(op: OpSpec) -> list[Strategy]:
    grad, ids = op.tensors()
    scale_by_freq = bool(op.arg(4, "scale_grad_by_freq"))
    out = [Strategy((R, R), (R,))]
    # grad_weight[v, e] = sum of grad[..., e] over positions with id v: columns e alone
    out.append(Strategy((Shard(ids.ndim), R), (Shard(1),)))
    if not scale_by_freq:
        # each rank sums over its own positions; the sum over ranks covers every position.
        # scale_grad_by_freq divides by counts of the LOCAL ids: not a piece of the whole
        out += [Strategy((Shard(d), Shard(d)), (Partial("sum"),)) for d in range(ids.ndim)]
    out += [Strategy((p, R), (p,)) for p in partials(grad, LINEAR)]  # linear in grad
    return out


# -- indexed writes along one dim, take, put ------------------------------------------------
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


# -- searches -------------------------------------------------------------------------------
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
