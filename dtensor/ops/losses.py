"""Losses: nll_loss (the second half of cross_entropy, 2-D and 4-D) and mse_loss, with their
backward ops.

A loss is a sum over positions (batch, and spatial dims for nll_loss2d) of a per-position
term, then reduced: ``none`` keeps one value per position, ``sum`` adds them, ``mean``
divides by a count. Per mesh dim:

- positions sharded alike in input and target: ``none`` stays sharded, ``sum`` is P(sum).
- ``mean`` is a ratio of two sums. The local op divides by the LOCAL count, and local counts
  differ (uneven shards, ignore_index, class weights), so P(avg) is not the mean:
  (1/2)(a1/n1 + a2/n2) != (a1 + a2)/(n1 + n2) unless n1 == n2. nll_loss's count depends on
  the target's values, so no sharded ``mean`` is offered; mse_loss's count is the number of
  elements, so P(avg) is offered when every shard has the same size (Note [even shards]).
- the backward ops are linear in grad_output: P(sum)/P(avg) grads give P grads.

Note [even shards]
A dim whose size is a multiple of the product of ALL mesh dim sizes splits evenly however the
mesh dims nest on it; a rule sees one mesh dim at a time, so it asks for that stronger
condition. If every sharded dim of the candidate satisfies it, all ranks hold equally many
elements and the average of local means is the mean.

Note [class-sharded nll_loss]
log-probabilities sharded on the class dim would give P(sum) loss if each rank picked the
target's log-prob where it holds that class and 0 elsewhere (target shifted by the rank's
offset, out-of-range targets masked). The plain local nll_loss with global targets is not
that computation (it indexes out of range), so the strategy needs a local function the
dispatcher cannot run yet; not offered.
"""

from __future__ import annotations

import math

import torch

from dtensor.ops.indexing import aligned_shards, partials
from dtensor.ops.registry import OpSpec, Strategy, TensorSpec, sharding_rule
from dtensor.placements import Partial, Placement, Replicate, Shard

aten = torch.ops.aten
R = Replicate()
NONE, MEAN, SUM = 0, 1, 2  # at::Reduction
LINEAR = (Partial("sum"), Partial("avg"))


def _position_dims(x: TensorSpec) -> list[tuple[int, int]]:
    """(input dim, target dim) pairs that index positions: batch, then spatial dims; the
    class dim (input dim 1, or 0 for an unbatched input) has no target dim."""
    if x.ndim < 2:
        return []
    return [(0, 0)] + [(k, k - 1) for k in range(2, x.ndim)]


@sharding_rule(aten.nll_loss_forward.default, aten.nll_loss2d_forward.default)
def nll_loss_forward(op: OpSpec) -> list[Strategy]:
    tensors = op.tensors()
    x = tensors[0]
    reduction = op.arg(3, "reduction")
    w = (R,) * (len(tensors) - 2)  # class weights, if given: every rank needs all of them
    out = [Strategy((R, R) + w, (R, R))]
    for xd, td in _position_dims(x):
        if reduction == NONE:  # one loss per position; total_weight is not computed (0)
            out.append(Strategy((Shard(xd), Shard(td)) + w, (Shard(td), R)))
        elif reduction == SUM:  # sum over positions = sum over ranks of local sums
            out.append(Strategy((Shard(xd), Shard(td)) + w,
                                (Partial("sum"), Partial("sum"))))
        # MEAN: local mean = local sum / local total_weight: no Partial of the ranks' means
    # linear in the log-probs: target and weights fix which entries are taken and total_weight
    out += [Strategy((p, R) + w, (p, R)) for p in partials(x, LINEAR)]
    # Note [class-sharded nll_loss]
    return out


@sharding_rule(aten.nll_loss_backward.default, aten.nll_loss2d_backward.default)
def nll_loss_backward(op: OpSpec) -> list[Strategy]:
    tensors = op.tensors()  # grad_output, self, target, [weight], total_weight
    grad, x = tensors[0], tensors[1]
    reduction = op.arg(4, "reduction")
    w = (R,) * (len(tensors) - 4)
    out = [Strategy((R,) * len(tensors), (R,))]
    for xd, td in _position_dims(x):
        # grad_input[i, target[i]] = -weight[target[i]] * grad (/ total_weight for mean):
        # row i needs only its own target, and total_weight is the global one (Replicate)
        g: Placement = Shard(td) if reduction == NONE else R
        out.append(Strategy((g, Shard(xd), Shard(td)) + w + (R,), (Shard(xd),)))
    # linear in grad_output; self only gives the shape
    out += [Strategy((p, R, R) + w + (R,), (p,)) for p in partials(grad, LINEAR)]
    return out


def _even(op: OpSpec, size: int) -> bool:
    """Note [even shards]."""
    return size > 0 and size % math.prod(op.mesh_shape) == 0


@sharding_rule(aten.mse_loss.default)
def mse_loss(op: OpSpec) -> list[Strategy]:
    x, target = op.tensors()
    reduction = op.arg(2, "reduction", MEAN)
    shape = tuple(torch.broadcast_shapes(x.shape, target.shape))
    out = [Strategy((R, R), (R,))]
    for d in range(len(shape)):
        ins = aligned_shards([x, target], shape, d)
        if reduction == NONE:  # elementwise
            out.append(Strategy(ins, (Shard(d),)))
        elif reduction == SUM:  # sum over elements = sum over ranks of local sums
            out.append(Strategy(ins, (Partial("sum"),)))
        elif _even(op, shape[d]) and x.dtype.is_floating_point:  # Note [even shards]
            out.append(Strategy(ins, (Partial("avg"),)))
    # (x - t)^2 is not linear: no Partial inputs
    return out


@sharding_rule(aten.mse_loss_backward.default)
def mse_loss_backward(op: OpSpec) -> list[Strategy]:
    grad, x, target = op.tensors()
    reduction = op.arg(3, "reduction")
    shape = x.shape
    out = [Strategy((R, R, R), (R,))]
    for d in range(len(shape)):
        ins = aligned_shards([x, target], shape, d)
        if reduction == NONE:  # 2 (x - t) * grad, elementwise
            out.append(Strategy(aligned_shards([grad], shape, d) + ins, (Shard(d),)))
        elif reduction == SUM:  # grad is the 0-d gradient of the sum: every rank needs it
            out.append(Strategy((R,) + ins, (Shard(d),)))
        # MEAN scales by 2 / numel of the LOCAL input: k times too large on k even shards
    out += [Strategy((p, R, R), (p,)) for p in partials(grad, LINEAR)]  # linear in grad
    return out
