"""dtensor.graph's compute term (Note [compute in the objective]): FLOPs counted on each
option's local shapes, the objective bytes + weight * FLOPs over all ranks, exact search exact
for it, and a weight that makes inference shard work bytes alone would replicate. No threads."""

from __future__ import annotations

import itertools
import math
import random

import pytest
import torch

from dtensor import Partial, Replicate, Shard
from dtensor.graph import Problem, ShardSpec, capture_fn, infer, solve
from dtensor.graph.compute import local_shape

R = Replicate()


def _chain():
    return capture_fn(lambda x, w1, w2: torch.relu(x @ w1) @ w2, torch.randn(8, 4),
                      torch.randn(4, 16), torch.randn(16, 6), names=["x", "w1", "w2"])


def _mm_unit(problem: Problem):
    return next(u for u in problem.units if u.node.name == "mm")


def test_local_shape_is_the_largest_chunk():
    assert local_shape((7, 5), (Shard(0), Shard(1)), (2, 2)) == (4, 3)
    assert local_shape((7, 5), (Shard(0), Shard(0)), (2, 2)) == (2, 5)
    assert local_shape((7, 5), (Partial(), R), (2, 2)) == (7, 5)


def test_a_matmuls_flops_are_split_by_what_its_option_shards():
    p = Problem(_chain(), (2,), {"x": ShardSpec([R])})
    whole = 2 * 8 * 4 * 16
    assert p.whole_flops[_mm_unit(p).id] == whole
    by = {(o.inputs, o.outputs): o.flops for o in _mm_unit(p).options}
    assert by[(((R,), (R,)), ((R,),))] == whole
    assert by[(((Shard(0),), (R,)), ((Shard(0),),))] == whole // 2  # rows
    assert by[(((R,), (Shard(1),)), ((Shard(1),),))] == whole // 2  # columns
    assert by[(((Shard(1),), (Shard(0),)), ((Partial(),),))] == whole // 2  # contraction


def test_partial_times_replicate_does_the_whole_work_on_every_rank():
    g = capture_fn(lambda x, y: x * y, torch.randn(8, 4), torch.randn(8, 4), names=["x", "y"])
    p = Problem(g, (2,))
    mul = next(u for u in p.units if u.kind == "op")
    by = {(o.inputs, o.outputs): o.flops for o in mul.options}
    assert by[(((Partial(),), (R,)), ((Partial(),),))] == 32
    assert by[(((Shard(0),), (Shard(0),)), ((Shard(0),),))] == 16


@pytest.mark.parametrize("weight", [0.0, 1 / 64, 1.0])
def test_the_cost_is_bytes_plus_weighted_compute_over_all_ranks(weight):
    mesh = (2, 2)
    g = _chain()
    p = Problem(g, mesh, {"x": ShardSpec([Shard(0), R])}, compute_weight=weight)
    bytes_only = Problem(g, mesh, {"x": ShardSpec([Shard(0), R])}, compute_weight=0)
    rng = random.Random(0)
    for _ in range(50):
        c = [rng.randrange(len(u.options)) for u in p.units]
        want = bytes_only.cost(c) + weight * math.prod(mesh) * p.flops(c)
        assert p.cost(c) == pytest.approx(want)


@pytest.mark.parametrize("weight", [1 / 64, 1.0])
@pytest.mark.parametrize("mesh, annotations", [
    ((2,), {"x": ShardSpec([R])}),
    ((4,), {"x": ShardSpec([Shard(1)])}),
    ((2, 2), {"x": ShardSpec([Shard(0), R]), "w2": ShardSpec([R, Shard(1)])}),
], ids=["replicated-x", "contract", "2d"])
def test_exact_search_is_exact_for_the_combined_objective(mesh, annotations, weight):
    p = Problem(_chain(), mesh, annotations, compute_weight=weight)
    sizes = [len(u.options) for u in p.units]
    assert math.prod(sizes) < 300_000, sizes
    brute = min(p.cost(c) for c in itertools.product(*(range(n) for n in sizes)))
    sol = solve(p, method="exact")
    assert sol.exact
    assert sol.cost == pytest.approx(brute)


def test_compute_makes_inference_shard_what_bytes_alone_replicate():
    # whole x in, whole result out: computing everything on every rank moves no byte, which
    # bytes alone prefer; priced compute pays for sharding the work and gathering the result
    g = _chain()
    whole = {"x": ShardSpec([R]), "output0": ShardSpec([R])}
    lazy = infer(g, (2,), whole, compute_weight=0)
    assert lazy.total_bytes == 0 and lazy.flops_per_rank == lazy.whole_flops
    busy = infer(g, (2,), whole, compute_weight=1.0)
    assert busy.flops_per_rank < lazy.flops_per_rank
    assert busy.total_bytes > 0
    assert busy.solution.cost < lazy.total_bytes + 1.0 * 2 * lazy.flops_per_rank


def test_a_negative_weight_is_refused():
    with pytest.raises(ValueError, match="compute_weight"):
        Problem(_chain(), (2,), compute_weight=-1.0)


def test_the_calibrated_weight_is_the_link_over_the_measured_matmul_rate():
    from dtensor.graph.compute import calibrated_compute_weight, measure_matmul_flops

    rate = measure_matmul_flops(128, repeats=2)
    assert 1e6 < rate < 1e16  # FLOP/s of a real product, not seconds or FLOPs
    assert calibrated_compute_weight(25e9, flops_per_s=2.5e12) == pytest.approx(0.01)
    measured = calibrated_compute_weight(25e9, n=128, repeats=2)
    assert 25e9 / 1e16 < measured < 25e9 / 1e6
    with pytest.raises(ValueError, match="bandwidth in bytes per second"):
        calibrated_compute_weight(0.0, flops_per_s=1e12)
    with pytest.raises(ValueError, match="expected both >= 1"):
        measure_matmul_flops(0)
