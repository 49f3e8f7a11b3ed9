"""Padding: constant_pad_nd, reflection_pad{1,2,3}d, replication_pad{1,2,3}d and their
backward ops.

A pad (or a crop, for negative amounts) along dim d moves elements only along d, so every dim
not padded on either side is independent (Note [independent dims] in _common): sharded, each
rank pads its own rows. A padded dim is Replicate: rank 0's piece would get the leading pad
and the last non-empty rank the trailing one, but with reflection each edge reflects rows
another rank holds, and with any padding the output chunks no longer line up with the input's.

Reflection and replication kernels reject an empty piece except on the batch dim of the
batched form ((k + 2)-d for a k-d pad): other dims are sharded only where no piece is empty.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from dtensor.ops._common import LINEAR, MOVES, independent_dims, linear_partials, partials_of
from dtensor.ops.registry import OpSpec, Strategy, sharding_rule

aten = torch.ops.aten


def padded_dims(pad: Sequence[int], ndim: int) -> set[int]:
    """``pad`` lists (before, after) pairs from the last dim backwards.

    >>> sorted(padded_dims([1, 1, 0, 0, 2, 0], 4))
    [1, 3]
    """
    return {ndim - 1 - i // 2 for i, amount in enumerate(pad) if amount}


@sharding_rule(aten.constant_pad_nd.default)
def constant_pad_nd(op: OpSpec) -> list[Strategy]:
    """``constant_pad_nd(x, pad, value=0)``: unpadded dims shard (an empty piece pads to an
    empty piece). Partials: the copied elements move, the filled ones are ``value`` on every
    rank; sum/avg/max/min of n zeros is zero, and avg/max/min of n copies of c is c, but
    their sum is n * c: P(sum) only when ``value`` is 0."""
    x = op.tensors()[0]
    whole = padded_dims(op.arg(1, "pad"), x.ndim)
    found = independent_dims(op, [d for d in range(x.ndim) if d not in whole], 1)
    kinds = MOVES if not op.arg(2, "value", 0) else MOVES[1:]
    return found + [Strategy((p,), (p,)) for p in partials_of(x, kinds)]


def _mirror_pad(op: OpSpec, k: int, grad: bool) -> list[Strategy]:
    """Forward ``(x, padding)`` or backward ``(grad_out, x, padding)`` of a k-d pad."""
    tensors = op.tensors()
    x = tensors[-1]
    whole = padded_dims(op.arg(len(tensors), "padding"), x.ndim)
    batched = x.ndim == k + 2
    dims = [d for d in range(x.ndim) if d not in whole]
    found = independent_dims(op, dims, 1, nonempty={d for d in dims if d or not batched})
    if grad:
        # the gradient sums the copies of each element: linear in grad_out, not max-preserving
        return found + linear_partials(op, 0, LINEAR)
    # every output element is one input element (Note [moves keep every Partial])
    return found + [Strategy((p,), (p,)) for p in partials_of(x, MOVES)]


def _mirror_rule(k: int, grad: bool) -> Callable[[OpSpec], list[Strategy]]:
    def rule(op: OpSpec) -> list[Strategy]:
        return _mirror_pad(op, k, grad)

    rule.__name__ = f"pad{k}d{'_backward' if grad else ''}"
    return rule


for _k in (1, 2, 3):
    for _name in ("reflection", "replication"):
        sharding_rule(getattr(aten, f"{_name}_pad{_k}d").default)(_mirror_rule(_k, False))
        sharding_rule(getattr(aten, f"{_name}_pad{_k}d_backward").default)(
            _mirror_rule(_k, True))
