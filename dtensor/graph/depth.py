"""Plans for deep models from two shallow ones: capture and plan the model at ``k`` and ``k + 1``
layers, and give every layer of the full-depth model the decision of its probe layer.

Note [planning by depth]
Capture (``make_fx``) and search both grow with the graph, and a 32-layer step is ~7,000 aten
nodes. But the layers of a transformer are the same computation on the same shapes, and the
search gives identical layers the same layouts (its parameter groups move them together). So
``infer_by_depth`` captures the model
at ``k + 1`` layers (default 3: a first, a middle and a last layer) and plans it; then at ``k``
layers, its parameters fixed to the deeper probe's layouts (layer ``k - 1`` as the deeper
probe's last), so that the two differ by one middle layer planned alike rather than by two
searches' different local optima (the 12-layer "small" Llama: 266 MB extrapolated for 5
layers with free probes against 177 MB planned directly). The full-depth plan gives layer 0
the deeper probe's layer 0, the last layer its last, every other layer its middle layer 1.
The figures are extrapolated linearly, one middle layer at a time:

    bytes(N) = bytes(k + 1) + (N - k - 1) * (bytes(k + 1) - bytes(k))

and the same for FLOPs: exact when the middle layers are planned alike at every depth (the
tests compare with planning the full depth directly). ``consistent`` says whether the
shallow probe put the buffers and the arguments where the deep one did. Only the layouts of
parameters, buffers and arguments are built at full depth (an ``EagerPlan``): the full
graph is never captured, which is what makes this fast.

>>> import torch
>>> from dtensor import Shard
>>> from dtensor.graph import ShardSpec
>>> def build(n):
...     return torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(n)])
>>> plan = infer_by_depth(build, 6, lambda y: y.sum(), [torch.randn(4, 8)], [], (2,),
...                       {"input0": ShardSpec([Shard(0)])}, layer_pattern=r"^()(\\d+)(\\..*)$")
>>> len(plan.parameters), plan.consistent
(12, True)
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from dtensor.graph.annotate import ShardSpec
from dtensor.graph.capture import AdamW, capture_train_step
from dtensor.graph.compute import COMPUTE_WEIGHT
from dtensor.graph.eager import EagerPlan, eager_plan
from dtensor.graph.errors import GraphShardingError
from dtensor.graph.infer import solve
from dtensor.graph.memory import WEIGHTS, Memory
from dtensor.graph.problem import Pl, Problem
from dtensor.graph.show import ShardingPlan

LAYER_PATTERN = r"^(.*?\.)(\d+)(\..*)$"  # prefix, layer number, rest: layers.7.attention.wq


@dataclass
class DepthPlan:
    """A full-depth plan built from probes at ``k`` and ``k + 1`` layers (Note [planning by
    depth]); ``seconds``: capture and inference time of each probe."""

    n_layers: int
    probes: tuple[ShardingPlan, ShardingPlan]
    parameters: dict[str, Pl]
    buffers: dict[str, Pl]
    inputs: tuple[Pl, ...]
    total_bytes: int
    flops_per_rank: int
    whole_flops: int
    memory: Memory  # per rank at full depth, extrapolated like the bytes
    memory_weight: float  # the price of a byte held the search ended with
    consistent: bool
    seconds: dict[str, float]

    def to_parallelize_plan(self) -> EagerPlan:
        mesh_shape = self.probes[1].mesh_shape
        return EagerPlan(mesh_shape, dict(self.parameters), dict(self.buffers), self.inputs,
                         self.total_bytes)


def infer_by_depth(build: Callable[[int], torch.nn.Module], n_layers: int,
                   loss_fn: Callable[..., torch.Tensor], args: Sequence[torch.Tensor],
                   loss_args: Sequence[torch.Tensor], mesh_shape: Sequence[int],
                   annotations: dict[str, ShardSpec] | None = None, *, probe_layers: int = 2,
                   compute_weight: float = COMPUTE_WEIGHT, method: str = "heuristic",
                   memory_budget: int | None = None, optimizer_states: int | None = None,
                   optimizer: AdamW | None = None, layer_pattern: str = LAYER_PATTERN
                   ) -> DepthPlan:
    """Plan the training step of ``build(n_layers)`` from ``build(probe_layers)`` and
    ``build(probe_layers + 1)`` (Note [planning by depth]). ``build(n)`` returns the model
    with ``n`` layers (meta tensors are fine: only shapes are read); ``layer_pattern``
    matches a layer's parameter names as (prefix, layer number, rest). ``memory_budget``:
    bytes per rank at full depth (extrapolated like the bytes; Note [memory in the
    objective]); ``optimizer``: an ``AdamW`` captured in the step (its states then count as
    inputs: ``optimizer_states`` defaults to 0, else 2)."""
    k = probe_layers
    if k < 2 or n_layers < k + 1:
        raise GraphShardingError(f"infer_by_depth(n_layers={n_layers}, probe_layers={k}): "
                                 "expected probe_layers >= 2 (a first and a last layer) and "
                                 "n_layers > probe_layers")
    if memory_budget is not None and not memory_budget > 0:
        raise ValueError(f"memory_budget={memory_budget!r}: expected bytes per rank > 0")
    if optimizer_states is None:
        optimizer_states = 0 if optimizer is not None else 2
    seconds: dict[str, float] = {}
    graphs = {}
    for depth in (k + 1, k):
        start = time.perf_counter()
        graphs[depth] = capture_train_step(build(depth), loss_fn, args, loss_args,
                                           optimizer=optimizer)
        seconds[f"capture {depth}"] = time.perf_counter() - start
    start = time.perf_counter()
    problem = Problem(graphs[k + 1], mesh_shape, annotations, compute_weight=compute_weight)
    pattern = re.compile(layer_pattern)
    names, full = build_names(build, k), build_names(build, n_layers)
    extra = n_layers - k - 1

    def probe_name(name: str, depth: int) -> str:
        """The deep probe's name for layer ``i`` of a model of ``depth`` layers."""
        m = pattern.match(name)
        if m is None:
            return name
        i = int(m.group(2))
        j = 0 if i == 0 else k if i == depth - 1 else 1
        return f"{m.group(1)}{j}{m.group(3)}"

    least: Memory | None = None
    for weight in (0.0,) if memory_budget is None else WEIGHTS:
        problem.set_memory_weight(weight, optimizer_states)
        deep = ShardingPlan(problem, solve(problem, method=method))
        layouts = eager_plan(deep)
        # the shallow probe keeps the deep one's parameter layouts, so that the difference
        # of the two is one middle layer planned alike, not two searches' local optima
        fixed = {n: ShardSpec(layouts.parameters[probe_name(n, k)]) for n in names[0]}
        shallow_problem = Problem(graphs[k], mesh_shape, {**fixed, **(annotations or {})},
                                  compute_weight=compute_weight)
        shallow_problem.set_memory_weight(weight, optimizer_states)
        small = ShardingPlan(shallow_problem, solve(shallow_problem, method=method))
        held = Memory(*(b + extra * (b - a) for a, b in zip(
            _parts(small.memory), _parts(deep.memory))))
        least = held if least is None or held.total < least.total else least
        if memory_budget is None or held.total <= memory_budget:
            break
    else:
        raise GraphShardingError(
            f"no plan found within memory_budget={memory_budget:,} bytes per rank at "
            f"{n_layers} layers: the least found holds {least.total:,} ({least})")
    seconds["infer"] = time.perf_counter() - start
    shallow = eager_plan(small)
    # the shallow probe's own choices agree where they overlap
    consistent = shallow.buffers == {n: layouts.buffers[probe_name(n, k)] for n in names[1]} \
        and shallow.inputs == layouts.inputs
    return DepthPlan(
        n_layers, (small, deep), {n: layouts.parameters[probe_name(n, n_layers)] for n in full[0]},
        {n: layouts.buffers[probe_name(n, n_layers)] for n in full[1]}, layouts.inputs,
        deep.total_bytes + extra * (deep.total_bytes - small.total_bytes),
        deep.flops_per_rank + extra * (deep.flops_per_rank - small.flops_per_rank),
        deep.whole_flops + extra * (deep.whole_flops - small.whole_flops),
        held, weight, consistent, seconds)


def _parts(m: Memory) -> tuple[int, int, int]:
    return m.parameters, m.inputs, m.activations


def build_names(build: Callable[[int], torch.nn.Module], n_layers: int
                ) -> tuple[list[str], list[str]]:
    """Parameter and buffer names of ``build(n_layers)``, built on the meta device (no
    memory, no values)."""
    with torch.device("meta"):
        model = build(n_layers)
    return [n for n, _ in model.named_parameters()], [n for n, _ in model.named_buffers()]
