"""Elementwise and per-row losses: binary_cross_entropy (with logits), huber_loss,
smooth_l1_loss, soft_margin_loss, multi_margin_loss, multilabel_margin_loss, with their
backward ops. (nll_loss and mse_loss: ``losses``.)

An elementwise loss computes one term per element of the broadcast shape of its tensors,
l = f(x, t, w, ...), then reduces: ``none`` keeps the terms, ``sum`` adds them, ``mean``
divides the sum by the element count. A per-row loss (multi_margin, multilabel_margin)
computes one term per row of an (N, C) input from that whole row; its count is N. Per mesh
dim:

- a dim of the terms sharded alike in every tensor (Replicate where one broadcasts):
  ``none`` stays sharded, ``sum`` is P(sum) (the sum of the local sums), ``mean`` is P(avg)
  only where every rank holds equally many terms (Note [even pieces of a mean]).
- f is not linear (log, |.|, clamp, exp): no Partial input passes through the forward.
- Note [loss backward]: grad_input = f'(x, t, ...) * g, and for ``mean`` also / count. Each
  term's gradient needs only its own element (row), so the dims shard as in the forward with
  ``g`` sharded alike for ``none`` and Replicate (0-d) for ``sum``; for ``mean`` the local
  kernel would divide by the LOCAL count, so the terms' dims stay whole. Linear in ``g`` with
  the rest fixed: P(sum)/P(avg) ``g`` gives that Partial.

Note [even pieces of a mean]
mean(a1 ++ a2) = (1/2)(mean(a1) + mean(a2)) only when |a1| == |a2|. A rule sees one mesh
dim; ``even_pieces`` asks that the dim split evenly however the earlier mesh dims nest on it,
so with every sharded dim even all ranks hold equally many terms.
"""

from __future__ import annotations

import torch

from dtensor.ops.indexing import aligned_shards
from dtensor.ops.reductions import even_pieces, no_empty_piece
from dtensor.ops.registry import OpSpec, Strategy, TensorSpec, sharding_rule
from dtensor.placements import Partial, Placement, Replicate, Shard

aten = torch.ops.aten
R = Replicate()
NONE, MEAN, SUM = 0, 1, 2  # at::Reduction
LINEAR = (Partial("sum"), Partial("avg"))


def _shape(tensors: list[TensorSpec]) -> tuple[int, ...]:
    return tuple(torch.broadcast_shapes(*(t.shape for t in tensors)))


def _reduced(op: OpSpec, reduction: int, size: int, dtype: torch.dtype) -> Placement | None:
    """The output placement of a term dim sharded under ``reduction`` (None: not offered)."""
    if reduction == SUM:
        return Partial("sum")
    if reduction == MEAN and dtype.is_floating_point and size and even_pieces(op, size):
        return Partial("avg")  # Note [even pieces of a mean]
    return None


def _grad_partials(op: OpSpec) -> list[Strategy]:
    """Note [loss backward]: grad_output (first) Partial, the rest Replicate."""
    g, n = op.tensors()[0], len(op.tensors())
    if not g.dtype.is_floating_point:
        return []
    return [Strategy((p,) + (R,) * (n - 1), (p,)) for p in LINEAR]


# -- elementwise ------------------------------------------------------------------------------
def _elementwise_forward(op: OpSpec, reduction_pos: int) -> list[Strategy]:
    tensors = op.tensors()
    reduction = op.arg(reduction_pos, "reduction", MEAN)
    shape = _shape(tensors)
    out = [Strategy((R,) * len(tensors), (R,))]
    for d, size in enumerate(shape):
        ins = aligned_shards(tensors, shape, d)
        if reduction == NONE:  # one term per element: the terms of this rank's elements
            out.append(Strategy(ins, (Shard(d),)))
            continue
        p = _reduced(op, reduction, size, tensors[0].dtype)
        if p is not None:
            out.append(Strategy(ins, (p,)))
    return out


def _elementwise_backward(op: OpSpec, reduction_pos: int) -> list[Strategy]:
    tensors = op.tensors()  # grad_output, self, target, [weight]
    reduction = op.arg(reduction_pos, "reduction", MEAN)
    shape = _shape(tensors[1:])
    out = [Strategy((R,) * len(tensors), (R,))]
    if tuple(tensors[1].shape) != shape:  # grad_input has self's shape; a broadcasting self
        return out + _grad_partials(op)  # would need its gradient summed: kept whole
    for d in range(len(shape)):
        ins = aligned_shards(tensors[1:], shape, d)
        if reduction == NONE:
            g = aligned_shards(tensors[:1], shape, d)
        elif reduction == SUM:
            g = (R,)  # the 0-d gradient of the sum: every term's factor
        else:
            continue  # Note [loss backward]: the local kernel divides by the local count
        out.append(Strategy(g + ins, (Shard(d),)))
    return out + _grad_partials(op)


