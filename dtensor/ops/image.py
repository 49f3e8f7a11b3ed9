"""Image rearrangements that mix the channel and spatial dims: pixel_shuffle and
pixel_unshuffle, channel_shuffle, im2col / col2im, grid_sampler_2d/3d (its backward is in
image_backward.py).

Each image of a batch is handled on its own, so the batch dims shard (Note [independent
dims] in _common); dims whose elements the op moves across (channels into space and back,
sliding windows over the spatial dims) stay whole. Details per op below.

Partials: the rearrangements move elements or fill zeros (Note [moves keep every Partial]);
col2im sums overlapping windows and grid sampling interpolates, both linear in the image
(Note [linear in one argument]), not in the sampling grid.
"""

from __future__ import annotations

import torch

from dtensor.ops._common import LINEAR, MOVES, R, independent_dims, partials_of
from dtensor.ops.registry import OpSpec, Strategy, sharding_rule
from dtensor.placements import Shard

aten = torch.ops.aten


def _moves(op: OpSpec, dims: list[int], local: str | None = None) -> list[Strategy]:
    x = op.tensors()[0]
    return independent_dims(op, dims, 1, local=local) + [
        Strategy((p,), (p,), local) for p in partials_of(x, MOVES)]


@sharding_rule(aten.pixel_shuffle.default, aten.pixel_unshuffle.default)
def pixel_shuffle(op: OpSpec) -> list[Strategy]:
    """(*, C r^2, H, W) <-> (*, C, H r, W r): channel blocks become pixel blocks, so the last
    three dims are whole; every leading dim shards. pixel_unshuffle returns an empty input
    as it is (Note [empty pieces take the output's shape])."""
    local = "meta_shaped_when_empty" if op.op is aten.pixel_unshuffle.default else None
    return _moves(op, list(range(op.tensors()[0].ndim - 3)), local)


@sharding_rule(aten.channel_shuffle.default)
def channel_shuffle(op: OpSpec) -> list[Strategy]:
    """(N, C, *): permutes dim 1 only; the batch and every spatial dim shard."""
    x = op.tensors()[0]
    return _moves(op, [d for d in range(x.ndim) if d != 1])


@sharding_rule(aten.im2col.default)
def im2col(op: OpSpec) -> list[Strategy]:
    """(N, C, H, W) -> (N, C kh kw, L) windows (zeros where padded): the batch dim of the
    batched form shards; the unbatched (C, H, W) form has none."""
    x = op.tensors()[0]
    return _moves(op, [0] if x.ndim == 4 else [])


@sharding_rule(aten.col2im.default)
def col2im(op: OpSpec) -> list[Strategy]:
    """(N, C kh kw, L) -> (N, C, H, W), overlapping windows summed: batch dim of the
    batched form; linear."""
    x = op.tensors()[0]
    found = independent_dims(op, [0] if x.ndim == 3 else [], 1)
    return found + [Strategy((p,), (p,)) for p in partials_of(x, LINEAR)]


@sharding_rule(aten.grid_sampler_2d.default, aten.grid_sampler_3d.default)
def grid_sampler(op: OpSpec) -> list[Strategy]:
    """``(input (N, C, *in), grid (N, *out, k), ...) -> (N, C, *out)``: image n is sampled at
    grid n's points, each channel alike: N sharded on both; C on the input alone (every
    channel reads the whole grid). Linear in the input with the grid fixed."""
    x = op.tensors()[0]
    found = [Strategy((R, R), (R,)), Strategy((Shard(0), Shard(0)), (Shard(0),)),
             Strategy((Shard(1), R), (Shard(1),))]
    return found + [Strategy((p, R), (p,)) for p in partials_of(x, LINEAR)]

