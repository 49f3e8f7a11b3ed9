"""Ops whose sharded form needs a collective inside them (Note [decompositions] in
``dtensor.dispatch.decomposition_table``), registered at import.

Note [sharded vector norms]
``|x|_p`` over a dim split across ranks is not a Partial of the ranks' norms:
sqrt(s1 + s2) != sqrt(s1) + sqrt(s2). It is a Partial of their p-th powers, so each rank
computes ``|piece|_p ** p``, the sum is all-reduced (one value per output element), and every
rank takes the p-th root: |x|_p = (sum_r |x_r|_p^p)^(1/p); an empty piece adds 0. Orders
whose pieces do combine as a Partial (1 and 0 as sums, +-inf as max/min) stay with the rule,
which defers that reduction. torch expresses the same with its ``_NormPartial`` placement;
ours keeps placements closed (Shard/Replicate/Partial) and does it here, so the non-foreach
``clip_grad_norm_`` over sharded gradients moves one float per parameter, not every gradient
(``dtensor.decompositions.foreach_norm`` does it for the foreach path, one collective per list).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from dtensor.dispatch import register_decomposition
from dtensor.placements import Partial, Placement, Replicate, Shard
from dtensor.redistribute import redistribute_local_tensor
from dtensor.spec import DTensorSpec
from dtensor.tensor import DTensor

aten = torch.ops.aten
# |x|_1 and |x|_0 are sums of the pieces' and |x|_inf / |x|_-inf their max / min: the rule's
# Partial outputs need no collective here (dtensor.ops.reductions), so those stay with it
_RULE_ORDS = (0.0, 1.0, math.inf, -math.inf)


def _arg(args: tuple, kwargs: dict, index: int, name: str, default: Any) -> Any:
    return args[index] if index < len(args) else kwargs.get(name, default)


def _vector_norm(func: Any, args: tuple, kwargs: dict) -> Any:
    """Note [sharded vector norms]."""
    x = args[0]
    if not isinstance(x, DTensor) or x._spec.has_partial:
        return NotImplemented  # a Partial must be reduced first: the rule does that
    ord_ = _arg(args, kwargs, 1, "ord", 2)
    dim = _arg(args, kwargs, 2, "dim", None)
    keepdim = bool(_arg(args, kwargs, 3, "keepdim", False))
    dtype = kwargs.get("dtype")
    if isinstance(ord_, complex) or math.isnan(float(ord_)):
        return NotImplemented
    p = float(ord_)
    if p in _RULE_ORDS:
        return NotImplemented  # a Partial of the pieces' norms is exact: the rule keeps it
    spec = x._spec
    ndim = len(spec.shape)
    dims = set(range(ndim)) if dim is None or (not isinstance(dim, int) and len(dim) == 0) \
        else {d % max(ndim, 1) for d in ([dim] if isinstance(dim, int) else dim)}
    split = [m for m, pl in enumerate(spec.placements) if isinstance(pl, Shard) and pl.dim in dims]
    if not split:
        return NotImplemented  # every reduced dim is whole on each rank: the rule keeps shards
    local = x._local_tensor
    reduce_dims = sorted(dims) if dims else None
    meta = func(torch.empty(spec.shape, dtype=spec.dtype, device="meta"), ord_,
                reduce_dims, keepdim, dtype=dtype)
    if local.numel() == 0:  # adds nothing (the op itself raises on empty input for p < 0)
        part = torch.zeros(_piece_shape(meta.shape, spec, dims, keepdim), dtype=meta.dtype,
                           device=local.device)
    else:
        part = func(local, ord_, reduce_dims, keepdim, dtype=dtype).pow(p)
    out_placements = _output_placements(spec.placements, dims, keepdim, split)
    done = tuple(Replicate() if isinstance(pl, Partial) else pl for pl in out_placements)
    out_shape = tuple(meta.shape)
    total = redistribute_local_tensor(part, spec.mesh, out_placements, done, out_shape)
    total = total.pow(1.0 / p)
    out_spec = DTensorSpec(spec.mesh, done, out_shape, tuple(meta.stride()), meta.dtype)
    return DTensor(total, out_spec, requires_grad=False)


def _output_placements(placements: tuple[Placement, ...], dims: set[int], keepdim: bool,
                       split: list[int]) -> tuple[Placement, ...]:
    out: list[Placement] = []
    for m, pl in enumerate(placements):
        if m in split:
            out.append(Partial("sum"))
        elif isinstance(pl, Shard):  # a kept dim: its index shifts past the removed ones
            shift = 0 if keepdim else sum(1 for d in dims if d < pl.dim)
            out.append(pl.with_dim(pl.dim - shift))  # its split rule too
        else:
            out.append(pl)
    return tuple(out)


def _piece_shape(out_shape: torch.Size, spec: DTensorSpec, dims: set[int],
                 keepdim: bool) -> tuple[int, ...]:
    """This rank's piece of the output (kept dims may be sharded too)."""
    local = spec.local_shape()
    kept = [(s if d not in dims else 1) for d, s in enumerate(local)
            if keepdim or d not in dims]
    return tuple(kept) if kept or not out_shape else tuple(out_shape)


register_decomposition(aten.linalg_vector_norm.default, _vector_norm)
