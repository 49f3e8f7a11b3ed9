"""Elementwise ops the pointwise tag misses: floor_divide, prelu's kernel and its backward,
glu and its backward, _safe_softmax.

floor_divide and _prelu_kernel are elementwise with broadcasting: matching pieces
(``broadcast_shards``). Neither is linear: floor(a1/b) + floor(a2/b) != floor((a1+a2)/b), and
prelu(a1) + prelu(a2) != prelu(a1 + a2) when the signs differ; no Partial passes.
"""

from __future__ import annotations

import torch

from dtensor.ops._common import LINEAR, broadcast_shards, linear_partials
from dtensor.ops.indexing import aligned_shards
from dtensor.ops.norms import softmax
from dtensor.ops.registry import OpSpec, Strategy, sharding_rule
from dtensor.placements import Replicate, Shard

aten = torch.ops.aten
R = Replicate()

sharding_rule(aten.floor_divide.default, aten.floor_divide.Scalar,
              aten._prelu_kernel.default)(broadcast_shards)

# _safe_softmax(x, dim, dtype) is softmax with rows of -inf giving 0: the same statistics over
# ``dim``, so the same rule (any other dim shards; not linear)
sharding_rule(aten._safe_softmax.default)(softmax)


@sharding_rule(aten._prelu_kernel_backward.default)
def prelu_kernel_backward(op: OpSpec) -> list[Strategy]:
    """``(g, x, w) -> (g * (x > 0 ? 1 : w), g * (x > 0 ? 0 : x))``, both elementwise over the
    broadcast shape (autograd sums grad_w down to w's shape afterwards): matching pieces, and
    linear in g."""
    tensors = op.tensors()
    shape = tuple(torch.broadcast_shapes(*(t.shape for t in tensors)))
    found = [Strategy((R, R, R), (R, R))]
    found += [Strategy(aligned_shards(tensors, shape, d), (Shard(d), Shard(d)))
              for d in range(len(shape))]
    return found + linear_partials(op, 0, LINEAR, [True, True])


def _glu_dim(op: OpSpec, pos: int, ndim: int) -> int:
    return op.arg(pos, "dim", -1) % max(ndim, 1)


@sharding_rule(aten.glu.default)
def glu(op: OpSpec) -> list[Strategy]:
    """glu(x, dim) = a * sigmoid(b), a and b the halves of x along ``dim``: element i of the
    output reads elements i and i + n/2 of ``dim``, so ``dim`` stays whole (a chunk's halves
    are not the halves' chunks); every other dim shards. a * sigmoid(b) is not linear."""
    t = op.tensors()[0]
    dim = _glu_dim(op, 1, t.ndim)
    return [Strategy((R,), (R,))] + [Strategy((Shard(d),), (Shard(d),))
                                     for d in range(t.ndim) if d != dim]


@sharding_rule(aten.glu_backward.default)
def glu_backward(op: OpSpec) -> list[Strategy]:
    """``(g, x, dim)``: [g * sigmoid(b), g * a * sigmoid(b) * (1 - sigmoid(b))] along ``dim``:
    ``dim`` whole, other dims shard alike in g and x; linear in g."""
    x = op.tensors()[1]
    dim = _glu_dim(op, 2, x.ndim)
    found = [Strategy((R, R), (R,))]
    found += [Strategy((Shard(d), Shard(d)), (Shard(d),)) for d in range(x.ndim) if d != dim]
    return found + linear_partials(op, 0, LINEAR)
