"""Copying views and their scatters: view_copy, narrow_copy, unfold/unfold_copy (and
unfold_backward), rot90, select_scatter, slice_scatter, as_strided_scatter (where its geometry
is the identity), and ``_chunk_cat`` (the FSDP gradient packer).

Each output element is one input element moved (or, in a scatter, one element of ``self`` or
of ``src``), so every dim the op does not move elements along comes through whole: sharded
alike in every tensor input, each rank computes its own chunk of the output (uneven and empty
pieces included). Along a dim the op cuts, windows, rotates or writes into, a chunk of the
output is not the op of a chunk: that dim stays Replicate.

Partials follow Note [moves keep every Partial] (``_common``): P(sum)/P(avg)/P(max)/P(min)
pass through a move; a scatter takes each element from ``self`` or ``src``, so both the same
Partial pass jointly. unfold_backward adds overlapping windows: linear only (P(sum)/P(avg)).

``_chunk_cat(tensors, dim, num_chunks)``: each tensor is zero-padded along ``dim`` to a
multiple of ``num_chunks``, viewed as (*lead, num_chunks, -1) (its dims from ``dim`` on
flattened into the chunks) and the views are concatenated on the last dim: shape
(*lead, num_chunks, sum of chunk sizes). The leading dims (before ``dim``) are carried along
element by element, alike in every tensor: sharded jointly, each rank packs its own rows, and
its result is its chunk of the output (uneven pieces included; the kernel rejects an empty
tensor, so a leading dim shards only where no piece of it is empty). The dims from
``dim`` on are cut into chunks and flattened: whole. Partials: each element is one input
element moved or a padding zero, the same zero on every rank (Note [moves keep every Partial]
in _common: a reduction over ranks of zeros is zero for sum, avg, max and min).

``as_strided_scatter(self, src, size, stride, storage_offset)``: a copy of ``self`` with the
strided view ``(size, stride, storage_offset)`` of it overwritten by ``src``. Sizes, strides
and the offset are global storage coordinates, which no piece shares in general: Replicate.
Where the view is all of a contiguous ``self`` (size = self's shape, contiguous strides,
offset 0), the result is ``src`` laid out like ``self``: every dim shards jointly in self and
src, each rank writing its own piece (local function ``as_strided_scatter_whole``: the global
geometry would not fit its piece). Partials as for a move, jointly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from dtensor.ops._common import LINEAR, MOVES, dim_of, no_empty_piece, partials_of
from dtensor.ops.registry import Box, OpSpec, Strategy, local_function, sharding_rule
from dtensor.ops.views import view_shards
from dtensor.placements import Partial, Replicate, Shard

aten = torch.ops.aten
R = Replicate()


def _moves(op: OpSpec, pairs: Sequence[tuple[Sequence[int], int]],
           kinds: Sequence[Partial] = MOVES, local: str | None = None) -> list[Strategy]:
    """R; for each (input dims, output dim): input k Shard(dims[k]) -> Shard(output dim);
    each of ``kinds`` (that the first tensor's dtype holds) on every input jointly."""
    n = len(op.tensors())
    found = [Strategy((R,) * n, (R,), local)]
    found += [Strategy(tuple(Shard(i) for i in ins), (Shard(o),), local) for ins, o in pairs]
    found += [Strategy((p,) * n, (p,), local) for p in partials_of(op.tensors()[0], kinds)]
    return found


def _whole_range(start: Any, end: Any, step: Any, size: int) -> bool:
    """A slice [start:end:step] of a dim of ``size`` that is all of it."""
    return start in (None, 0) and (end is None or end >= size) and step in (None, 1)


# -- copies of views ---------------------------------------------------------------------------
@sharding_rule(aten.narrow_copy.default)
def narrow_copy(op: OpSpec) -> list[Strategy]:
    """``x.narrow(dim, start, length).clone()``: ``dim`` is cut in global coordinates (even a
    narrow of all of it names a global length, longer than a piece), so it stays whole."""
    t = op.tensors()[0]
    dim = dim_of(op.arg(1, "dim"), t.ndim)
    return _moves(op, [((d,), d) for d in range(t.ndim) if d != dim])


@sharding_rule(aten.view_copy.default)
def view_copy(op: OpSpec) -> list[Strategy]:
    """``x.view(size).clone()``: the dims a Shard passes through as for ``view`` (Note [view
    shards] in views), each rank reshaping its piece to its output piece's shape (Note
    [global size arguments]) and copying it (local function)."""
    t = op.tensors()[0]
    sizes = list(op.arg(1, "size"))
    numel = math.prod(t.shape)
    if -1 in sizes:
        rest = math.prod(s for s in sizes if s != -1)
        sizes[sizes.index(-1)] = numel // rest if rest else 0
    parts = math.prod(op.mesh_shape[:op.mesh_dim + 1])
    pairs = [((i,), o) for i, o in view_shards(t.shape, sizes, parts)]
    return _moves(op, pairs, local=_VIEW_COPY)


_VIEW_COPY = "view_copy_piece"


@local_function(_VIEW_COPY)
def _view_copy_piece(func: Any, args: tuple, kwargs: dict, boxes: Sequence[Box | None]) -> Any:
    x = args[0]
    size = args[1] if len(args) > 1 else kwargs["size"]
    # the piece's strides are its own (Note [a piece's own strides] in views): reshape, copy
    return x.reshape(size).clone(memory_format=torch.contiguous_format)


@sharding_rule(aten.view_copy.dtype)
def view_copy_dtype(op: OpSpec) -> list[Strategy]:
    """Bits reinterpreted as another dtype: the same itemsize keeps every dim; another one
    regroups the last dim's bytes, so the last dim stays whole. Reinterpreted bits are not
    addends of anything: no Partial."""
    t = op.tensors()[0]
    new = op.arg(1, "dtype")
    size = torch.empty((), dtype=new).element_size()
    same = size == torch.empty((), dtype=t.dtype).element_size()
    dims = range(t.ndim if same else max(t.ndim - 1, 0))
    return [Strategy((R,), (R,))] + [Strategy((Shard(d),), (Shard(d),)) for d in dims]


@sharding_rule(aten.unfold.default, aten.unfold_copy.default)
def unfold(op: OpSpec) -> list[Strategy]:
    """``unfold(x, dim, size, step)``: windows of ``size`` every ``step`` along ``dim`` (which
    becomes the window count, the window a new last dim). A window may span two chunks:
    ``dim`` stays whole; every other dim keeps its position and pieces."""
    t = op.tensors()[0]
    dim = dim_of(op.arg(1, "dimension"), t.ndim)
    return _moves(op, [((d,), d) for d in range(t.ndim) if d != dim])


@sharding_rule(aten.unfold_backward.default)
def unfold_backward(op: OpSpec) -> list[Strategy]:
    """``(grad_in, input_sizes, dim, size, step)``: the windows' gradients added back where
    they came from along ``dim`` (whole); other dims keep their pieces, each rank's output
    sized by its piece (Note [global size arguments]). Overlapping windows add: linear in
    grad_in, not max-preserving."""
    n = len(op.arg(1, "input_sizes"))
    dim = dim_of(op.arg(2, "dim"), n)
    return _moves(op, [((d,), d) for d in range(n) if d != dim], LINEAR)


@sharding_rule(aten.rot90.default)
def rot90(op: OpSpec) -> list[Strategy]:
    """``rot90(x, k, dims)``: k = 0 (mod 4) is a copy, every dim shards; otherwise the two
    dims are flipped (and swapped for odd k), so both stay whole and the others keep their
    pieces."""
    t = op.tensors()[0]
    k = op.arg(1, "k", 1) % 4
    plane = {dim_of(d, t.ndim) for d in op.arg(2, "dims", (0, 1))}
    return _moves(op, [((d,), d) for d in range(t.ndim) if k == 0 or d not in plane])


# -- scatters into a view ----------------------------------------------------------------------
@sharding_rule(aten.select_scatter.default)
def select_scatter(op: OpSpec) -> list[Strategy]:
    """``(self, src, dim, index)``: self with ``self.select(dim, index) = src``. ``dim`` is
    written at a global index (whole); every other dim of self pairs with src's."""
    x = op.tensors()[0]
    dim = dim_of(op.arg(2, "dim"), x.ndim)
    return _moves(op, [((d, d - (d > dim)), d) for d in range(x.ndim) if d != dim])


@sharding_rule(aten.slice_scatter.default)
def slice_scatter(op: OpSpec) -> list[Strategy]:
    """``(self, src, dim, start, end, step)``: self with ``self[start:end:step] = src`` along
    ``dim``. The range is global, so ``dim`` is whole unless it covers all of it (then src has
    self's shape and each rank writes its own rows); other dims pair up."""
    x = op.tensors()[0]
    dim = dim_of(op.arg(2, "dim", 0), x.ndim)
    keep = x.ndim and _whole_range(op.arg(3, "start"), op.arg(4, "end"), op.arg(5, "step", 1),
                                   x.shape[dim])
    return _moves(op, [((d, d), d) for d in range(x.ndim) if d != dim or keep])


@sharding_rule(aten.block_diag.default)
def block_diag(op: OpSpec) -> list[Strategy]:
    """``block_diag(t1, t2, ...)``: the inputs placed along the diagonal of a zero matrix. Its
    rows and columns concatenate the inputs' (a chunk of the output is not the block_diag of
    chunks): Replicate. Each element is one input element or a zero, so a Partial on every
    input jointly passes (Note [moves keep every Partial])."""
    return _moves(op, [])


# -- the FSDP gradient packer, whole-view as_strided_scatter -----------------------------------
_WHOLE = "as_strided_scatter_whole"


@sharding_rule(aten._chunk_cat.default)
def chunk_cat(op: OpSpec) -> list[Strategy]:
    """Leading dims jointly; Partials jointly (module docstring)."""
    tensors = op.tensors()
    n = len(tensors)
    dim = dim_of(op.arg(1, "dim"), tensors[0].ndim)
    found = [Strategy((R,) * n, (R,))]
    found += [Strategy((Shard(d),) * n, (Shard(d),)) for d in range(dim)
              if no_empty_piece(op, tensors[0].shape[d])]
    return found + [Strategy((p,) * n, (p,)) for p in partials_of(tensors[0], MOVES)]


def _contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, step = [], 1
    for s in reversed(shape):
        strides.append(step)
        step *= max(s, 1)
    return tuple(reversed(strides))


@sharding_rule(aten.as_strided_scatter.default)
def as_strided_scatter(op: OpSpec) -> list[Strategy]:
    """Replicate; for a view that is all of a contiguous self, every dim and every move
    Partial jointly (module docstring)."""
    x, src = op.tensors()
    found = [Strategy((R, R), (R,))]
    size = tuple(op.arg(2, "size"))
    stride = tuple(op.arg(3, "stride"))
    offset = op.arg(4, "storage_offset")
    contiguous = _contiguous_strides(x.shape)
    whole = (size == x.shape == src.shape and stride == contiguous == x.stride
             and offset in (None, 0))
    if not whole:
        return found
    found += [Strategy((Shard(d), Shard(d)), (Shard(d),), _WHOLE) for d in range(x.ndim)]
    return found + [Strategy((p, p), (p,), _WHOLE) for p in partials_of(x, MOVES)]


@local_function(_WHOLE)
def _as_strided_scatter_whole(func: Any, args: tuple, kwargs: dict,
                              boxes: Sequence[Box | None]) -> Any:
    """The view is all of self: the result is this rank's piece of src, in a fresh tensor."""
    src = args[1]
    return src.clone(memory_format=torch.contiguous_format)
