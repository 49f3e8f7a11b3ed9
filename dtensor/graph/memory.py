"""Bytes a rank holds under a plan, and a memory budget as a constraint of the search.

Note [memory in the objective]
A training step's memory per rank is, for the most loaded rank (``torch.chunk``'s largest
piece, as in Note [compute in the objective]):

- parameter state: each parameter's local bytes times ``2 + optimizer_states`` (the value,
  its gradient, and the optimizer's states of the parameter's size: 2 for Adam and AdamW,
  0 for plain SGD; with AdamW captured in the step its states are inputs of their own
  layouts, counted here too, and ``optimizer_states`` defaults to 0);
- other inputs (buffers, the batch): their local bytes;
- activations: every value the forward makes that the backward reads (the forward is what
  the loss depends on), at its local size. They are all alive where the backward starts,
  which is the peak of a step without recomputation.

Each term belongs to one unit's option (a parameter's layout, the op making an activation),
so the memory of an assignment is a sum over units like its cost. ``infer(...,
memory_budget=B)`` searches with a price on held bytes (Lagrangian relaxation): every option
costs ``memory_weight * N * its bytes`` more, the weight raised (0, then 1/16, 1/4, 1, 4,
... 4096 bytes moved per byte held, each rank) until the plan fits ``B``; the first weight
that fits is kept. ``ShardingPlan.memory`` reports the breakdown. If no weight fits, the
error gives the least memory found.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torch import fx

from dtensor.graph.compute import local_shape

if TYPE_CHECKING:
    from dtensor.graph.problem import Problem

WEIGHTS = (0.0, 1 / 16, 1 / 4, 1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0)


@dataclass(frozen=True)
class Memory:
    """Bytes the most loaded rank holds in a step (Note [memory in the objective])."""

    parameters: int  # values, gradients and optimizer states
    inputs: int  # buffers and the batch
    activations: int

    @property
    def total(self) -> int:
        return self.parameters + self.inputs + self.activations


def unit_memory(problem: Problem, optimizer_states: int) -> list[list[tuple[int, int, int]]]:
    """Per unit, per option: (parameter state, other inputs, activations) bytes per rank."""
    graph = problem.graph
    params = set(graph.inputs[:graph.n_params])
    # an optimizer captured in the step: its states are inputs, counted with the parameters
    states = set(graph.inputs[len(graph.inputs) - graph.n_params * graph.optimizer_states:]
                 if graph.optimizer_states else ())
    saved = _saved(problem)
    m = problem.mesh_shape
    out = []
    for u in problem.units:
        per = []
        for o in u.options:
            if u.kind == "input":
                v = problem.values[u.outputs[0]]
                held = math.prod(local_shape(v.shape, o.outputs[0], m)) * v.itemsize
                name = graph.name_of(u.node)
                per.append((held * (2 + optimizer_states), 0, 0) if name in params else
                           (held, 0, 0) if name in states else (0, held, 0))
                continue
            acts = 0
            for vid, pl in zip(u.outputs, o.outputs):
                if vid >= 0 and vid in saved:
                    v = problem.values[vid]
                    acts += math.prod(local_shape(v.shape, pl, m)) * v.itemsize
            per.append((0, 0, acts))
        out.append(per)
    return out


def _saved(problem: Problem) -> set[int]:
    """Values made by the forward (what the loss depends on) and read by the backward; none
    for a graph that is not a training step."""
    if problem.graph.kind != "train_step":
        return set()
    out = next(n for n in problem.graph.gm.graph.nodes if n.op == "output")
    loss = out.args[0][0]
    forward: set[fx.Node] = set()
    stack = [loss]
    while stack:
        n = stack.pop()
        if n in forward or not isinstance(n, fx.Node):
            continue
        forward.add(n)
        stack.extend(n.all_input_nodes)
    saved = set()
    for u in problem.units:
        if u.kind == "input" or u.node not in forward:
            continue
        for vid in u.outputs:
            if vid < 0:
                continue
            for cu, k in u.consumers:
                if problem.units[cu].inputs[k] == vid and problem.units[cu].node not in forward:
                    saved.add(vid)
    return saved


