"""The backward of grid sampling: ``grid_sampler_2d_backward`` / ``grid_sampler_3d_backward``
(``(grad_out (N, C, *out), input (N, C, *in), grid (N, *out, k), interpolation, padding,
align_corners, output_mask) -> (grad_input, grad_grid)``). grad_input is left out (None) when
``output_mask[0]`` is False; grad_grid is always returned.

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

from dtensor.ops._common import LINEAR, R, partials_of
from dtensor.ops.registry import OpSpec, Strategy, sharding_rule
from dtensor.placements import Partial, Placement, Shard

aten = torch.ops.aten


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
