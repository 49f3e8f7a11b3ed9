"""Sharding propagation: the soundness harness, choice by cost, caching, pins, explain. (The
pointwise rule's own cases: test_pointwise.py.)"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.distributed as dist

import simpg
from tests.support.mesh_world import run_on_mesh as _world
from dtensor import (DTensor, Partial, Replicate, Shard, distribute_tensor, fallback_policy)
from dtensor.debug import ImplicitCommunicationError, explain, explain_ops, implicit_communication
from dtensor.dispatch import NoShardingRuleError, check_replicated
from dtensor.ops.propagate import ShardingError, decide
from dtensor.ops.registry import Registry, Strategy
from dtensor.ops.soundness import check_op

aten = torch.ops.aten


def test_harness_catches_an_unsound_rule():
    bad = Registry()
    # mul of two Partials is not linear: (a1 + a2)(b1 + b2) has cross terms
    bad.register([aten.mul.Tensor], lambda op: [Strategy((Partial(), Partial()), (Partial(),))])
    problems = check_op(aten.mul.Tensor, (torch.randn(4, 3), torch.randn(4, 3)), {}, (2,),
                        registry=bad)
    assert problems and "differs from the op's result" in problems[0].reason

    shifted = Registry()  # claims S(0) output from S(1) inputs: wrong layout
    shifted.register([aten.neg.default], lambda op: [Strategy((Shard(1),), (Shard(0),))])
    problems = check_op(aten.neg.default, (torch.randn(4, 6),), {}, (2,), registry=shifted)
    assert problems and "has shape" in problems[0].reason


def test_dispatch_keeps_shards_in_place_and_broadcasts_plain_tensors():
    x = torch.arange(24.0).reshape(6, 4)

    def body(mesh):
        a = distribute_tensor(x, mesh, [Shard(0), Shard(1)])
        with simpg.trace() as t:
            out = (a * 2 + torch.ones(4)).exp()
        assert out.placements == (Shard(0), Shard(1)) and not t.records
        assert torch.allclose(out.full_tensor(), (x * 2 + 1).exp())

    _world((2, 2), body)


def test_partial_stays_partial_through_linear_ops_only():
    def body(mesh):
        p = DTensor.from_local(torch.full((3, 2), float(dist.get_rank() + 1)), mesh, [Partial()])
        lin = (p + p) * 3 - p
        assert lin.placements == (Partial(),)
        with simpg.trace() as t:
            nonlin = p * p  # (a1 + a2)(b1 + b2) has cross terms: one factor is reduced first
        assert [r.op for r in t.records] == ["all_reduce"]
        return lin.full_tensor(), nonlin.full_tensor()

    lin, nonlin = _world((4,), body)[0]
    assert torch.equal(lin, torch.full((3, 2), 50.0))
    assert torch.equal(nonlin, torch.full((3, 2), 100.0))


def test_choice_by_cost_moves_the_smaller_operand():
    def body(mesh):
        big = distribute_tensor(torch.ones(64, 8), mesh, [Shard(0)])
        small = distribute_tensor(torch.ones(64, 1), mesh, [Replicate()])
        with simpg.trace() as t:
            out = big + small  # slicing the replicated operand is free; gathering big is not
        assert out.placements == (Shard(0),) and not t.records

    _world((4,), body)


def test_decisions_are_cached():
    def body(mesh):
        a = distribute_tensor(torch.ones(8, 2), mesh, [Shard(0)])
        a + a
        before = decide.cache_info()
        for _ in range(5):
            a + a
        after = decide.cache_info()
        return after.hits - before.hits, after.misses - before.misses

    hits, misses = _world((2,), body)[0]
    assert (hits, misses) == (0, 0)  # steady state: the mesh's plan cache answers, no rule work


def test_pinned_tensor_must_keep_its_placements():
    def body(mesh):
        a = distribute_tensor(torch.ones(4, 4), mesh, [Shard(0)]).pin()
        b = distribute_tensor(torch.ones(4, 4), mesh, [Shard(1)]).pin()
        with pytest.raises(ShardingError, match="no strategy keeps"):
            a + b
        c = distribute_tensor(torch.ones(4, 4), mesh, [Shard(1)])
        assert (a + c).placements == (Shard(0),)  # c moves, a stays

    _world((2,), body)


def test_implicit_communication_can_raise_or_warn():
    def body(mesh):
        a = distribute_tensor(torch.ones(4, 4), mesh, [Shard(0)])
        b = distribute_tensor(torch.ones(4, 4), mesh, [Shard(1)])
        with implicit_communication("error"):
            with pytest.raises(ImplicitCommunicationError, match="bytes"):
                a + b
        with implicit_communication("warn"):
            with pytest.warns(UserWarning, match="redistribute its inputs implicitly"):
                a + b

    _world((2,), body)


def test_explain_lists_chosen_strategy_and_moves():
    def body(mesh):
        a = distribute_tensor(torch.ones(4, 4), mesh, [Shard(0)])
        b = distribute_tensor(torch.ones(4, 4), mesh, [Shard(1)])
        with explain_ops() as log:
            a + b
        assert "aten.add.Tensor" in log[0].op and log[0].moves
        table = explain(lambda: a + b)
        return table

    table = _world((2,), body)[0]
    assert "aten.add.Tensor" in table and "move input" in table


@torch.library.custom_op("dtensor_tests::running_total", mutates_args=())
def running_total(x: torch.Tensor) -> torch.Tensor:
    """An op no rule will ever cover: it exercises the fallback."""
    return x.cumsum(0)


def test_fallback_policy_warns_once_or_raises():
    def body(mesh):
        a = distribute_tensor(torch.arange(6.0), mesh, [Shard(0)])
        with fallback_policy("error"):
            with pytest.raises(NoShardingRuleError, match="has no sharding rule"):
                running_total(a)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            running_total(a)
            running_total(a)
        warned = [str(w.message) for w in seen if "no sharding rule" in str(w.message)]
        with fallback_policy("silent"):
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                out = running_total(a)
        return out.full_tensor(), out.placements, warned

    results = _world((2,), body)
    full, placements, _ = results[0]
    assert torch.equal(full, torch.arange(6.0).cumsum(0)) and placements == (Replicate(),)
    warned = [w for _, _, ws in results for w in ws]  # once per op per process
    assert len(warned) == 1 and "running_total" in warned[0]


def test_check_replicated_catches_a_plain_tensor_that_differs():
    def body(mesh):
        a = distribute_tensor(torch.ones(4), mesh, [Shard(0)])
        with check_replicated():
            a + torch.ones(4)  # same everywhere: fine
            with pytest.raises(ValueError, match="differs across ranks"):
                a + torch.full((4,), float(dist.get_rank()))

    _world((2,), body)
