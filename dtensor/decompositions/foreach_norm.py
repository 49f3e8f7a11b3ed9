"""``_foreach_norm`` over sharded tensors for the orders no Partial expresses (the 2-norm and
every p other than 0, 1, +-inf), as a decomposition (Note [decompositions] in
``dtensor.dispatch.decomposition_table``), registered at import.

Note [sharded foreach norms]
|x|_p = (sum_r |x_r|_p^p)^(1/p) over the pieces x_r of a Shard: the p-th powers are a
Partial(sum) (``_foreach_powsum`` of the pieces; an empty piece adds 0), the root is not (see
Note [foreach norms] in ``dtensor.ops.foreach``, whose rule would gather every tensor). So each
rank computes its pieces' p-th powers, stacks them into one vector and all-reduces it once
per mesh dim, each time the run of entries sharded over that dim (the groups of tensors are
ordered so that every dim's run is adjacent: sharded over dp only, over dp and tp, over tp
only), and every rank takes the roots (one ``_foreach_pow``, not a kernel per tensor).
``clip_grad_norm_(..., foreach=True)`` over sharded gradients so moves one float per gradient
instead of every gradient, in at most one collective per mesh dim, as torch's (its norms stay
_NormPartial until they are stacked, then reduce over dp and over tp): no collective spans
the whole mesh, which would cross the slow links in a ring of every rank. Where no order
makes every run adjacent (3 mesh dims or more, sharded many ways) each group of tensors
sharded over the same dims is all-reduced on its own, over those dims together. A call with a
Partial input, an empty tensor or no sharded tensor runs through the rule as usual.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch

from dtensor import comm
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
    groups.pop((), None)  # whole on every rank: its p-th power is already the total
    replicated = (Replicate(),) * mesh.ndim
    order = _per_dim_order(list(groups), mesh.ndim)
    if order is None:  # one all-reduce per group, over its dims together
        for split, idx in groups.items():
            stacked = torch.stack([powers[i] for i in idx])
            src = tuple(Partial() if m in split else Replicate() for m in range(mesh.ndim))
            summed = redistribute_local_tensor(stacked, mesh, src, replicated, (len(idx),))
            for j, i in enumerate(idx):
                powers[i] = summed[j]
    else:
        idx = [i for split in order for i in groups[split]]
        total = _sum_per_dim(torch.stack([powers[i] for i in idx]), mesh,
                             [_split_dims(xs[i]) for i in idx])
        for j, i in enumerate(idx):
            powers[i] = total[j]
    # the roots in one op, not one pow per tensor: a kernel each on a device
    roots = torch._foreach_pow(powers, 1.0 / float(ord_))
    return [DTensor(root, DTensorSpec(mesh, replicated, (), (), root.dtype), requires_grad=False)
            for root in roots]


def _per_dim_order(splits: list[tuple[int, ...]], ndim: int
                   ) -> tuple[tuple[int, ...], ...] | None:
    """An order of the groups in which, for every mesh dim, the groups sharded over it are
    adjacent (Note [sharded foreach norms]); None if there is none (or too many groups to
    try: a mesh of 3 dims or more sharding tensors many ways)."""
    if len(splits) > 6:
        return None
    for order in itertools.permutations(splits):
        if all(_adjacent([m in split for split in order]) for m in range(ndim)):
            return order
    return None


def _adjacent(flags: list[bool]) -> bool:
    at = [k for k, f in enumerate(flags) if f]
    return not at or at[-1] - at[0] + 1 == len(at)


def _sum_per_dim(values: torch.Tensor, mesh: Any, splits: list[tuple[int, ...]]
                 ) -> list[torch.Tensor]:
    """``values[k]`` summed over the mesh dims ``splits[k]``, one all-reduce per mesh dim of
    the run of entries sharded over it (adjacent: ``_per_dim_order``); 0-d views."""
    # each entry as (the 1-d tensor it is in, its position there): a run within one tensor
    # is a slice of it, no op
    place: list[tuple[torch.Tensor, int]] = [(values, k) for k in range(len(splits))]
    for m in range(mesh.ndim):
        run = [k for k, split in enumerate(splits) if m in split]
        if not run:
            continue
        a, b = run[0], run[-1] + 1
        base, first = place[a]
        if all(place[k][0] is base and place[k][1] == first + k - a for k in range(a, b)):
            piece = base[first:first + b - a]
        else:
            piece = torch.stack([t[k] for t, k in place[a:b]])
        # an all-reduce itself: the planner would, for so few bytes, reduce-scatter over m and
        # all-gather over the whole mesh (fewer bytes, a ring of every rank)
        summed = comm.all_reduce(piece, mesh.get_group(m), "sum")
        place[a:b] = [(summed, k) for k in range(b - a)]
    return [t[k] for t, k in place]


register_decomposition(aten._foreach_norm.Scalar, _foreach_norm)
