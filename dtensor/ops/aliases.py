"""Ops that compute what an op with a rule computes, under another name: the ``*_copy``
variants of views (same values, a fresh tensor), ``unsafe_split`` (split without view
tracking), and ``rsub`` (sub with its operands swapped). Each takes that op's rule; the
argument positions match (checked by the soundness tests).
"""

from __future__ import annotations

import torch

from dtensor.ops import basic, views
from dtensor.ops._common import broadcast_shards
from dtensor.ops.registry import OpSpec, Strategy, sharding_rule
from dtensor.placements import Partial

aten = torch.ops.aten

# view_copy is left out: its view rule runs a local reshape that may alias the input piece
_SAME_AS = {
    views.t: (aten.t_copy.default,),
    views.transpose: (aten.transpose_copy.int,),
    views.permute: (aten.permute_copy.default,),
    views.unsqueeze: (aten.unsqueeze_copy.default,),
    views.squeeze: (aten.squeeze_copy.default, aten.squeeze_copy.dim, aten.squeeze_copy.dims),
    views.expand: (aten.expand_copy.default,),
    views.unbind: (aten.unbind_copy.int,),
    views.split: (aten.split_copy.Tensor, aten.unsafe_split.Tensor),
    views.split_with_sizes: (aten.split_with_sizes_copy.default,
                             aten.unsafe_split_with_sizes.default),
    views.slice_: (aten.slice_copy.Tensor,),
    views.select: (aten.select_copy.int,),
    basic._same: (aten.alias_copy.default, aten.detach_copy.default,
                  torch.ops.prims.view_of.default),  # prims' alias
}
for _rule, _ops in _SAME_AS.items():
    sharding_rule(*_ops)(_rule)


@sharding_rule(aten.rsub.Tensor)
def rsub(op: OpSpec) -> list[Strategy]:
    """``rsub(a, b, alpha) = b - alpha * a`` (rsub.Scalar is tagged pointwise and takes the
    generic rule): elementwise shards; two P(sum) (or P(avg)) tensors stay that Partial,
    sum(b_i - alpha a_i) = b - alpha a."""
    tensors = op.tensors()
    found = broadcast_shards(op)
    if not all(t.dtype.is_floating_point for t in tensors):
        return found
    if all(t.ndim > 0 for t in tensors):
        found += [Strategy((p, p), (p,)) for p in (Partial("sum"), Partial("avg"))]
    return found
