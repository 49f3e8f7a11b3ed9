"""The same program on torch.distributed.tensor and on ours, both on simpg: ``both(world,
program)`` runs ``program(lib)`` on every rank once per library, ``lib`` holding that
library's names, so a drop-in test is written once and compares the two.

torch's DTensor keeps per-thread caches keyed without the rank, and simpg reuses its rank
threads: each torch body starts by clearing them (``_fresh_torch_caches``).
"""

from __future__ import annotations

from typing import Any, Callable

import torch.distributed.tensor as tdt
import torch.distributed.tensor.parallel as tdt_parallel
from torch.distributed.device_mesh import init_device_mesh as torch_init_device_mesh

import dtensor
import dtensor.parallel
import simpg

LIBS = ("ours", "torch")


def fresh_torch_caches() -> None:
    from torch.distributed.tensor._redistribute import (_gen_transform_infos,
                                                        clear_redistribute_planner_cache)
    from torch.distributed.tensor._sharding_prop import ShardingPropagator
    from torch.distributed.tensor.debug import _clear_sharding_prop_cache

    _clear_sharding_prop_cache()
    _gen_transform_infos.cache_clear()
    clear_redistribute_planner_cache()
    ShardingPropagator._propagate_tensor_meta_cached.cache_clear()


class Lib:
    """One library's names, so a program is written once."""

    def __init__(self, name: str) -> None:
        self.name = name
        mod: Any = dtensor if name == "ours" else tdt
        self.DTensor, self.Shard = mod.DTensor, mod.Shard
        self.Replicate, self.Partial = mod.Replicate, mod.Partial
        self.distribute_tensor = mod.distribute_tensor
        self.init_device_mesh = (dtensor.init_device_mesh if name == "ours"
                                 else torch_init_device_mesh)
        self.distribute_module = mod.distribute_module
        self.parallel: Any = dtensor.parallel if name == "ours" else tdt_parallel


def both(world: int, program: Callable[[Lib], Any]) -> dict[str, list[Any]]:
    """``program`` on every rank, once per library: {library: per-rank results}."""
    out = {}
    for name in LIBS:
        lib = Lib(name)

        def body(lib: Lib = lib) -> Any:
            if lib.name == "torch":
                fresh_torch_caches()
            return program(lib)

        out[name] = simpg.run(body, world)
    return out


def error_type(fn: Callable[[], Any]) -> str:
    try:
        fn()
    except Exception as e:  # the type is what is compared
        return type(e).__name__
    return "no error"
