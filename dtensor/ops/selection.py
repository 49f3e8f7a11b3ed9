"""Order statistics along a dim: median, nanmedian, kthvalue, mode (values and indices), and
value_selecting_reduction_backward, the gradient they emit.

Note [order statistics keep their dim whole]
The k-th smallest of a row is not a function of the pieces' k-th smallest (the median of
(1, 2 | 3, 4, 5) is 3, the pieces' medians are 1.5 and 4), and the index is into the whole row,
so the reduced dim must be Replicate. Every other dim is independent: each rank ranks whole
rows of its piece, uneven or empty, and its (values, indices) are exactly its chunk of the
output (renumbered when ``keepdim`` drops the dim). No Partial passes through: the median of a
sum is not the sum of medians, and the median of elementwise maxima is not the max of medians.
``median()`` / ``nanmedian()`` with no dim rank every element together: Replicate only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from dtensor.ops._common import LINEAR, linear_partials
from dtensor.ops.reductions import reduction_strategies
from dtensor.ops.registry import Box, OpSpec, Strategy, local_function, sharding_rule
from dtensor.placements import Replicate, Shard

aten = torch.ops.aten
R = Replicate()

# op -> (position of dim, its default); keepdim follows dim
_ALONG_DIM = {
    aten.median.dim: (1, None), aten.nanmedian.dim: (1, None),
    aten.kthvalue.default: (2, -1), aten.mode.default: (1, -1),
}


@sharding_rule(*_ALONG_DIM)
def along_dim(op: OpSpec) -> list[Strategy]:
    """Note [order statistics keep their dim whole]."""
    t = op.tensors()[0]
    pos, default = _ALONG_DIM[op.op]
    dim = op.arg(pos, "dim", default)
    reduced = frozenset({dim % t.ndim}) if t.ndim else frozenset()
    keepdim = bool(op.arg(pos + 1, "keepdim", False))
    return reduction_strategies(op, t, reduced, keepdim, None, "", (), 2)


@sharding_rule(aten.median.default, aten.nanmedian.default)
def whole_median(op: OpSpec) -> list[Strategy]:
    """Note [order statistics keep their dim whole]: every dim is ranked together."""
    return [Strategy((R,), (R,))]


@sharding_rule(aten.value_selecting_reduction_backward.default)
def value_selecting_reduction_backward(op: OpSpec) -> list[Strategy]:
    """``(grad, dim, indices, sizes, keepdim)``: zeros of ``sizes`` with ``grad`` put at
    ``indices`` along ``dim``. A dim other than ``dim`` pairs each gradient row with its
    index row and output row: grad and indices sharded on it give that dim's chunk of the
    output, each rank's zeros sized by its own piece (local function). Linear in grad."""
    sizes = op.arg(3, "sizes")
    n = len(sizes)
    found = [Strategy((R, R), (R,), local=_VSR_LOCAL)]
    if n:
        dim = op.arg(1, "dim") % n
        keepdim = bool(op.arg(4, "keepdim"))
        for d in range(n):
            if d != dim:
                g = d if keepdim else d - (d > dim)
                found.append(Strategy((Shard(g), Shard(g)), (Shard(d),), local=_VSR_LOCAL))
    return found + linear_partials(op, 0, LINEAR, local=_VSR_LOCAL)


_VSR_LOCAL = "value_selecting_reduction_backward_piece"


@local_function(_VSR_LOCAL)
def _vsr_piece(func: Any, args: tuple, kwargs: dict, boxes: Sequence[Box | None]) -> Any:
    """The op with ``sizes`` made this rank's: the gradient piece's extent on every dim but
    ``dim``, which is whole."""
    names = [a.name for a in func._schema.arguments]
    a = dict(zip(names, args))
    a.update(kwargs)
    sizes, grad = list(a["sizes"]), a["grad"]
    if sizes:
        dim = a["dim"] % len(sizes)
        local = list(grad.shape)
        if a["keepdim"]:
            local[dim] = sizes[dim]
        else:
            local.insert(dim, sizes[dim])
        a["sizes"] = local
    return func(*(a[n] for n in names))
