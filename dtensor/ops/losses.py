"""Losses: nll_loss (the second half of cross_entropy, 2-D and 4-D) and mse_loss, with their
backward ops; then the elementwise and per-row losses (binary_cross_entropy with and without
logits, huber_loss, smooth_l1_loss, soft_margin_loss, multi_margin_loss,
multilabel_margin_loss) and their backward ops, in their own section below.

A loss is a sum over positions (batch, and spatial dims for nll_loss2d) of a per-position
term, then reduced: ``none`` keeps one value per position, ``sum`` adds them, ``mean``
divides by a count. Per mesh dim:

- positions sharded alike in input and target: ``none`` stays sharded, ``sum`` is P(sum).
- ``mean`` is a ratio of two sums. The local op divides by the LOCAL count, and local counts
  differ (uneven shards, ignore_index, class weights), so P(avg) is not the mean:
  (1/2)(a1/n1 + a2/n2) != (a1 + a2)/(n1 + n2) unless n1 == n2. nll_loss's count depends on
  the target's values: its sharded ``mean`` keeps the target Replicate and divides by the
  global count in a local function (Note [class-sharded nll_loss]); mse_loss's count is the
  number of elements, so P(avg) is offered when every shard has the same size
  (Note [even shards]).
- nll_loss's log-probs sharded on the class dim: Partial(sum) losses through a local
  function (Note [class-sharded nll_loss]).
- the backward ops are linear in grad_output: P(sum)/P(avg) grads give P grads.

Note [even shards]
A dim whose size is a multiple of the product of ALL mesh dim sizes splits evenly however the
mesh dims nest on it; a rule sees one mesh dim at a time, so it asks for that stronger
condition. If every sharded dim of the candidate satisfies it, all ranks hold equally many
elements and the average of local means is the mean.

Note [class-sharded nll_loss]
nll_loss picks one log-prob per position: loss[i] = -w[t_i] * x[i, t_i]. With the log-probs
sharded on the class dim, each rank picks x[i, t_i] only where it holds class t_i (target
shifted by its box's offset; other classes, and ignore_index, give 0), so the ranks' losses
add up to the loss: Partial(sum) for every reduction, as long as ``mean`` divides by the
GLOBAL total_weight. total_weight = sum of w[t_i] over non-ignored positions depends only on
target and weight, so with both Replicate each rank computes the global one (Replicate).
The backward writes -w[t_i] * g_i (/ total_weight for mean) at (i, t_i) where the rank holds
t_i and zeros elsewhere: grad_input Shard(class dim), each rank writing only its classes.

The plain op on a class piece with global targets would index out of range, so these
strategies name a local function (Note [local functions] in registry.py): one per op that
computes the op restricted to its input's box (the rows AND the classes it holds) and so
also agrees with every plain strategy it is combined with on other mesh dims. The same box
gives the batch-sharded ``mean``: positions sharded with the target Replicate, a rank sums
its rows and divides by the global total_weight: Partial(sum), exact on uneven shards.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from dtensor.ops._common import even_pieces, no_empty_piece
from dtensor.ops.indexing import aligned_shards, partials
from dtensor.ops.registry import (Box, OpSpec, Strategy, TensorSpec, local_function,
                                  sharding_rule)
from dtensor.placements import Partial, Placement, Replicate, Shard

aten = torch.ops.aten
R = Replicate()
NONE, MEAN, SUM = 0, 1, 2  # at::Reduction
LINEAR = (Partial("sum"), Partial("avg"))


def _position_dims(x: TensorSpec | torch.Tensor) -> list[tuple[int, int]]:
    """(input dim, target dim) pairs that index positions: batch, then spatial dims; the
    class dim (input dim 1, or 0 for an unbatched input) has no target dim."""
    if x.ndim < 2:
        return []
    return [(0, 0)] + [(k, k - 1) for k in range(2, x.ndim)]


def _class_dim(x: TensorSpec | torch.Tensor) -> int:
    return 1 if x.ndim >= 2 else 0


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
        else:  # local sum / GLOBAL total_weight (whole target): the ranks' terms add up to
            # the mean, where a plain local mean divides by the local count. Only for mean:
            # beside a plain S(xd) target on another mesh dim, a Replicate one here would
            # not hold the same rows as the input (Note [class-sharded nll_loss])
            out.append(Strategy((Shard(xd), R) + w, (Partial("sum"), R), local=NLL_OWN))
    # linear in the log-probs: target and weights fix which entries are taken and total_weight
    out += [Strategy((p, R) + w, (p, R)) for p in partials(x, LINEAR)]
    # each rank picks the targets in its classes: Note [class-sharded nll_loss]
    out.append(Strategy((Shard(_class_dim(x)), R) + w, (Partial("sum"), R), local=NLL_OWN))
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
    # each rank writes the entries of its classes, zeros elsewhere: the grad's class pieces
    # (Note [class-sharded nll_loss]); a per-position grad is needed whole on this mesh dim
    out.append(Strategy((R, Shard(_class_dim(x)), R) + w + (R,), (Shard(_class_dim(x)),),
                        local=NLL_BACKWARD_OWN))
    return out


# -- local functions of Note [class-sharded nll_loss] -----------------------------------------
NLL_OWN, NLL_BACKWARD_OWN = "nll_loss_own_box", "nll_loss_backward_own_box"


def _bound(func: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The call's arguments by schema name (callers may pass any of them by keyword)."""
    schema = func._schema.arguments
    out = {a.name: (a.default_value if a.has_default_value() else None) for a in schema}
    out.update(zip((a.name for a in schema), args))
    out.update(kwargs)
    return out


