"""Group norm sharded over the batch and over whole groups of channels, and
``_batch_norm_with_update`` (the training-mode batch norm that ``F.batch_norm`` emits).

Note [group norm's size arguments]
``native_group_norm(x, weight, bias, N, C, HxW, group, eps)`` takes the batch size, the
channel count and the group count as arguments, and the kernel checks them against its input.
A rank holding a piece of the batch or of the channels runs the op with its own sizes (local
function ``group_norm_local_sizes``): N and C read from its piece, ``group`` scaled to the
groups its channels hold. HxW (the flattened spatial dims) is never sharded: the statistics
span it.

Note [group norm's independent samples and groups]
Each sample's statistics are taken over its own group of C / group channels and all spatial
positions. So the batch dim shards exactly: x S(0) -> y S(0), and mean / rstd, shaped
(N, group), S(0) too; an empty piece of the batch has no samples (the kernel takes N = 0).
The channel dim shards only where every piece holds whole groups: with ``group`` divisible by
the size of the whole mesh, every chunk of C (at any nesting of mesh dims) is an equal run of
whole groups, so x S(1), weight/bias S(0) -> y S(1), mean / rstd S(1) (their group dim).
Not linear in x (it normalizes): no Partial forward.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from dtensor.ops.norms import _grad_partials, _n_masked, _replicate, running_stat_pieces
from dtensor.ops.reductions import no_empty_piece
from dtensor.ops.registry import Box, OpSpec, Strategy, local_function, sharding_rule
from dtensor.placements import Partial, Placement, Replicate, Shard

aten = torch.ops.aten
R = Replicate()
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


@sharding_rule(aten._batch_norm_with_update.default)
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
