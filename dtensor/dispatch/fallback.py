"""The fallback for an op without a sharding rule: gather its inputs to Replicate, run it
whole on every rank, and hand back replicated outputs (``fallback_policy``).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch.utils import _pytree as pytree

from dtensor.placements import Replicate
from dtensor.redistribute import redistribute_local_tensor
from dtensor.spec import DTensorSpec, contiguous_strides
from dtensor.dispatch.plans import _return_sources
from dtensor.dispatch.policy import NoShardingRuleError, _policy, _warned


# -- fallback ------------------------------------------------------------------------------------
def _fallback(DTensor: type, func: Any, flat: list, tree: Any, dts: list) -> Any:
    policy = _policy.get()
    name = str(func)
    if policy == "error":
        raise NoShardingRuleError(f"{name} has no sharding rule (fallback policy 'error'); "
                                  "use fallback_policy('warn') to gather inputs to Replicate")
    if policy == "warn" and name not in _warned:
        _warned.add(name)
        warnings.warn(f"{name} has no sharding rule: its DTensor inputs are gathered to "
                      "Replicate (correct, but moves the whole tensor)", stacklevel=3)
    mesh = dts[0]._spec.mesh
    full = [_full(a) if isinstance(a, DTensor) else a for a in flat]
    args, kwargs = pytree.tree_unflatten(full, tree)
    out = func(*args, **kwargs)
    if func._schema.is_mutable:
        _write_back(DTensor, func, flat, full, tree)
        d_args, d_kwargs = pytree.tree_unflatten(flat, tree)
        sources = _return_sources(func)
        if any(src is not None for src in sources):
            outs = out if isinstance(out, tuple) else (out,)
            picked = [(d_args[src[0]] if src[0] < len(d_args) else d_kwargs.get(src[1]))
                      if src is not None else value for value, src in zip(outs, sources)]
            picked = [p if isinstance(p, DTensor) or s is not None
                      else _wrap_replicated(DTensor, p, mesh) for p, s in zip(picked, sources)]
            return tuple(picked) if isinstance(out, tuple) else picked[0]

    return pytree.tree_map_only(torch.Tensor, lambda t: _wrap_replicated(DTensor, t, mesh), out)


def _wrap_replicated(DTensor: type, t: Any, mesh: Any) -> Any:
    if not isinstance(t, torch.Tensor):
        return t
    shape = tuple(t.shape)
    replicated = tuple(Replicate() for _ in range(mesh.ndim))
    spec = DTensorSpec(mesh, replicated, shape, contiguous_strides(shape), t.dtype)
    return DTensor(t, spec, requires_grad=False)


def _full(d: Any) -> torch.Tensor:
    spec: DTensorSpec = d._spec
    target = tuple(Replicate() for _ in spec.placements)
    if spec.placements == target:
        return d._local_tensor
    return redistribute_local_tensor(d._local_tensor, spec.mesh, spec.placements, target,
                                     spec.shape)


def _write_back(DTensor: type, func: Any, flat: list, full: list, tree: Any) -> None:
    """In-place op on full tensors: store each mutated DTensor's new value in its placements."""
    d_args, d_kwargs = pytree.tree_unflatten(flat, tree)
    f_args, f_kwargs = pytree.tree_unflatten(full, tree)
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        if i < len(d_args):
            d, value = d_args[i], f_args[i]
        else:
            d, value = d_kwargs.get(arg.name), f_kwargs.get(arg.name)
        if not isinstance(d, DTensor):
            continue
        spec = d._spec
        replicated = tuple(Replicate() for _ in spec.placements)
        if spec.placements != replicated:
            value = redistribute_local_tensor(value, spec.mesh, replicated, spec.placements,
                                              spec.shape)
        if value is not d._local_tensor:
            d._local_tensor.copy_(value)
