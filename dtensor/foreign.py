"""Errors for our DTensor mixed with torch.distributed.tensor's, which share names.

Note [two DTensor libraries]
A program migrating from ``torch.distributed.tensor`` may hold both libraries' DTensors (a
checkpoint loader, a helper still importing torch's). Each library takes the other's DTensor
for a plain tensor: torch's raises "got mixed torch.Tensor and DTensor" without saying which
is which, ours would read torch's as a Replicate value, or split its local shard as if it
were the whole tensor. So every entry point that takes a tensor or a mesh checks for torch's
classes (by module name: dtensor never imports torch.distributed.tensor) and says which
argument belongs to which library and how to convert it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree

_CONVERT = ("convert it with dtensor.DTensor.from_local(t.to_local(), mesh, placements) "
            "(or t.full_tensor() for the whole value), and build meshes with "
            "dtensor.init_device_mesh")


class MixedDTensorError(RuntimeError):
    """An op got dtensor's and torch.distributed.tensor's DTensors. A RuntimeError, as
    torch's own mixing error is: Python turns a TypeError from ``a + b`` into NotImplemented
    and would retry as ``b.__radd__(a)``, where torch's message, not this one, comes out."""


def is_torch_dtensor(x: Any) -> bool:
    """``x`` is torch.distributed.tensor's DTensor (not ours)."""
    return isinstance(x, torch.Tensor) and type(x).__module__.startswith(
        "torch.distributed.tensor")


def is_torch_mesh(x: Any) -> bool:
    return type(x).__name__ == "DeviceMesh" and type(x).__module__.startswith(
        "torch.distributed")


def check_dispatch_types(func: Any, types: Any, args: tuple, kwargs: dict) -> None:
    """Raise for an op that mixes our DTensor with torch's (only called when an op sees
    more than one tensor subclass, so plain calls pay nothing)."""
    if not any(t.__module__.startswith("torch.distributed.tensor") for t in types):
        return
    flat = pytree.tree_leaves((args, kwargs))
    tensors = [x for x in flat if isinstance(x, torch.Tensor)]
    described = ", ".join(f"tensor {i}: {_library(x)}" for i, x in enumerate(tensors))
    raise MixedDTensorError(f"{func}: mixes dtensor's DTensor with torch.distributed.tensor's "
                    f"({described}); the two libraries' DTensors do not mix: {_CONVERT}")


def refuse_torch_dtensor(x: Any, where: str) -> None:
    if is_torch_dtensor(x):
        raise TypeError(f"{where}: got a torch.distributed.tensor DTensor "
                        f"{tuple(x.shape)} {list(x.placements)}; dtensor takes plain tensors "
                        f"or its own DTensors: {_CONVERT}")


def refuse_torch_mesh(x: Any, where: str) -> None:
    if is_torch_mesh(x):
        raise TypeError(f"{where}: got torch.distributed's DeviceMesh {x}; dtensor needs its "
                        f"own DeviceMesh: build it with dtensor.init_device_mesh (same "
                        f"arguments) or dtensor.DeviceMesh")


def _library(x: torch.Tensor) -> str:
    if is_torch_dtensor(x):
        return f"torch.distributed.tensor.DTensor {tuple(x.shape)}"
    if type(x).__module__.startswith("dtensor"):
        return f"dtensor.DTensor {tuple(x.shape)}"
    return f"{type(x).__name__} {tuple(x.shape)}"
