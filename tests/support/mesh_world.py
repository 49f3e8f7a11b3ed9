"""Run a test body on every rank of a simulated world, with a dtensor mesh of the given shape."""

from __future__ import annotations

import math
from typing import Any, Callable

import simpg
from dtensor import DeviceMesh, init_device_mesh


def run_on_mesh(mesh_shape: tuple[int, ...], fn: Callable[[DeviceMesh], Any],
                **run_kwargs: Any) -> list[Any]:
    """``fn(mesh)`` on ``prod(mesh_shape)`` simpg ranks; the ranks' results in rank order."""
    return simpg.run(lambda: fn(init_device_mesh("cpu", mesh_shape)), math.prod(mesh_shape),
                     **run_kwargs)
