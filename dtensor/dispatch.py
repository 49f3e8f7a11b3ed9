"""What happens when an aten op meets DTensors.

Until the sharding-propagation rules land (the next issue), two paths:
- local: ops that are exact on each rank's piece as it is (pointwise ops on DTensors that all
  share one spec with no Partial, detach/clone/alias, and the ``*_like`` factories);
- fallback: every DTensor argument is gathered to the full tensor (Replicate), the op runs on
  full tensors, and outputs are Replicate DTensors; an in-place op writes the result back in
  the argument's placements. Always correct; costly. ``fallback_policy`` chooses whether it
  warns (once per op, the default), stays silent, or raises.
"""

from __future__ import annotations

import contextlib
import contextvars
import warnings
from typing import Any, Iterator

import torch
from torch.utils import _pytree as pytree

from dtensor.placements import Replicate
from dtensor.redistribute import redistribute_local_tensor
from dtensor.spec import DTensorSpec, contiguous_strides, replicate_partials

aten = torch.ops.aten

_POLICIES = ("warn", "silent", "error")
_policy: contextvars.ContextVar[str] = contextvars.ContextVar("dtensor_fallback", default="warn")
_warned: set[str] = set()

_SAME_SPEC = {aten.detach.default, aten.alias.default, aten.clone.default}
_LIKE = {aten.zeros_like.default, aten.ones_like.default, aten.empty_like.default,
         aten.full_like.default, aten.rand_like.default, aten.randn_like.default}
_NOT_LOCAL_LIKE = {aten.rand_like.default, aten.randn_like.default}  # need the sharded RNG


class NoShardingRuleError(NotImplementedError):
    """An op has no sharding rule and the fallback policy is "error"."""


@contextlib.contextmanager
def fallback_policy(policy: str) -> Iterator[None]:
    """Within the block (on this thread/rank), ops without a sharding rule ``policy``:
    "warn" (default: gather to Replicate, warn once per op), "silent", or "error"."""
    if policy not in _POLICIES:
        raise ValueError(f"fallback policy {policy!r}: expected one of {_POLICIES}")
    token = _policy.set(policy)
    try:
        yield
    finally:
        _policy.reset(token)


def dispatch(func: Any, args: tuple, kwargs: dict) -> Any:
    from dtensor.tensor import DTensor

    flat, tree = pytree.tree_flatten((args, kwargs))
    dts = [a for a in flat if isinstance(a, DTensor)]
    mesh = dts[0]._spec.mesh
    for d in dts[1:]:
        if d._spec.mesh != mesh:
            raise ValueError(f"{func}: DTensors on different meshes in one op: {mesh} and "
                             f"{d._spec.mesh}; redistribute them onto one mesh first")
    local = _local_path(func, flat, dts)
    if local is not None:
        return _run_local(func, flat, tree, local)
    return _fallback(func, flat, tree, dts)


def _local_path(func: Any, flat: list, dts: list) -> DTensorSpec | None:
    from dtensor.tensor import DTensor

    spec = dts[0]._spec
    if func in _LIKE and func not in _NOT_LOCAL_LIKE:
        return spec.with_placements(replicate_partials(spec.placements))
    if func in _SAME_SPEC:
        return spec
    if torch.Tag.pointwise not in func.tags or spec.has_partial:
        return None
    if any(isinstance(a, torch.Tensor) and not isinstance(a, DTensor) and a.dim() > 0
           for a in flat):
        return None  # a plain tensor argument needs a rule to be sliced
    if all(d._spec == spec for d in dts):
        return spec
    return None


def _run_local(func: Any, flat: list, tree: Any, spec: DTensorSpec) -> Any:
    from dtensor.tensor import DTensor

    unwrapped = [a._local_tensor if isinstance(a, DTensor) else a for a in flat]
    args, kwargs = pytree.tree_unflatten(unwrapped, tree)
    out = func(*args, **kwargs)
    if func._schema.is_mutable:
        return flat[0]
    return _wrap(out, lambda t: DTensor(t, DTensorSpec(
        spec.mesh, spec.placements, spec.shape, spec.stride, t.dtype), requires_grad=False))


def _fallback(func: Any, flat: list, tree: Any, dts: list) -> Any:
    from dtensor.tensor import DTensor

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
    replicated = tuple(Replicate() for _ in range(mesh.ndim))
    full = [_full(a) if isinstance(a, DTensor) else a for a in flat]
    args, kwargs = pytree.tree_unflatten(full, tree)
    out = func(*args, **kwargs)
    if func._schema.is_mutable:
        _write_back(func, flat, full, tree)
        return flat[0] if isinstance(flat[0], DTensor) else out

    def wrap(t: torch.Tensor) -> DTensor:
        shape = tuple(t.shape)
        spec = DTensorSpec(mesh, replicated, shape, contiguous_strides(shape), t.dtype)
        return DTensor(t, spec, requires_grad=False)

    return _wrap(out, wrap)


def _full(d: Any) -> torch.Tensor:
    spec: DTensorSpec = d._spec
    target = tuple(Replicate() for _ in spec.placements)
    if spec.placements == target:
        return d._local_tensor
    return redistribute_local_tensor(d._local_tensor, spec.mesh, spec.placements, target,
                                     spec.shape)


def _write_back(func: Any, flat: list, full: list, tree: Any) -> None:
    """In-place op on full tensors: store each mutated DTensor's new value in its placements."""
    from dtensor.tensor import DTensor

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


def _wrap(out: Any, wrap: Any) -> Any:
    return pytree.tree_map_only(torch.Tensor, wrap, out)
