"""``_foreach_norm`` over sharded tensors for the orders no Partial expresses (the 2-norm and
every p other than 0, 1, +-inf), as a decomposition (Note [decompositions] in
``dtensor.dispatch``), registered at import.

Note [sharded foreach norms]
|x|_p = (sum_r |x_r|_p^p)^(1/p) over the pieces x_r of a Shard: the p-th powers are a
Partial(sum) (``_foreach_powsum`` of the pieces; an empty piece adds 0), the root is not (see
Note [foreach norms] in ``dtensor.ops.foreach``, whose rule would gather every tensor). So each
rank computes its pieces' p-th powers, the tensors sharded over the same mesh dims are stacked
into one vector and all-reduced together (one collective per group, one float per tensor),
and every rank takes the roots (one ``_foreach_pow``, not a kernel per tensor):
``clip_grad_norm_(..., foreach=True)`` over sharded gradients moves one float per gradient
instead of every gradient. A call with a Partial input, an empty
tensor or no sharded tensor runs through the rule as usual.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from dtensor.dispatch import register_decomposition
from dtensor.placements import Partial, Replicate, Shard
from dtensor.redistribute import redistribute_local_tensor
from dtensor.spec import DTensorSpec
from dtensor.tensor import DTensor

aten = torch.ops.aten
_RULE_ORDS = (0.0, 1.0, math.inf, -math.inf)  # Partial(sum/max/min) in the rule: no collective


def _split_dims(x: Any) -> tuple[int, ...]:
    """Mesh dims over which ``x``'s pieces differ (a plain tensor counts as Replicate)."""
    if not isinstance(x, DTensor):
        return ()
    return tuple(m for m, p in enumerate(x._spec.placements) if isinstance(p, Shard))


def _foreach_norm(func: Any, args: tuple, kwargs: dict) -> Any:
    """Note [sharded foreach norms]."""
    xs = list(args[0])
    ord_ = args[1] if len(args) > 1 else kwargs.get("ord", 2)
    dtype = args[2] if len(args) > 2 else kwargs.get("dtype")
    if isinstance(ord_, complex) or math.isnan(float(ord_)) or float(ord_) in _RULE_ORDS:
        return NotImplemented
    dts = [x for x in xs if isinstance(x, DTensor)]
    if (any(x._spec.has_partial for x in dts) or any(x.numel() == 0 for x in xs)
            or not any(_split_dims(x) for x in xs)):
        return NotImplemented
    mesh = dts[0]._spec.mesh
    pieces = [x._local_tensor if isinstance(x, DTensor) else x for x in xs]
    powers = list(aten._foreach_powsum.Scalar(pieces, ord_, dtype=dtype))
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, x in enumerate(xs):
        groups.setdefault(_split_dims(x), []).append(i)
    replicated = (Replicate(),) * mesh.ndim
    for split, idx in groups.items():
        if not split:
            continue  # whole on every rank: its p-th power is already the total
        stacked = torch.stack([powers[i] for i in idx])
        src = tuple(Partial() if m in split else Replicate() for m in range(mesh.ndim))
        summed = redistribute_local_tensor(stacked, mesh, src, replicated, (len(idx),))
        for j, i in enumerate(idx):
            powers[i] = summed[j]
    # the roots in one op, not one pow per tensor: a kernel each on a device
    roots = torch._foreach_pow(powers, 1.0 / float(ord_))
    return [DTensor(root, DTensorSpec(mesh, replicated, (), (), root.dtype), requires_grad=False)
            for root in roots]


register_decomposition(aten._foreach_norm.Scalar, _foreach_norm)
