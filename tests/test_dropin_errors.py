"""The same mistake on torch.distributed.tensor and on ours (both on simpg): ours keeps its
own error and wording, and is an instance of the builtin type torch raises, so an ``except``
clause written for torch catches it (Note [torch's error types] in dtensor/__init__.py)."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
import torch.distributed.tensor as tdt
from torch import nn

import dtensor
from tests.support.dropin_world import Lib, both


def _mesh(lib: Lib, *shape: int, names: tuple[str, ...] | None = None) -> Any:
    return lib.init_device_mesh("cpu", shape or (2,), mesh_dim_names=names)


def _sharded(lib: Lib, *shape: int) -> Any:
    return lib.distribute_tensor(torch.ones(*shape), _mesh(lib), [lib.Shard(0)])


def _module(lib: Lib) -> Any:
    return dtensor if lib.name == "ours" else tdt


def _parallelize(lib: Lib, module: nn.Module, plan: Any, mesh: Any = None) -> Any:
    return lib.parallel.parallelize_module(module, mesh or _mesh(lib), plan)


CASES: dict[str, Callable[[Lib], Any]] = {
    # meshes: torch raises RuntimeError (a missing dim: KeyError by name, IndexError by int)
    "mesh-larger-than-world": lambda L: _mesh(L, 4),
    "mesh-names-count": lambda L: _mesh(L, 2, names=("dp", "tp")),
    "mesh-names-repeat": lambda L: _mesh(L, 1, 2, names=("dp", "dp")),
    "mesh-sliced-by-name-without-names": lambda L: _mesh(L)["tp"],
    "mesh-dim-name-missing": lambda L: _mesh(L, 2, names=("tp",))["dp"],
    "mesh-dim-index-out-of-range": lambda L: _mesh(L).size(3),
    "mesh-local-rank-of-2d-without-dim": lambda L: _mesh(L, 1, 2).get_local_rank(),
    "no-mesh-and-none-current": lambda L: L.distribute_tensor(torch.ones(2),
                                                              placements=[L.Shard(0)]),
    "factory-without-mesh": lambda L: _module(L).zeros(2, placements=[L.Shard(0)]),
    "factory-negative-size": lambda L: _module(L).zeros(-1, 2, device_mesh=_mesh(L),
                                                        placements=[L.Shard(0)]),
    # placements
    "shard-dim-a-string": lambda L: L.Shard("0"),
    "placements-count": lambda L: L.distribute_tensor(torch.ones(2, 2), _mesh(L),
                                                      [L.Shard(0), L.Replicate()]),
    "not-a-placement": lambda L: L.distribute_tensor(torch.ones(2), _mesh(L), ["shard"]),
    "from-local-shard-dim-out-of-range": lambda L: L.DTensor.from_local(
        torch.ones(2), _mesh(L), [L.Shard(3)]),
    # from_local, ops
    "from-local-of-a-dtensor": lambda L: L.DTensor.from_local(_sharded(L, 2), _mesh(L)),
    "ops-on-two-meshes": lambda L: _sharded(L, 2) + L.distribute_tensor(
        torch.ones(2), _mesh(L, 1, 2), [L.Replicate(), L.Shard(0)]),
    "redistribute-without-placements": lambda L: _sharded(L, 2).redistribute(),
    # parallel styles and plans
    "plan-not-a-style-or-dict": lambda L: _parallelize(L, nn.Linear(2, 2), ["colwise"]),
    "plan-value-not-a-style": lambda L: _parallelize(L, nn.Sequential(nn.Linear(2, 2)),
                                                     {"0": "colwise"}),
    "parallelize-without-mesh": lambda L: L.parallel.parallelize_module(
        nn.Linear(2, 2), parallelize_plan=L.parallel.ColwiseParallel()),
    "colwise-on-a-conv": lambda L: _parallelize(L, nn.Conv2d(2, 2, 1),
                                                L.parallel.ColwiseParallel()),
    "rowwise-on-a-conv": lambda L: _parallelize(L, nn.Conv2d(2, 2, 1),
                                                L.parallel.RowwiseParallel()),
    "prepare-input-layouts-lengths-differ": lambda L: L.parallel.PrepareModuleInput(
        input_layouts=(L.Shard(0), L.Shard(0)), desired_input_layouts=(L.Replicate(),)),
    "prepare-input-desired-layouts-missing": lambda L: L.parallel.PrepareModuleInput(
        input_layouts=(L.Shard(0),)),
    "prepare-input-kwarg-layouts-differ": lambda L: L.parallel.PrepareModuleInput(
        input_kwarg_layouts={"x": L.Shard(0)}, desired_input_kwarg_layouts={}),
    "prepare-output-layouts-lengths-differ": lambda L: L.parallel.PrepareModuleOutput(
        output_layouts=(L.Shard(0), L.Shard(0)), desired_output_layouts=(L.Replicate(),)),
    "prepare-input-more-layouts-than-inputs": lambda L: _parallelize(
        L, nn.Identity(), L.parallel.PrepareModuleInput(
            input_layouts=(L.Shard(0),) * 2, desired_input_layouts=(L.Replicate(),) * 2)
    )(torch.ones(2)),
    "distribute-module-twice": lambda L: L.distribute_module(
        L.distribute_module(nn.Linear(2, 2), _mesh(L)), _mesh(L)),
    "parallelize-twice": lambda L: [_parallelize(L, m, L.parallel.ColwiseParallel())
                                    for m in [nn.Linear(2, 2)] * 2],
    "distribute-module-without-mesh": lambda L: L.distribute_module(nn.Linear(2, 2)),
    "sequence-parallel-non-tensor-input": lambda L: _parallelize(
        L, nn.LayerNorm(2), L.parallel.SequenceParallel())("not a tensor"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_our_error_is_an_instance_of_the_type_torch_raises(case):
    def program(lib: Lib) -> BaseException | None:
        try:
            CASES[case](lib)
        except Exception as e:  # what is compared is the exception itself
            return e
        return None

    res = both(2, program)
    theirs, ours = res["torch"][0], res["ours"][0]
    assert theirs is not None and ours is not None, (theirs, ours)
    assert isinstance(ours, type(theirs)), (
        f"torch raises {type(theirs).__name__} ({theirs}); ours raises {type(ours).__mro__}")
    assert type(ours).__module__.startswith("dtensor") or type(ours) is type(theirs)
