"""An inferred plan handed back to eager code: the user's own module, its parameters laid out
as the plan chose, its inputs placed as the plan placed them.

Note [plans in eager code]
A ``ShardingPlan`` fixes every value of a captured step; eager code can keep only what lives
on the module: each parameter's (and buffer's) placements and each argument's. So
``ShardingPlan.to_parallelize_plan()`` returns an :class:`EagerPlan` of exactly those, and
``EagerPlan.apply(module, mesh)`` makes them real with ``distribute_module``: a partition
function that lays out each parameter as planned (``distribute_parameter``, whose gradient
hook ends each gradient laid out like its parameter: the plan's output ties) and a forward
pre-hook that lays out plain-tensor arguments. Everything between is eager propagation.

Why per-parameter layouts, not ``ColwiseParallel`` / ``RowwiseParallel`` + ``fully_shard``:
- inferred plans shard weights over *both* mesh dims (``[S(1),S(0)]``) and keep activations
  as DTensors between modules; the styles describe one mesh dim and convert to local tensors
  at module boundaries, a different program with different bytes;
- a parameter sharded over the batch (data-parallel) mesh dim already behaves as
  ``fully_shard`` would have it: propagation gathers it where a batch-sharded activation
  needs it whole, and the gradient hook reduce-scatters its gradient back (the bytes of an
  FSDP step), so no separate ``fully_shard`` call is needed or made.

What eager code cannot follow is the plan's choice for each *intermediate*: propagation
picks op by op, so the eager step equals one device but may move other bytes than the plan
predicted (``tests/test_graph_eager.py`` and ``benchmarks/bench_graph.py`` measure both).

>>> import copy, torch, simpg, dtensor
>>> from dtensor import Shard
>>> from dtensor.graph import ShardSpec, capture, infer
>>> model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
>>> x = torch.randn(4, 8)
>>> eager = infer(capture(model, x), (2,), {"input0": ShardSpec([Shard(0)])}
...               ).to_parallelize_plan()
>>> def body():
...     mesh = dtensor.init_device_mesh("cpu", (2,))
...     return eager.apply(copy.deepcopy(model), mesh)(x).full_tensor().shape
>>> simpg.run(body, 2)[0]
torch.Size([4, 8])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from dtensor.api import distribute_tensor
from dtensor.graph.errors import GraphShardingError
from dtensor.mesh import DeviceMesh
from dtensor.placements import Placement, fmt_placements
from dtensor.tensor import DTensor

Pl = tuple[Placement, ...]


class EagerPlanError(GraphShardingError):
    """An ``EagerPlan`` does not fit the module or mesh it is applied to."""


@dataclass(frozen=True)
class EagerPlan:
    """Layouts an inferred plan gives a module's state and arguments (Note [plans in eager
    code]). ``predicted_bytes``: what the whole-graph plan moves per step."""

    mesh_shape: tuple[int, ...]
    parameters: dict[str, Pl]
    buffers: dict[str, Pl]
    inputs: tuple[Pl, ...]
    predicted_bytes: int

    def apply(self, module: nn.Module, mesh: DeviceMesh, *,
              src_data_rank: int | None = None) -> nn.Module:
        """Lay out ``module``'s parameters and buffers as planned on ``mesh`` and its plain
        tensor arguments at each call; returns ``module``, changed in place.
        ``src_data_rank``: None (every rank holds the full values and keeps its piece,
        nothing sent) or the rank whose values are scattered."""
        from dtensor.parallel import distribute_module
        from dtensor.parallel.styles import distribute_parameter

        if tuple(mesh.shape) != self.mesh_shape:
            raise EagerPlanError(f"EagerPlan made for mesh {self.mesh_shape}, applied on "
                                 f"mesh {tuple(mesh.shape)}")
        self._check_names(module)

        def partition(prefix: str, sub: nn.Module, mesh: DeviceMesh) -> None:
            for name in list(sub._parameters):
                full = f"{prefix}.{name}" if prefix else name
                if full in self.parameters:
                    distribute_parameter(sub, name, mesh, self.parameters[full], src_data_rank)
            for name, b in list(sub._buffers.items()):
                full = f"{prefix}.{name}" if prefix else name
                if b is not None and full in self.buffers:
                    sub._buffers[name] = distribute_tensor(b, mesh, self.buffers[full],
                                                           src_data_rank=src_data_rank)

        def inputs(_module: nn.Module, args: tuple, mesh: DeviceMesh) -> tuple:
            if len(args) != len(self.inputs):
                raise EagerPlanError(f"the module was called with {len(args)} arguments; the "
                                     f"plan was made for {len(self.inputs)}")
            return tuple(_placed(a, mesh, pl, src_data_rank) for a, pl in zip(args, self.inputs))

        return distribute_module(module, mesh, partition, inputs)

    def _check_names(self, module: nn.Module) -> None:
        have = {n for n, _ in module.named_parameters()} | {n for n, _ in module.named_buffers()}
        missing = sorted((set(self.parameters) | set(self.buffers)) - have)
        if missing:
            more = " ..." if len(missing) > 4 else ""
            raise EagerPlanError(f"the plan lays out {missing[:4]}{more}, which "
                                 f"{type(module).__name__} does not have: apply it to the "
                                 "module the graph was captured from")

    def __str__(self) -> str:
        lines = [f"EagerPlan on mesh {self.mesh_shape} (the whole-graph plan moves "
                 f"{self.predicted_bytes} bytes per step)"]
        lines += [f"  input{i}: {fmt_placements(p)}" for i, p in enumerate(self.inputs)]
        lines += [f"  {n}: {fmt_placements(p)}" for n, p in self.parameters.items()]
        lines += [f"  {n} (buffer): {fmt_placements(p)}" for n, p in self.buffers.items()]
        return "\n".join(lines)


def _placed(x: Any, mesh: DeviceMesh, pl: Sequence[Placement], src: int | None) -> Any:
    if isinstance(x, DTensor):
        return x if tuple(x.placements) == tuple(pl) else x.redistribute(mesh, pl)
    if isinstance(x, torch.Tensor):
        return distribute_tensor(x, mesh, pl, src_data_rank=src)
    return x


def eager_plan(plan: Any, module_inputs: int | None = None) -> EagerPlan:
    """The :class:`EagerPlan` of a ``ShardingPlan`` (``ShardingPlan.to_parallelize_plan``).
    ``module_inputs``: how many of the graph's ``input<i>`` values are the module's
    arguments (default: all of them; a training step's ``target<i>`` are the loss's)."""
    graph = plan.graph
    args = [n for n in graph.inputs if n.startswith("input") and n[5:].isdigit()]
    if module_inputs is not None:
        args = args[:module_inputs]
    params = graph.inputs[:graph.n_params]
    buffers = graph.inputs[graph.n_params:graph.n_params + graph.n_buffers]
    return EagerPlan(plan.mesh_shape, {n: plan.placements(n) for n in params},
                     {n: plan.placements(n) for n in buffers},
                     tuple(plan.placements(n) for n in args), plan.total_bytes)
