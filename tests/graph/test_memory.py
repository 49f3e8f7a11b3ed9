"""dtensor.graph memory (Note [memory in the objective]): what a rank holds under a plan, and
a per-rank memory budget as a constraint of the search."""

from __future__ import annotations

import pytest
import torch

from dtensor import Replicate, Shard
from dtensor.graph import GraphShardingError, ShardSpec, capture_train_step, infer
from examples.models import llama
from tests.support.graph_steps import run_moving_the_planned_bytes, tiny_llama

R = Replicate()
MESH = (2, 2)


@pytest.fixture(scope="module")
def step():
    model, tokens = tiny_llama(n_layers=2, batch=8)
    graph = capture_train_step(model, llama.loss_fn, [tokens], [tokens.roll(-1, 1)])
    flat = [t.detach() for t in list(model.parameters()) + list(model.buffers())]
    flat += [tokens, tokens.roll(-1, 1)]
    annotations = {"input0": ShardSpec([Shard(0), R])}
    return model, graph, flat, annotations, infer(graph, MESH, annotations)


def _largest_piece_bytes(t: torch.Tensor, placements) -> int:
    """The naive reference: cut the tensor with torch.chunk per mesh dim, keep the first."""
    for p, m in zip(placements, MESH):
        if isinstance(p, Shard):
            t = torch.chunk(t, m, dim=p.dim)[0]
    return t.numel() * t.element_size()


@pytest.mark.parametrize("optimizer_states", [0, 2])
def test_parameter_state_is_each_parameters_piece_with_gradient_and_states(step,
                                                                           optimizer_states):
    model, graph, _, annotations, _ = step
    plan = infer(graph, MESH, annotations, optimizer_states=optimizer_states)
    want = sum(_largest_piece_bytes(p, plan.placements(n)) for n, p in model.named_parameters())
    assert plan.memory.parameters == want * (2 + optimizer_states)
    assert plan.memory.activations > 0
    assert plan.memory.total == (plan.memory.parameters + plan.memory.inputs
                                 + plan.memory.activations)


def test_a_budget_below_the_free_plan_gives_a_plan_within_it(step):
    _, graph, _, annotations, free = step
    budget = int(free.memory.total * 0.7)
    plan = infer(graph, MESH, annotations, memory_budget=budget)
    assert plan.memory.total <= budget < free.memory.total
    assert plan.solution.memory_weight > 0


def test_an_impossible_budget_says_the_least_memory_found(step):
    _, graph, _, annotations, _ = step
    with pytest.raises(GraphShardingError, match="no plan found within memory_budget=1,000 "
                       "bytes per rank: the least found holds"):
        infer(graph, MESH, annotations, memory_budget=1000)
    with pytest.raises(ValueError, match="expected bytes per rank > 0"):
        infer(graph, MESH, annotations, memory_budget=0)


@pytest.mark.world(4, timeout=120)
def test_the_budgeted_plan_runs_and_equals_one_device(step):
    _, graph, flat, annotations, free = step
    plan = infer(graph, MESH, annotations, memory_budget=int(free.memory.total * 0.7))
    outs = run_moving_the_planned_bytes(plan, MESH, flat)
    for name, got, want in zip(graph.outputs, outs, graph(*flat)):
        torch.testing.assert_close(got.full_tensor(), want, msg=name, atol=1e-5, rtol=1e-4)
