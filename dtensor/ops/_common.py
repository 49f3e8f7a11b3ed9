"""Helpers shared by the rule families: whether a dim's pieces are even or non-empty, and the
strategies of ops that keep some dims whole and carry the rest along (padding, pooling,
upsampling, FFT, linear algebra over batch dims).

Note [independent dims]
Many ops compute each slice along some dims on its own: pooling each (image, channel) plane,
an FFT each row not transformed, an inverse each matrix of a batch. Sharding such a dim gives
each rank whole slices, so its result is exactly its ``torch.chunk`` piece of the output on the
same dim, uneven and empty pieces included (an empty piece holds no slice). The other dims
(the plane, the transformed dims, the matrix) must be whole: Replicate there.

Note [linear in one argument]
An op linear in one tensor argument with the others fixed, f(a1 + a2) = f(a1) + f(a2), keeps
P(sum) on that argument (others Replicate); P(avg) too, since f(mean a_i) = mean f(a_i). Only
floating and complex tensors: an integer mean would round.

Note [moves keep every Partial]
An op whose every output element is one input element moved (reflection and replication
padding, nearest upsampling, diagonal, view_as_real) commutes with any elementwise
reduction over ranks, so P(sum)/P(avg)/P(max)/P(min) all pass through (``partials_of`` keeps
those the dtype can hold).

Note [empty pieces take the output's shape]
A rank whose piece is empty still holds a piece of the output's shape: full_tensor and every
later op read its shape. A few kernels return their empty input instead (ATen's
pixel_unshuffle: ``if numel == 0: return self.clone()``, so (0, 1, 6, 6) stays (0, 1, 6, 6)
where the output is (0, 9, 2, 2)). Their strategies run ``meta_shaped_when_empty``, which asks
the meta kernel for the outputs' shapes when an input is empty. Found by running every
op-database sample with one dim emptied against its meta kernel; tests/rules/test_image.py
keeps the pixel_unshuffle case.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Iterable, Sequence
from typing import Any

import torch

from dtensor.layout import chunk_bounds
from dtensor.ops.registry import OpSpec, Strategy, TensorSpec, local_function, takes_split_rules
from dtensor.placements import Partial, Replicate, Shard

R = Replicate()
LINEAR = (Partial("sum"), Partial("avg"))
MOVES = LINEAR + (Partial("max"), Partial("min"))


# Pieces of a dim sharded over this mesh dim (Note [uneven shards in reductions]).
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


def partials_of(t: TensorSpec, kinds: Sequence[Partial]) -> list[Partial]:
    """``kinds`` that can hold ``t``'s dtype: no P(avg) of integers (rounds) nor of complex
    (the runtime refuses it), no P(max)/P(min) of complex (unordered), none of bool."""
    if t.dtype.is_complex:  # the runtime divides only real floats for P(avg)
        return [p for p in kinds if p.reduce_op == "sum"]
    if not t.dtype.is_floating_point:
        if str(t.dtype) == "torch.bool":
            return []
        return [p for p in kinds if p.reduce_op != "avg"]
    return list(kinds)


@local_function("meta_shaped_when_empty")
def meta_shaped_when_empty(func: Any, args: tuple, kwargs: dict, boxes: Sequence) -> Any:
    """Note [empty pieces take the output's shape]: the op, with each empty output reshaped
    to what the meta kernel gives when some input piece is empty."""
    out = func(*args, **kwargs)
    if not any(isinstance(a, torch.Tensor) and a.numel() == 0 for a in args):
        return out
    meta = func(*(a.to("meta") if isinstance(a, torch.Tensor) else a for a in args), **kwargs)

    def shaped(t: torch.Tensor, m: torch.Tensor) -> torch.Tensor:  # empty stays empty
        return t if t.shape == m.shape or t.numel() or m.numel() else t.new_empty(m.shape)

    if isinstance(out, torch.Tensor):
        return shaped(out, meta)
    return type(out)(shaped(t, m) for t, m in zip(out, meta))


def dim_of(d: int, ndim: int) -> int:
    """A dim argument made non-negative (a 0-d tensor accepts 0 and -1)."""
    return d % max(ndim, 1)


def independent_dims(op: OpSpec, dims: Iterable[int], n_out: int, *,
                     sharded: Sequence[bool] | None = None,
                     nonempty: bool | Collection[int] = False,
                     local: str | None = None) -> list[Strategy]:
    """Note [independent dims]: Replicate, or for each ``d`` in ``dims`` every tensor input
    Shard(d) (those with ``sharded[i]`` False stay Replicate) and every output Shard(d).
    ``nonempty``: dims (True: all) sharded only where no rank gets an empty piece of them, for
    kernels that reject size 0 there."""
    tensors = op.tensors()
    n_in = len(tensors)
    flags = list(sharded) if sharded is not None else [True] * n_in
    found = [Strategy((R,) * n_in, (R,) * n_out, local)]
    for d in dims:
        size = next(t.shape[d] for t, f in zip(tensors, flags) if f)
        strict = nonempty is True or (nonempty is not False and d in nonempty)
        if strict and not no_empty_piece(op, size):
            continue
        ins = tuple(Shard(d) if f else R for f in flags)
        found.append(Strategy(ins, (Shard(d),) * n_out, local))
    return found


def linear_partials(op: OpSpec, pos: int, kinds: Sequence[Partial] = LINEAR,
                    outputs: Sequence[bool] | None = None, local: str | None = None
                    ) -> list[Strategy]:
    """Note [linear in one argument]: tensor ``pos`` Partial, the others Replicate; each output
    flagged in ``outputs`` (default: one output) is that Partial, the rest Replicate (outputs
    that do not read tensor ``pos``)."""
    tensors = op.tensors()
    flags = list(outputs) if outputs is not None else [True]
    found = []
    for p in partials_of(tensors[pos], kinds):
        ins = tuple(p if i == pos else R for i in range(len(tensors)))
        found.append(Strategy(ins, tuple(p if f else R for f in flags), local))
    return found


@takes_split_rules  # Note [split rules in propagation]
def broadcast_shards(op: OpSpec) -> list[Strategy]:
    """Elementwise with broadcasting: Replicate, or output Shard(d) with each input sharded
    on its dim aligned to d (Replicate where it broadcasts). The shard half of
    ``pointwise_rule``, for ops the pointwise tag misses (this module must not import
    ``pointwise``: importing it registers the generic rule before the families' own)."""
    tensors = op.tensors()
    out = tuple(torch.broadcast_shapes(*(t.shape for t in tensors)))
    found = [Strategy((R,) * len(tensors), (R,))]
    for d, size in enumerate(out):
        ins = []
        for t in tensors:
            i = d - (len(out) - t.ndim)
            ins.append(Shard(i) if i >= 0 and t.shape[i] == size else R)
        found.append(Strategy(tuple(ins), (Shard(d),)))
    return found


def plane_strategies(op: OpSpec, k: int, outputs: int, partials: Sequence[Partial],
                     empty_ok: bool, local: str | None = None) -> list[Strategy]:
    """Ops on the last ``k`` (spatial) dims of each (image, channel) plane (pooling,
    upsampling): shard any dim before them; the first tensor argument may take ``partials``.
    Most such kernels take an empty batch, the first dim of the batched ((k + 2)-d) form,
    but no empty channel (or unbatched first) dim: those shard only where no piece is empty,
    unless ``empty_ok``."""
    x = op.tensors()[0]
    lead = range(x.ndim - k)
    batched = x.ndim == k + 2
    nonempty = False if empty_ok else {d for d in lead if d or not batched}
    found = independent_dims(op, lead, outputs, nonempty=nonempty, local=local)
    return found + linear_partials(op, 0, partials, [True] * outputs, local=local)
