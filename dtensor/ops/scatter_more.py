"""``_chunk_cat`` (the FSDP gradient packer) and ``as_strided_scatter`` where its geometry is
the identity.

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

from collections.abc import Sequence
from typing import Any

import torch

from dtensor.ops._common import MOVES, R, dim_of, partials_of
from dtensor.ops.reductions import no_empty_piece
from dtensor.ops.registry import Box, OpSpec, Strategy, local_function, sharding_rule
from dtensor.placements import Shard

aten = torch.ops.aten
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
