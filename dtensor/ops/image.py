"""Image rearrangements that mix the channel and spatial dims: pixel_shuffle and
pixel_unshuffle, channel_shuffle, im2col / col2im, grid_sampler_2d/3d and its backward.

Each image of a batch is handled on its own, so the batch dims shard (Note [independent
dims] in _common); dims whose elements the op moves across (channels into space and back,
sliding windows over the spatial dims) stay whole. Details per op below.

Partials: the rearrangements move elements or fill zeros (Note [moves keep every Partial]);
col2im sums overlapping windows and grid sampling interpolates, both linear in the image
(Note [linear in one argument]), not in the sampling grid.

Note [grid sampling's gradients]
Output point (n, c, o) reads input image (n, c) at grid point (n, o) with weights of the
grid point alone. So:
- batch N: image n needs only grid n and grad_out n: all S(0) -> both gradients S(0).
- channels C: grad_input of channel c reads grad_out and input of channel c only (S(1));
  grad_grid at (n, o) adds over channels: each rank's channels give an addend, P(sum).
- output points (the dims of ``*out``): a grid point's gradient reads its own grad_out and
  the whole input (grad_out S(2 + j), grid S(1 + j), input R -> grad_grid S(1 + j)); each
  point scatters its weights into grad_input, so grad_input is a sum over ranks: P(sum).
- both gradients are linear in grad_out (the rest fixed): P(sum)/P(avg) -> the same Partial.
- grad_input reads the grid and grad_out, never the input's values; grad_grid is linear in
  the input's values: input P(sum)/P(avg), the rest R -> grad_input R, grad_grid the Partial.
The input's own spatial dims are read at data-dependent points: whole.
"""

from __future__ import annotations

import torch

from dtensor.ops._common import LINEAR, MOVES, R, independent_dims, partials_of
from dtensor.ops.registry import OpSpec, Strategy, sharding_rule
from dtensor.placements import Partial, Placement, Shard

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


# The backward: ``grid_sampler_2d_backward`` / ``grid_sampler_3d_backward``
# (``(grad_out (N, C, *out), input (N, C, *in), grid (N, *out, k), interpolation, padding,
# align_corners, output_mask) -> (grad_input, grad_grid)``). grad_input is left out (None) when
# ``output_mask[0]`` is False; grad_grid is always returned.
@sharding_rule(aten.grid_sampler_2d_backward.default, aten.grid_sampler_3d_backward.default)
def grid_sampler_backward(op: OpSpec) -> list[Strategy]:
    """Note [grid sampling's gradients]."""
    g, x, grid = op.tensors()
    has_gi = bool(op.arg(6, "output_mask")[0])

    def outs(gi: Placement, gg: Placement) -> tuple[Placement, ...]:
        return (gi, gg) if has_gi else (gg,)

    found = [Strategy((R, R, R), outs(R, R)),
             Strategy((Shard(0),) * 3, outs(Shard(0), Shard(0))),
             Strategy((Shard(1), Shard(1), R), outs(Shard(1), Partial()))]
    found += [Strategy((Shard(2 + j), R, Shard(1 + j)), outs(Partial(), Shard(1 + j)))
              for j in range(grid.ndim - 2)]
    found += [Strategy((k, R, R), outs(k, k)) for k in partials_of(g, LINEAR)]
    found += [Strategy((R, k, R), outs(R, k)) for k in partials_of(x, LINEAR)]
    return found