def _rows(piece: torch.Tensor, box: Box, x: torch.Tensor, x_box: Box) -> torch.Tensor:
    """The part of a position-shaped piece (target, per-position grad) whose positions are
    the ones ``x_box`` holds; ``box`` is the piece's own box."""
    index: list[slice] = []
    for xd, td in _position_dims(x):
        (lo, hi), (start, stop) = x_box[xd], box[td]
        if lo < start or hi > stop:  # a strategy gave x rows its target piece does not hold
            raise ValueError(f"nll_loss local function: the input holds positions [{lo}, {hi})"
                             f" of dim {xd}, its target piece only [{start}, {stop})")
        index.append(slice(lo - start, hi - start))
    return piece[tuple(index)]


def _picks(x: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None,
           ignore_index: int, classes: tuple[int, int]
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per position: ``mine`` (the target is a class in ``classes``, not ignored), its index
    in this piece's classes, and w[t] (0 where ignored)."""
    valid = target != ignore_index
    # a target past the last class is nobody's: the global check is loss_parallel's (it
    # knows the class count); here what a piece can tell
    bad = valid & (target < 0)
    if weight is not None:
        bad |= valid & (target >= weight.shape[0])
    torch._assert_async(~bad.any(), "nll_loss: a target is out of bounds: expected "
                                    "0 <= target < number of classes, or ignore_index")
    lo, hi = classes
    mine = valid & (target >= lo) & (target < hi)
    zero = torch.zeros_like(target)
    local = torch.where(mine, target - lo, zero)
    if weight is None:
        w_t = valid.to(x.dtype)
    else:
        w_t = weight[torch.where(valid, target, zero)] * valid
    return mine, local, w_t


def _total_weight(x: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None,
                  ignore_index: int, reduction: int) -> torch.Tensor:
    """Sum of w[t] over the non-ignored targets of this target piece (the op's second
    output); a batched ``none`` does not compute it (0)."""
    if reduction == NONE and x.ndim >= 2:
        return x.new_zeros(())
    valid = target != ignore_index
    if weight is None:
        return valid.sum().to(x.dtype)
    return (weight[torch.where(valid, target, torch.zeros_like(target))] * valid).sum()


@local_function(NLL_OWN)
def nll_loss_own_box(func: Any, args: tuple, kwargs: dict,
                     boxes: Sequence[Box | None]) -> tuple[torch.Tensor, torch.Tensor]:
    """nll_loss_forward(2d) restricted to the box of its input: the rows and the classes this
    rank holds (Note [class-sharded nll_loss]). total_weight comes from the whole target
    piece: global where the target is Replicate, a Partial(sum) addend where it is sharded."""
    a = _bound(func, args, kwargs)
    x, target, weight = a["self"], a["target"], a["weight"]
    reduction, ignore_index = a["reduction"], a["ignore_index"]
    x_box, t_box = _boxes(boxes, 2)
    c = _class_dim(x)
    t = _rows(target, t_box, x, x_box)
    mine, local, w_t = _picks(x, t, weight, ignore_index, x_box[c])
    if x.shape[c] == 0:  # an empty class piece picks nothing
        picked = x.new_zeros(t.shape)
    else:
        picked = x.gather(c, local.unsqueeze(c)).squeeze(c)
    loss = torch.where(mine, -(picked * w_t), x.new_zeros(()))
    total = _total_weight(x, target, weight, ignore_index, reduction)
    if reduction == NONE:
        return loss, total
    if reduction == SUM:
        return loss.sum(), total
    return loss.sum() / total, total


@local_function(NLL_BACKWARD_OWN)
def nll_loss_backward_own_box(func: Any, args: tuple, kwargs: dict,
                              boxes: Sequence[Box | None]) -> torch.Tensor:
    """nll_loss_backward(2d) restricted to the box of its input: -w[t] * g (/ total_weight
    for mean) at the targets among this rank's classes, zeros elsewhere."""
    a = _bound(func, args, kwargs)
    g, x, target, weight = a["grad_output"], a["self"], a["target"], a["weight"]
    reduction, ignore_index, total = a["reduction"], a["ignore_index"], a["total_weight"]
    g_box, x_box, t_box = _boxes(boxes, 3)
    c = _class_dim(x)
    t = _rows(target, t_box, x, x_box)
    out = torch.zeros_like(x, memory_format=torch.contiguous_format)
    if x.shape[c] == 0:
        return out
    if reduction == NONE and x.ndim >= 2:  # one grad per position
        g = _rows(g, g_box, x, x_box)
    mine, local, w_t = _picks(x, t, weight, ignore_index, x_box[c])
    scale = -(g / total) if reduction == MEAN else -g  # the order aten computes in
    values = torch.where(mine, scale * w_t, x.new_zeros(()))
    # every position writes one entry: its value where it is mine, a zero at class 0 otherwise
    return out.scatter_(c, local.unsqueeze(c), values.unsqueeze(c).to(out.dtype))


def _boxes(boxes: Sequence[Box | None], n: int) -> list[Box]:
    got = list(boxes[:n])
    if any(b is None for b in got):  # the dispatcher passes boxes to every local function
        raise ValueError(f"nll_loss local function needs the boxes of its first {n} inputs, "
                         f"got {got}")
    return got  # type: ignore[return-value]


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


# -- elementwise and per-row losses ------------------------------------------------------------
# An elementwise loss computes one term per element of the broadcast shape of its tensors,
# l = f(x, t, w, ...), then reduces: ``none`` keeps the terms, ``sum`` adds them, ``mean``
# divides the sum by the element count. A per-row loss (multi_margin, multilabel_margin)
# computes one term per row of an (N, C) input from that whole row; its count is N. Per mesh
# dim:
#
# - a dim of the terms sharded alike in every tensor (Replicate where one broadcasts):
#   ``none`` stays sharded, ``sum`` is P(sum) (the sum of the local sums), ``mean`` is P(avg)
#   only where every rank holds equally many terms (Note [even pieces of a mean]).
# - f is not linear (log, |.|, clamp, exp): no Partial input passes through the forward.
# - the backward ops: Note [loss backward].
#
# Note [loss backward]
# grad_input = f'(x, t, ...) * g, and for ``mean`` also / count. Each term's gradient needs
# only its own element (row), so the dims shard as in the forward with ``g`` sharded alike for
# ``none`` and Replicate (0-d) for ``sum``; for ``mean`` the local kernel would divide by the
# LOCAL count, so the terms' dims stay whole. Linear in ``g`` with the rest fixed:
# P(sum)/P(avg) ``g`` gives that Partial.
#
# Note [even pieces of a mean]
# mean(a1 ++ a2) = (1/2)(mean(a1) + mean(a2)) only when |a1| == |a2|. A rule sees one mesh
# dim; ``even_pieces`` asks that the dim split evenly however the earlier mesh dims nest on it,
# so with every sharded dim even all ranks hold equally many terms.


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
