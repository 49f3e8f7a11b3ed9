"""dtensor.graph inference: exact against brute force, annotations kept, bytes from the
planner, the heuristic never worse than the greedy (eager-like) pass. No threads."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from dtensor import Replicate, Shard
from dtensor.graph import (Problem, ShardSpec, capture, capture_fn, capture_train_step, infer,
                           shard_hint, solve)
from dtensor.redistribute.planner import plan, plan_bytes

R = Replicate()


def _chain():
    return capture_fn(lambda x, w1, w2: torch.relu(x @ w1) @ w2, torch.randn(8, 4),
                      torch.randn(4, 16), torch.randn(16, 6), names=["x", "w1", "w2"])


def _brute_force(problem: Problem) -> float:
    sizes = [len(u.options) for u in problem.units]
    assert math.prod(sizes) < 300_000, sizes
    return min(problem.cost(c) for c in itertools.product(*(range(n) for n in sizes)))


@pytest.mark.parametrize("mesh, annotations", [
    ((2,), {"x": ShardSpec([Shard(0)])}),
    ((2,), {"x": ShardSpec([Shard(1)]), "w2": ShardSpec([Shard(1)])}),
    ((4,), {"x": ShardSpec([Shard(1)]), "mm_1": ShardSpec([R])}),
    ((2, 2), {"x": ShardSpec([Shard(0), Shard(1)]), "w1": ShardSpec([R, Shard(1)]),
              "w2": ShardSpec([Shard(1), R])}),
], ids=["dp", "contract", "out-whole", "2d"])
def test_exact_search_matches_brute_force(mesh, annotations):
    problem = Problem(_chain(), mesh, annotations)
    sol = solve(problem, method="exact")
    assert sol.exact
    assert sol.cost == pytest.approx(_brute_force(problem))
    assert problem.cost(sol.choice) == pytest.approx(sol.cost)


def test_plan_bytes_are_the_planners_and_reshards_sum_to_the_total():
    p = infer(_chain(), (2, 2), {"x": ShardSpec([Shard(1), Shard(0)]),
                                 "w2": ShardSpec([R, Shard(0)])})
    assert p.reshards, "this layout needs some communication"
    for r in p.reshards:
        shape = p.problem.values[p.problem.value_named(r.value)].shape
        steps = plan(r.src, r.dst, (2, 2), shape, 4)
        assert r.steps == steps
        assert r.bytes == plan_bytes(steps, (2, 2), shape, 4)
    assert p.total_bytes == sum(r.bytes for r in p.reshards)
    compute = p.problem.compute_weight * 4 * p.flops_per_rank
    assert p.total_bytes + compute == pytest.approx(p.solution.cost)


def test_immutable_annotations_are_kept_and_conflicts_become_reshards():
    # x rows-sharded, but the model insists the product be column-sharded: a reshard
    spec = ShardSpec([Shard(1)])
    g = capture_fn(lambda x, w: shard_hint(x @ w, spec) * 2, torch.randn(8, 8),
                   torch.randn(8, 8), names=["x", "w"])
    p = infer(g, (2,), {"x": ShardSpec([Shard(0)]), "w": ShardSpec([Shard(0)])})
    assert p.placements("x") == (Shard(0),)
    assert p.placements("w") == (Shard(0),)
    assert p.placements("shard_hint") == (Shard(1),)
    assert p.total_bytes > 0 and p.reshards
    assert "immutable" in p.explain("shard_hint")
    assert "annotated immutable" in p.explain("x")


def test_mutable_hint_is_kept_on_a_tie_and_overridden_when_cheaper():
    g = capture_fn(lambda x: (x * 2).sum(0), torch.randn(8, 8), names=["x"])
    tie = infer(g, (2,), {"x": ShardSpec([Shard(1)], mutable=True)})
    assert tie.placements("x") == (Shard(1),) and tie.total_bytes == 0
    # the sum's output must end whole: sharding the summed dim costs an all-reduce
    g2 = capture_fn(lambda x: shard_hint(x * 2, ShardSpec([Shard(0)], mutable=True)).sum(0),
                    torch.randn(8, 8), names=["x"])
    free = infer(g2, (2,), {"x": ShardSpec([Shard(1)])})
    assert free.placements("shard_hint") == (Shard(1),)
    assert free.total_bytes == 0
    kept = infer(g2, (2,), {"x": ShardSpec([Shard(0)])})
    assert kept.placements("shard_hint") == (Shard(0),)


def test_gradients_end_like_their_parameters():
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    g = capture_train_step(model, lambda y: y.pow(2).mean(), [torch.randn(8, 8)])
    p = infer(g, (2, 2), {"input0": ShardSpec([Shard(0), R]),
                          "0.weight": ShardSpec([R, Shard(0)])})
    ends = dict(zip(g.outputs, p.output_targets()))
    for name in ("0.weight", "0.bias", "2.weight", "2.bias"):
        assert ends[f"grad:{name}"] == p.placements(name)
    assert ends["loss"] == (R, R)
    assert p.placements("0.weight") == (R, Shard(0))


def test_heuristic_never_worse_than_greedy_and_beats_replicate_on_a_wide_mlp():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(),
                                torch.nn.Linear(256, 64))
    g = capture_train_step(model, lambda y: y.pow(2).mean(), [torch.randn(8, 64)])
    problem = Problem(g, (2, 4), {"input0": ShardSpec([Shard(0), R])})
    greedy = solve(problem, method="greedy")
    best = solve(problem, method="heuristic")
    assert best.cost <= greedy.cost
    replicated = Problem(g, (2, 4), {n: ShardSpec([R, R]) for n in
                                     ("0.weight", "0.bias", "2.weight", "2.bias")}
                         | {"input0": ShardSpec([Shard(0), R])})
    assert best.cost < solve(replicated, method="greedy").cost


def test_printout_lists_every_node_and_reshard():
    p = infer(_chain(), (2,), {"x": ShardSpec([Shard(1)]), "w2": ShardSpec([Shard(1)])})
    text = str(p)
    for node in p.graph.gm.graph.nodes:
        if node.op == "call_function":
            assert f"  {node.name} = " in text
    for r in p.reshards:
        assert str(r) in text
    assert f"{p.total_bytes} bytes" in text.splitlines()[0]


def test_explain_says_what_each_alternative_costs():
    p = infer(_chain(), (2,), {"x": ShardSpec([Shard(0)])})
    text = p.explain("w1")
    assert text.startswith("w1 is [R]")
    assert "instead [S(1)]" in text or "instead [S(0)]" in text


def test_forward_of_a_module_is_captured_with_parameter_names():
    g = capture(torch.nn.Linear(4, 3), torch.randn(2, 4))
    p = infer(g, (2,), {"input0": ShardSpec([Shard(0)])})
    assert p.placements("input0") == (Shard(0),)
    assert p.total_bytes == 0  # data parallel forward: nothing to move
