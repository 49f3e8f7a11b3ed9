"""Whole-graph sharding: annotate a few values, infer the rest, run it as an SPMD program.

>>> import torch
>>> from dtensor import Shard, Replicate
>>> from dtensor.graph import ShardSpec, capture, infer
>>> model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
>>> g = capture(model, torch.randn(4, 8))
>>> plan = infer(g, (2,), {"input0": ShardSpec([Shard(0)])})
>>> plan.total_bytes, plan.placements("input0")
(0, (Shard(dim=0),))

Then, on every rank: ``dtensor.graph.run(plan, mesh, *full_inputs)``.
"""

from __future__ import annotations

from collections.abc import Sequence

from dtensor.graph.annotate import ShardSpec, shard_hint
from dtensor.graph.capture import AdamW, CapturedGraph, capture, capture_fn, capture_train_step
from dtensor.graph.compute import COMPUTE_WEIGHT
from dtensor.graph.depth import DepthPlan, infer_by_depth
from dtensor.graph.eager import EagerPlan, EagerPlanError, following
from dtensor.graph.errors import AnnotationError, CaptureError, GraphShardingError
from dtensor.graph.expand import ExpansionError, run
from dtensor.graph.follow import FollowReport, PlannedOp
from dtensor.graph.infer import Solution, solve, solve_within
from dtensor.graph.memory import Memory
from dtensor.graph.problem import Problem
from dtensor.graph.show import Reshard, ShardingPlan


def infer(graph: CapturedGraph, mesh_shape: Sequence[int],
          annotations: dict[str, ShardSpec] | None = None, *,
          method: str = "auto", compute_weight: float = COMPUTE_WEIGHT,
          memory_budget: int | None = None, optimizer_states: int | None = None
          ) -> ShardingPlan:
    """Placements for every value of ``graph`` on a mesh of ``mesh_shape``, given
    ``annotations`` (value name -> ShardSpec) and the ``shard_hint`` calls in the graph.
    ``method``: "auto", "exact", "heuristic" or "greedy" (Note [graph sharding search]).
    The plan minimises bytes moved plus ``compute_weight`` (bytes per FLOP) times the FLOPs
    every rank does (Note [compute in the objective]); 0 minimises bytes only.
    ``memory_budget``: bytes each rank may hold (parameters with their gradients and
    ``optimizer_states`` states each, by default 2 for an AdamW outside the graph, 0 when
    the graph holds the update and its states as inputs; inputs; activations), a
    constraint (Note [memory in the objective])."""
    if optimizer_states is None:
        optimizer_states = 0 if graph.optimizer_states else 2
    problem = Problem(graph, mesh_shape, annotations, compute_weight=compute_weight)
    problem.optimizer_states = optimizer_states
    if memory_budget is None:
        return ShardingPlan(problem, solve(problem, method=method))
    return ShardingPlan(problem, solve_within(problem, memory_budget, optimizer_states, method))


__all__ = [
    "COMPUTE_WEIGHT", "AdamW", "AnnotationError", "CaptureError", "CapturedGraph", "DepthPlan",
    "EagerPlan", "EagerPlanError", "ExpansionError", "FollowReport", "GraphShardingError",
    "Memory", "PlannedOp", "Problem", "Reshard", "ShardSpec", "ShardingPlan", "Solution",
    "capture", "capture_fn", "capture_train_step", "following", "infer", "infer_by_depth",
    "run", "shard_hint", "solve",
]
