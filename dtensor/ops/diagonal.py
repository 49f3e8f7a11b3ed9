"""The diagonal family: diagonal, diagonal_copy, diagonal_backward, diag_embed,
diagonal_scatter; and the triangle masks tril/triu (and their in-place forms).

``diagonal(x, offset, dim1, dim2)`` drops dims dim1 and dim2 and appends the diagonal as the
last dim; ``diag_embed`` is its inverse, spreading the last dim over two new dims (zeros
elsewhere), and ``diagonal_backward`` writes a gradient back onto the diagonal of zeros. Every
other dim is carried through unchanged in order, so it may be sharded (Note [independent
dims] in _common) and comes out sharded as its new position. The two matrix dims are whole:
a rank's rows of the matrix hold the diagonal at columns only the whole row range names.

Every output element is one input element or a zero, and zero reduces to zero under every
Partial kind, so all Partials pass (Note [moves keep every Partial]).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from dtensor.ops._common import MOVES, R, dim_of, partials_of
from dtensor.ops.registry import OpSpec, Strategy, sharding_rule
from dtensor.placements import Shard

aten = torch.ops.aten


def _carried(op: OpSpec, pairs: Sequence[tuple[int, int]]) -> list[Strategy]:
    """R, S(i) -> S(o) for each carried (input dim, output dim), every Partial kind."""
    x = op.tensors()[0]
    found = [Strategy((R,), (R,))] + [Strategy((Shard(i),), (Shard(o),)) for i, o in pairs]
    return found + [Strategy((p,), (p,)) for p in partials_of(x, MOVES)]


def _others(ndim: int, a: int, b: int) -> list[int]:
    return [d for d in range(ndim) if d not in (a, b)]


@sharding_rule(aten.diagonal.default, aten.diagonal_copy.default)
def diagonal(op: OpSpec) -> list[Strategy]:
    """``(x, offset, dim1, dim2)``: kept dims keep their order, diagonal last."""
    x = op.tensors()[0]
    a, b = dim_of(op.arg(2, "dim1", 0), x.ndim), dim_of(op.arg(3, "dim2", 1), x.ndim)
    return _carried(op, [(d, o) for o, d in enumerate(_others(x.ndim, a, b))])


@sharding_rule(aten.diagonal_backward.default)
def diagonal_backward(op: OpSpec) -> list[Strategy]:
    """``(grad, input_sizes, offset, dim1, dim2)``: grad dim o is input dim others[o]; each
    rank gets its own ``input_sizes`` (Note [global size arguments] in views)."""
    n = len(op.arg(1, "input_sizes"))
    a, b = dim_of(op.arg(3, "dim1"), n), dim_of(op.arg(4, "dim2"), n)
    return _carried(op, [(o, d) for o, d in enumerate(_others(n, a, b))])


@sharding_rule(aten.diag_embed.default)
def diag_embed(op: OpSpec) -> list[Strategy]:
    """``(x, offset=0, dim1=-2, dim2=-1)``: output has one more dim; x's last dim is the
    diagonal, x's other dims fill the output dims other than dim1, dim2 in order."""
    x = op.tensors()[0]
    n = x.ndim + 1
    a, b = dim_of(op.arg(2, "dim1", -2), n), dim_of(op.arg(3, "dim2", -1), n)
    return _carried(op, list(enumerate(_others(n, a, b)))[:max(x.ndim - 1, 0)])


@sharding_rule(aten.tril.default, aten.triu.default, aten.tril_.default, aten.triu_.default)
def triangle(op: OpSpec) -> list[Strategy]:
    """``tril(x, diagonal)`` keeps x[..., i, j] where j - i <= diagonal, zeros the rest. The
    mask is drawn by global row and column, so the last two dims are whole (a rank's rows
    would be masked as if they started at row 0); each leading (batch) dim carries through.
    Kept elements and zeros reduce to themselves under every Partial kind."""
    x = op.tensors()[0]
    return _carried(op, [(d, d) for d in range(max(x.ndim - 2, 0))])


@sharding_rule(aten.diagonal_scatter.default)
def diagonal_scatter(op: OpSpec) -> list[Strategy]:
    """``(x, src, offset, dim1, dim2)``: x with its diagonal replaced by src (shaped like
    ``diagonal(x, ...)``). A carried dim of x shards with src's matching dim (src's dim o is
    x's dim others[o]); both Partial alike stay that Partial: each output element is an
    element of x or of src, picked by position alone."""
    x, src = op.tensors()
    a, b = dim_of(op.arg(3, "dim1", 0), x.ndim), dim_of(op.arg(4, "dim2", 1), x.ndim)
    found = [Strategy((R, R), (R,))]
    found += [Strategy((Shard(d), Shard(o)), (Shard(d),))
              for o, d in enumerate(_others(x.ndim, a, b))]
    kinds = [p for p in partials_of(x, MOVES) if p in partials_of(src, MOVES)]
    return found + [Strategy((p, p), (p,)) for p in kinds]