@sharding_rule(aten.binary_cross_entropy.default)
def binary_cross_entropy(op: OpSpec) -> list[Strategy]:
    """l = -w (t log x + (1 - t) log(1 - x))."""
    return _elementwise_forward(op, 3)


@sharding_rule(aten.binary_cross_entropy_with_logits.default)
def binary_cross_entropy_with_logits(op: OpSpec) -> list[Strategy]:
    """l = -w (p t log s(x) + (1 - t) log(1 - s(x))); pos_weight p broadcasts over classes."""
    return _elementwise_forward(op, 4)


@sharding_rule(aten.huber_loss.default, aten.smooth_l1_loss.default,
               aten.soft_margin_loss.default)
def pair_loss(op: OpSpec) -> list[Strategy]:
    """huber: 0.5 d^2 or delta (|d| - delta / 2); smooth_l1: the same / beta; soft_margin:
    log(1 + exp(-t x)); d = x - t."""
    return _elementwise_forward(op, 2)


@sharding_rule(aten.binary_cross_entropy_backward.default)
def binary_cross_entropy_backward(op: OpSpec) -> list[Strategy]:
    return _elementwise_backward(op, 4)


@sharding_rule(aten.huber_loss_backward.default, aten.smooth_l1_loss_backward.default,
               aten.soft_margin_loss_backward.default)
def pair_loss_backward(op: OpSpec) -> list[Strategy]:
    return _elementwise_backward(op, 3)


# -- per row ---------------------------------------------------------------------------------
def _row_forward(op: OpSpec, reduction_pos: int, n_out: int) -> list[Strategy]:
    """Input (N, C) with per-row targets; only the batch dim N shards (each row's term reads
    its whole row of classes). ``is_target`` (multilabel's second output) is per element."""
    tensors = op.tensors()
    x = tensors[0]
    reduction = op.arg(reduction_pos, "reduction", MEAN)
    rest = (R,) * (len(tensors) - 2)  # class weights: every rank needs all of them
    out = [Strategy((R,) * len(tensors), (R,) * n_out)]
    if x.ndim != 2:  # an unbatched (C,) input is one row
        return out
    extra = (Shard(0),) * (n_out - 1)
    if reduction == NONE:
        out.append(Strategy((Shard(0), Shard(0)) + rest, (Shard(0),) + extra))
    elif no_empty_piece(op, x.shape[0]):  # the kernels reduce an empty batch to garbage
        p = _reduced(op, reduction, x.shape[0], x.dtype)  # (uninitialized memory, not 0)
        if p is not None:
            out.append(Strategy((Shard(0), Shard(0)) + rest, (p,) + extra))
    return out


def _row_backward(op: OpSpec, reduction_pos: int) -> list[Strategy]:
    tensors = op.tensors()  # grad_output, self, target, [weight | is_target]
    x = tensors[1]
    reduction = op.arg(reduction_pos, "reduction", MEAN)
    out = [Strategy((R,) * len(tensors), (R,))]
    if x.ndim == 2 and reduction != MEAN:  # Note [loss backward]
        g = Shard(0) if reduction == NONE else R
        # multilabel's is_target is per element (row-sharded); multi_margin's weight is whole
        tail = tuple(Shard(0) if t.shape == x.shape else R for t in tensors[3:])
        out.append(Strategy((g, Shard(0), Shard(0)) + tail, (Shard(0),)))
    return out + _grad_partials(op)


@sharding_rule(aten.multi_margin_loss.default)
def multi_margin_loss(op: OpSpec) -> list[Strategy]:
    """l_i = sum_{j != y_i} w_{y_i} max(0, margin - x[i, y_i] + x[i, j])^p / C."""
    return _row_forward(op, 5, 1)


@sharding_rule(aten.multilabel_margin_loss_forward.default)
def multilabel_margin_loss_forward(op: OpSpec) -> list[Strategy]:
    """l_i = sum over targets j of row i, non-targets k, of max(0, 1 - x[i, j] + x[i, k]) / C;
    the second output marks row i's targets."""
    return _row_forward(op, 2, 2)


@sharding_rule(aten.multi_margin_loss_backward.default)
def multi_margin_loss_backward(op: OpSpec) -> list[Strategy]:
    return _row_backward(op, 6)


@sharding_rule(aten.multilabel_margin_loss_backward.default)
def multilabel_margin_loss_backward(op: OpSpec) -> list[Strategy]:
    return _row_backward(op, 3)
