"""Pooling: max/avg/adaptive pooling in 2-d and 3-d, max_unpool, and their backward ops (the
1-d functions run the 2-d ops on an unsqueezed input; the non-indices ``max_pool*d`` and
``adaptive_*_pool*d`` are composite and never reach dispatch).

A k-d pool works on the last k (spatial) dims, each (image, channel) plane on its own: the
batch and channel dims are independent (Note [independent dims] in _common) and shard; the
indices a max pool returns count within one plane, so they are the same on every rank's
piece. The spatial dims are Replicate: windows straddle chunk edges (and adaptive windows are
placed by the global size).

Empty pieces: most kernels accept an empty batch only, the first dim of the batched
((k + 2)-d) form; a rank with no channels, or the unbatched form's empty first dim, is
rejected ("non-zero size for non-batch dimensions"), so those dims shard only where no piece is
empty. Only the 2-d adaptive average pooling forward takes any empty dim.

Partials (Note [linear in one argument]): avg and adaptive avg pooling are linear in the
input; every backward is linear in grad_output (max pool's scatters it to the saved argmax
positions). max_unpool writes each input value once into zeros: it moves elements (Note
[moves keep every Partial]). Max pooling's values would keep P(max), but its indices would
not: no Partial there.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dtensor.ops._common import LINEAR, MOVES, plane_strategies
from dtensor.ops.registry import OpSpec, Strategy, sharding_rule

aten = torch.ops.aten


@dataclass(frozen=True, slots=True)
class Pool:
    """One row of ``_TABLE``."""

    k: int  # spatial dims
    outputs: int
    partials: tuple = ()  # Partials the first tensor argument passes through
    empty_ok: bool = False  # the kernel takes an empty piece on every dim


_TABLE: dict[object, Pool] = {
    aten.max_pool2d_with_indices.default: Pool(2, 2),
    aten.max_pool3d_with_indices.default: Pool(3, 2),
    aten.adaptive_max_pool2d.default: Pool(2, 2),
    aten.adaptive_max_pool3d.default: Pool(3, 2),
    aten.avg_pool2d.default: Pool(2, 1, LINEAR),
    aten.avg_pool3d.default: Pool(3, 1, LINEAR),
    aten._adaptive_avg_pool2d.default: Pool(2, 1, LINEAR, empty_ok=True),
    aten._adaptive_avg_pool3d.default: Pool(3, 1, LINEAR),
    # (values, indices): zeros everywhere but the indexed positions
    aten.max_unpool2d.default: Pool(2, 1, MOVES),
    aten.max_unpool3d.default: Pool(3, 1, MOVES),
    # backward ops: (grad_output, self, ..., [indices]) -> grad_input, linear in grad_output
    aten.max_pool2d_with_indices_backward.default: Pool(2, 1, LINEAR),
    aten.max_pool3d_with_indices_backward.default: Pool(3, 1, LINEAR),
    aten.adaptive_max_pool2d_backward.default: Pool(2, 1, LINEAR),
    aten.adaptive_max_pool3d_backward.default: Pool(3, 1, LINEAR),
    aten.avg_pool2d_backward.default: Pool(2, 1, LINEAR),
    aten.avg_pool3d_backward.default: Pool(3, 1, LINEAR),
    aten._adaptive_avg_pool2d_backward.default: Pool(2, 1, LINEAR),
    aten._adaptive_avg_pool3d_backward.default: Pool(3, 1, LINEAR),
}


@sharding_rule(*_TABLE)
def pool(op: OpSpec) -> list[Strategy]:
    row = _TABLE[op.op]
    return plane_strategies(op, row.k, row.outputs, row.partials, row.empty_ok)
