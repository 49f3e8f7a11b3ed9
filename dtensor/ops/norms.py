"""Normalization: softmax/log_softmax (and _safe_softmax), layer_norm, rms_norm, group_norm,
batch_norm (and ``_batch_norm_with_update``, the training-mode batch norm that ``F.batch_norm``
emits), and the backward ops they emit. (relu/gelu/silu/tanh and their backward ops are tagged
pointwise and take the generic rule.)

A normalization computes statistics over some dims and applies them elementwise. Per mesh
dim, a Shard is sound on a dim the statistics do not span (each rank has whole groups); a
Shard on a spanned dim would need a reduction inside the op, so it needs Replicate there.

Note [backward is linear in grad_out]
Every backward here is linear in ``grad_out`` with the other inputs fixed (the saved
statistics are constants), so ``P(sum)``/``P(avg)`` ``grad_out`` with the rest Replicate
gives the same Partial on every gradient: g = g1 + g2 gives dx = dx1 + dx2, dw = dw1 + dw2.

Note [batch-sharded parameter gradients]
With the batch (or other non-normalized) dims sharded, ``grad_weight``/``grad_bias`` are
sums over those dims, so each rank's local value is an addend: ``P(sum)``. An empty piece
adds zero.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import torch

from dtensor.ops._common import no_empty_piece
from dtensor.ops.registry import (Box, OpSpec, Strategy, TensorSpec, local_function, sharding_rule,
                                  takes_split_rules)
from dtensor.placements import Partial, Placement, Replicate, Shard

aten = torch.ops.aten
R = Replicate()
_LINEAR = ("sum", "avg")


def _replicate(op: OpSpec, outputs: int) -> Strategy:
    return Strategy((Replicate(),) * len(op.tensors()), (Replicate(),) * outputs)


def _grad_partials(op: OpSpec, outputs: int) -> list[Strategy]:
    """Note [backward is linear in grad_out]: grad_out (first tensor) Partial, rest R."""
    g = op.tensors()[0]
    if not (g.dtype.is_floating_point or g.dtype.is_complex):
        return []
    n = len(op.tensors())
    return [Strategy((Partial(k),) + (Replicate(),) * (n - 1), (Partial(k),) * outputs)
            for k in _LINEAR]


def _n_masked(op: OpSpec, pos: int) -> int:
    """Number of gradients a backward returns: one per True in ``output_mask``."""
    return sum(bool(m) for m in op.arg(pos, "output_mask"))


# --- softmax ------------------------------------------------------------------------------


@sharding_rule(aten._softmax.default, aten._log_softmax.default)
@takes_split_rules  # Note [split rules in propagation]
def softmax(op: OpSpec) -> list[Strategy]:
    """``_softmax(x, dim, half_to_float)``: exp(x) / sum over ``dim``; any other dim may be
    sharded. Not linear (softmax(a + b) != softmax(a) + softmax(b)): no Partial."""
    t = op.tensors()[0]
    dim = op.arg(1, "dim") % max(t.ndim, 1)
    return [Strategy((Replicate(),), (Replicate(),))] + [
        Strategy((Shard(d),), (Shard(d),)) for d in range(t.ndim) if d != dim]


# _safe_softmax(x, dim, dtype) is softmax with rows of -inf giving 0: the same statistics over
# ``dim``, so the same rule (any other dim shards; not linear)
sharding_rule(aten._safe_softmax.default)(softmax)


@sharding_rule(aten._softmax_backward_data.default, aten._log_softmax_backward_data.default)
@takes_split_rules  # Note [split rules in propagation]
def softmax_backward(op: OpSpec) -> list[Strategy]:
    """``(grad_output, output, dim, input_dtype)``: y * (g - sum(g * y)) and
    g - exp(y) * sum(g) sum over ``dim`` only; both are linear in g."""
    t = op.tensors()[0]
    dim = op.arg(2, "dim") % max(t.ndim, 1)
    out = [Strategy((Replicate(), Replicate()), (Replicate(),))]
    out += [Strategy((Shard(d), Shard(d)), (Shard(d),)) for d in range(t.ndim) if d != dim]
    return out + _grad_partials(op, 1)


# --- layer_norm and rms_norm: statistics over the trailing normalized_shape dims --------------


def _leading(x: TensorSpec, normalized_shape: tuple[int, ...]) -> range:
    return range(x.ndim - len(normalized_shape))


def _row_norm(op: OpSpec, shape_pos: int, n_stats: int) -> list[Strategy]:
    """Forward of a norm over trailing dims: input S(d) on a leading dim, weight/bias R ->
    output and each saved statistic (shaped input.shape[:axis] + (1,) * k) S(d)."""
    x, *params = op.tensors()
    out = [_replicate(op, 1 + n_stats)]
    for d in _leading(x, op.arg(shape_pos, "normalized_shape")):
        out.append(Strategy((Shard(d),) + (Replicate(),) * len(params),
                            (Shard(d),) * (1 + n_stats)))
    return out


@sharding_rule(aten.native_layer_norm.default)
@takes_split_rules  # Note [split rules in propagation]
def layer_norm(op: OpSpec) -> list[Strategy]:
    """``native_layer_norm(x, normalized_shape, weight, bias, eps) -> (y, mean, rstd)``."""
    return _row_norm(op, 1, 2)


@sharding_rule(aten._fused_rms_norm.default)
def rms_norm(op: OpSpec) -> list[Strategy]:
    """``_fused_rms_norm(x, normalized_shape, weight, eps) -> (y, rstd)`` (on CPU,
    ``F.rms_norm`` decomposes into pow/mean/rsqrt/mul instead)."""
    return _row_norm(op, 1, 1)


def _row_norm_backward(op: OpSpec, shape_pos: int, mask_pos: int) -> list[Strategy]:
    """grad_out, input and the saved statistics S(d) on a leading dim, weight/bias R ->
    grad_input S(d), parameter gradients P(sum) (Note [batch-sharded parameter gradients])."""
    tensors = op.tensors()
    x = tensors[1]
    mask = [bool(m) for m in op.arg(mask_pos, "output_mask")]
    n = _n_masked(op, mask_pos)
    out = [_replicate(op, n)]
    for d in _leading(x, op.arg(shape_pos, "normalized_shape")):
        # grad_out, input, then statistics are shaped like the leading dims (+ ones)
        ins = tuple(Shard(d) if t.ndim == x.ndim else Replicate() for t in tensors)
        outs = ([Shard(d)] if mask[0] else []) + [Partial()] * sum(mask[1:])
        out.append(Strategy(ins, tuple(outs)))
    return out + _grad_partials(op, n)


@sharding_rule(aten.native_layer_norm_backward.default)
@takes_split_rules  # Note [split rules in propagation]
def layer_norm_backward(op: OpSpec) -> list[Strategy]:
    """``(grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask)``."""
    return _row_norm_backward(op, 2, 7)


@sharding_rule(aten._fused_rms_norm_backward.default)
def rms_norm_backward(op: OpSpec) -> list[Strategy]:
    """``(grad_out, input, normalized_shape, rstd, weight, output_mask)``."""
    return _row_norm_backward(op, 2, 5)


# --- group_norm: statistics per sample over groups of channels --------------------------------

# Note [group norm's size arguments]
# ``native_group_norm(x, weight, bias, N, C, HxW, group, eps)`` takes the batch size, the
# channel count and the group count as arguments, and the kernel checks them against its input.
# A rank holding a piece of the batch or of the channels runs the op with its own sizes (local
# function ``group_norm_local_sizes``): N and C read from its piece, ``group`` scaled to the
# groups its channels hold. HxW (the flattened spatial dims) is never sharded: the statistics
# span it.
#
# Note [group norm's independent samples and groups]
# Each sample's statistics are taken over its own group of C / group channels and all spatial
# positions. So the batch dim shards exactly: x S(0) -> y S(0), and mean / rstd, shaped
# (N, group), S(0) too; an empty piece of the batch has no samples (the kernel takes N = 0).
# The channel dim shards only where every piece holds whole groups: with ``group`` divisible by
# the size of the whole mesh, every chunk of C (at any nesting of mesh dims) is an equal run of
# whole groups, so x S(1), weight/bias S(0) -> y S(1), mean / rstd S(1) (their group dim).
# Not linear in x (it normalizes): no Partial forward.
_LOCAL_SIZES = "group_norm_local_sizes"


def _whole_groups(op: OpSpec, channels: int, group: int) -> bool:
    """Note [group norm's independent samples and groups]: every piece of the channel dim is
    a run of whole groups, however the mesh dims nest."""
    return channels > 0 and group > 0 and group % math.prod(op.mesh_shape) == 0


@sharding_rule(aten.native_group_norm.default)
def group_norm(op: OpSpec) -> list[Strategy]:
    """``native_group_norm(x, weight, bias, N, C, HxW, group, eps) -> (y, mean, rstd)``:
    Note [group norm's independent samples and groups]; each rank runs with its own sizes
    (Note [group norm's size arguments])."""
    x, *params = op.tensors()
    found = [_replicate(op, 3)]
    if x.ndim < 2:
        return found
    found.append(Strategy((Shard(0),) + (R,) * len(params), (Shard(0),) * 3, _LOCAL_SIZES))
    if _whole_groups(op, x.shape[1], op.arg(6, "group")):
        found.append(Strategy((Shard(1),) + (Shard(0),) * len(params), (Shard(1),) * 3,
                              _LOCAL_SIZES))
    return found


@sharding_rule(aten.native_group_norm_backward.default)
def group_norm_backward(op: OpSpec) -> list[Strategy]:
    """``(grad_out, x, mean, rstd, weight, N, C, HxW, group, output_mask) -> (grad_x,
    grad_weight, grad_bias)``. Batch: grad_out, x, mean, rstd S(0), weight R -> grad_x S(0),
    parameter gradients P(sum) (sums over samples: Note [batch-sharded parameter gradients]
    in norms). Whole groups of channels: everything on its channel (group) dim -> grad_x
    S(1), parameter gradients S(0). Linear in grad_out (Note [backward is linear in
    grad_out] in norms)."""
    tensors = op.tensors()
    x = tensors[1]
    mask = [bool(m) for m in op.arg(9, "output_mask")]
    n = _n_masked(op, 9)
    found = [_replicate(op, n)]
    if x.ndim < 2:
        return found + _grad_partials(op, n)
    weight = len(tensors) > 4  # grad_out, x, mean, rstd, then weight if given
    ins = (Shard(0),) * 4 + (R,) * weight
    outs = ([Shard(0)] if mask[0] else []) + [Partial()] * sum(mask[1:])
    found.append(Strategy(ins, tuple(outs), _LOCAL_SIZES))
    if _whole_groups(op, x.shape[1], op.arg(8, "group")):
        ins = (Shard(1),) * 4 + (Shard(0),) * weight
        outs = ([Shard(1)] if mask[0] else []) + [Shard(0)] * sum(mask[1:])
        found.append(Strategy(ins, tuple(outs), _LOCAL_SIZES))
    return found + _grad_partials(op, n)


@local_function(_LOCAL_SIZES)
def _group_norm_local_sizes(func: Any, args: tuple, kwargs: dict,
                            boxes: Sequence[Box | None]) -> Any:
    """Note [group norm's size arguments]: N, C and group from this rank's piece."""
    forward = func is aten.native_group_norm.default
    x = args[0] if forward else args[1]
    first = 3 if forward else 5  # position of N; then C, HxW, group
    args = list(args)
    n, c, hxw, group = args[first:first + 4]
    local_c = x.shape[1]
    args[first:first + 4] = [x.shape[0], local_c, hxw, group * local_c // c if c else group]
    return func(*args, **kwargs)


# --- batch_norm: statistics over every dim but the channel dim 1 -----------------------------


def _channel_ins(tensors: list[TensorSpec], c: int, n_big: int) -> tuple[Placement, ...]:
    """The first ``n_big`` tensors (input, grad_out) S(1); per-channel vectors S(0); the
    empty statistics an eval-mode forward saves stay R."""
    return tuple(Shard(1) if i < n_big else Shard(0) if t.shape == (c,) else Replicate()
                 for i, t in enumerate(tensors))


# Note [running statistics in pieces]
# A training batch norm writes its running statistics in place, r' = (1 - m) r + m s with s
# the batch statistic of each channel, so their placements cannot change: each placement of
# theirs needs a strategy that keeps it. With x whole every rank has every channel's s, so a
# rank holding a chunk of the channels of r (S(0)) can update exactly that chunk: the local
# function ``batch_norm_stat_pieces`` runs the op with a full-length temporary holding its
# chunk (other channels zero) and copies its chunk back. The outputs do not read r in
# training: they are whole (R). In eval r is read, not written: no such strategy. Paired
# with the channel strategy (x S(1)) on a later mesh dim, a rank's chunk of r would not lie in
# the channels its x holds: offered only on mesh dims after which the channels never shard.
_STAT_PIECES = "batch_norm_stat_pieces"


def running_stat_pieces(op: OpSpec, n_out: int) -> list[Strategy]:
    """Note [running statistics in pieces]: x and the parameters R, each running statistic
    (the last two tensors, when both are given) R or S(0), not both R (``_replicate``)."""
    tensors = op.tensors()
    if len(tensors) < 3 or not all(isinstance(op.arg(i, n), TensorSpec) for i, n in
                                   ((3, "running_mean"), (4, "running_var"))):
        return []
    later = range(op.mesh_dim + 1, len(op.mesh_shape))
    if any(no_empty_piece(dataclasses.replace(op, mesh_dim=m), tensors[0].shape[1])
           for m in later):  # the channel strategy could be chosen there
        return []
    whole = (Replicate(),) * (len(tensors) - 2)
    return [Strategy(whole + stats, (Replicate(),) * n_out, _STAT_PIECES)
            for stats in ((Shard(0), Shard(0)), (Shard(0), Replicate()),
                          (Replicate(), Shard(0)))]


@local_function(_STAT_PIECES)
def _batch_norm_stat_pieces(func: Any, args: tuple, kwargs: dict,
                            boxes: Sequence[Box | None]) -> Any:
    """Note [running statistics in pieces]: the running statistics are arguments 3 and 4.
    The temporary spans the channels x holds (all, or its chunk where another mesh dim
    shards the channels), which contain the statistics' chunk."""
    args = list(args)
    first, last = boxes[0][1] if boxes[0] is not None else (0, args[0].shape[1])
    pieces = []
    for pos, box in ((3, boxes[-2]), (4, boxes[-1])):
        start, stop = (box[0] if box is not None else (first, last))
        if (start, stop) != (first, last):
            full = args[pos].new_zeros(last - first)
            full[start - first:stop - first] = args[pos]
            pieces.append((args[pos], full[start - first:stop - first]))
            args[pos] = full
    out = func(*args, **kwargs)
    for piece, updated in pieces:
        piece.copy_(updated)
    return out


def _batch_norm(op: OpSpec, training: bool) -> list[Strategy]:
    """Forward ``-> (y, save_mean, save_invstd)``. Channels are independent: x S(1) with
    every per-channel vector S(0) -> y S(1), saved statistics S(0) when training (shape
    (C,)), R in eval (shape (0,)). In eval the statistics are given, so x may also be
    sharded on the batch or a spatial dim; in training they span those dims: R there.
    (Running stats written in place are sharded like the channels, so each rank updates
    exactly its own channels.) The CPU kernel dies with SIGFPE on an empty piece (no
    channels, no batch), so a Shard is offered only where no piece is empty."""
    tensors = op.tensors()
    x = tensors[0]
    out = [_replicate(op, 3)]
    if x.ndim < 2:
        return out
    if training:
        out += running_stat_pieces(op, 3)
    stat: Placement = Shard(0) if training else Replicate()
    if no_empty_piece(op, x.shape[1]):
        out.append(Strategy(_channel_ins(tensors, x.shape[1], 1), (Shard(1), stat, stat)))
    if not training:
        for d in (0, *range(2, x.ndim)):
            if not no_empty_piece(op, x.shape[d]):
                continue
            ins = (Shard(d),) + (Replicate(),) * (len(tensors) - 1)
            out.append(Strategy(ins, (Shard(d), Replicate(), Replicate())))
    return out


@sharding_rule(aten.native_batch_norm.default, aten._native_batch_norm_legit.default)
@takes_split_rules(tests_pieces=True)  # Note [split rules in propagation]
def batch_norm(op: OpSpec) -> list[Strategy]:
    """``(x, weight, bias, running_mean, running_var, training, momentum, eps)``."""
    return _batch_norm(op, bool(op.arg(5, "training")))


@sharding_rule(aten._native_batch_norm_legit.no_stats)
@takes_split_rules(tests_pieces=True)  # Note [split rules in propagation]
def batch_norm_no_stats(op: OpSpec) -> list[Strategy]:
    """``(x, weight, bias, training, momentum, eps)``."""
    return _batch_norm(op, bool(op.arg(3, "training")))


@sharding_rule(aten._native_batch_norm_legit_no_training.default)
@takes_split_rules(tests_pieces=True)  # Note [split rules in propagation]
def batch_norm_no_training(op: OpSpec) -> list[Strategy]:
    """``(x, weight, bias, running_mean, running_var, momentum, eps)``: eval mode."""
    return _batch_norm(op, False)


@sharding_rule(aten.native_batch_norm_backward.default)
@takes_split_rules(tests_pieces=True)  # Note [split rules in propagation]
def batch_norm_backward(op: OpSpec) -> list[Strategy]:
    """``(grad_out, x, weight, running_mean, running_var, save_mean, save_invstd, train, eps,
    output_mask) -> (grad_x, grad_weight, grad_bias)``. Channels: everything channel-sharded
    -> grad_x S(1), parameter gradients S(0). Eval: statistics are constants, so the batch
    and spatial dims may be sharded -> grad_x S(d), parameter gradients P(sum) (Note
    [batch-sharded parameter gradients]); in training grad_x needs mean(g) over them: R."""
    tensors = op.tensors()
    x = tensors[1]
    mask = [bool(m) for m in op.arg(9, "output_mask")]
    n = _n_masked(op, 9)
    out = [_replicate(op, n)]
    if x.ndim >= 2:
        outs = ([Shard(1)] if mask[0] else []) + [Shard(0)] * sum(mask[1:])
        if no_empty_piece(op, x.shape[1]):
            out.append(Strategy(_channel_ins(tensors, x.shape[1], 2), tuple(outs)))
        if not op.arg(7, "train"):
            for d in (0, *range(2, x.ndim)):
                if not no_empty_piece(op, x.shape[d]):
                    continue
                ins = (Shard(d), Shard(d)) + (Replicate(),) * (len(tensors) - 2)
                outs = ([Shard(d)] if mask[0] else []) + [Partial()] * sum(mask[1:])
                out.append(Strategy(ins, tuple(outs)))
    return out + _grad_partials(op, n)


@sharding_rule(aten._batch_norm_with_update.default)
@takes_split_rules(tests_pieces=True)  # Note [split rules in propagation]
def batch_norm_with_update(op: OpSpec) -> list[Strategy]:
    """``(x, weight, bias, running_mean!, running_var!, momentum, eps) -> (y, save_mean,
    save_invstd, reserve)``, always training: the statistics span every dim but the channel
    dim 1. Channels are independent: x S(1), every per-channel vector (weight, bias and the
    running stats, updated in place) S(0) -> y S(1), saved statistics S(0); ``reserve`` is
    empty on CPU: R. The CPU kernel dies on an empty piece, so channels shard only where none
    is empty.

    Running stats P(avg), the rest Replicate: each rank updates its addend
    r_i' = (1 - m) r_i + m s with the same batch statistic s, and the mean over ranks is
    (1 - m) mean(r_i) + m s, exactly the update of the mean. (Not P(sum): the sum would add
    m s once per rank.) The outputs do not read the running stats: R."""
    tensors = op.tensors()
    x = tensors[0]
    found = [_replicate(op, 4)]
    if x.ndim < 2:
        return found
    found += running_stat_pieces(op, 4)  # Note [running statistics in pieces] in norms
    c = x.shape[1]
    if no_empty_piece(op, c):
        ins: tuple[Placement, ...] = (Shard(1),) + tuple(
            Shard(0) if t.shape == (c,) else R for t in tensors[1:])
        found.append(Strategy(ins, (Shard(1), Shard(0), Shard(0), R)))
    if x.dtype.is_floating_point:  # running_mean/var are the last two tensors
        avg = Partial("avg")
        found.append(Strategy((R,) * (len(tensors) - 2) + (avg, avg), (R,) * 4))
    return found


# --- activations the pointwise tag misses ----------------------------------------------------

# Elementwise on same-shaped tensors but not tagged ``torch.Tag.pointwise`` in torch 2.13,
# so the generic rule does not reach them; the backward ops are linear in grad_output.
_ELEMENTWISE_BACKWARD = (
    aten.hardtanh_backward.default, aten.leaky_relu_backward.default, aten.elu_backward.default,
    aten.softplus_backward.default, aten.hardsigmoid_backward.default,
    aten.hardswish_backward.default, aten.mish_backward.default,
    aten.softshrink_backward.default, aten.hardshrink_backward.default,
    aten.log_sigmoid_backward.default,
)
_ELEMENTWISE_FORWARD = (aten.hardswish.default, aten.log_sigmoid_forward.default)


def _elementwise(op: OpSpec, outputs: int) -> list[Strategy]:
    tensors = op.tensors()
    out = [_replicate(op, outputs)]
    if len({t.shape for t in tensors}) != 1:  # broadcasting: leave it to Replicate
        return out
    n = len(tensors)
    return out + [Strategy((Shard(d),) * n, (Shard(d),) * outputs)
                  for d in range(tensors[0].ndim)]


@sharding_rule(*_ELEMENTWISE_FORWARD)
def elementwise_activation(op: OpSpec) -> list[Strategy]:
    """Each output element depends on the same input element only: any Shard, same out."""
    return _elementwise(op, len(op.op._schema.returns))


@sharding_rule(*_ELEMENTWISE_BACKWARD)
@takes_split_rules  # Note [split rules in propagation]
def elementwise_activation_backward(op: OpSpec) -> list[Strategy]:
    """dx = g * f'(x) elementwise: any Shard; linear in g (P(sum) g, R x -> P(sum) dx)."""
    strategies = _elementwise(op, 1)
    if len({t.shape for t in op.tensors()}) == 1:
        strategies += _grad_partials(op, 1)
    return strategies
