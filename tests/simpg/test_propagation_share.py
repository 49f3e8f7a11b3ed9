"""torch's DTensor on simpg makes each sharding decision once per world (Note [one propagation
for every rank] in simpg/propagation_share.py), and only where every rank would make the same
one: results equal one device's, counted propagations, and the cases a rank keeps its own."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.distributed.tensor._sharding_prop import ShardingPropagator
from torch.distributed.tensor.experimental import register_sharding

import simpg

WORLD = 4
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:torch")  # torch's cpu advice


@pytest.fixture
def computed(monkeypatch):
    """How many times each op's sharding was computed, per rank (torch's own method)."""
    counts: Counter = Counter()
    lock = threading.Lock()
    original = ShardingPropagator.propagate_op_sharding_non_cached

    def counting(self, op_schema):
        with lock:
            counts[(str(op_schema.op), dist.get_rank() if dist.is_initialized() else None)] += 1
        return original(self, op_schema)

    monkeypatch.setattr(ShardingPropagator, "propagate_op_sharding_non_cached", counting)
    simpg.run(lambda: None, 1)  # installs the share before the counted world (idempotent)
    return counts


def _ranks_that_computed(counts: Counter, op: str) -> list[int]:
    return sorted(rank for (name, rank), n in counts.items() if name == op and n)


def test_an_even_decision_is_made_by_one_rank_and_every_rank_gets_the_answer(computed):
    full = torch.arange(48.0).reshape(8, 6)

    def body():
        mesh = init_device_mesh("cpu", (WORLD,))
        x = distribute_tensor(full, mesh, [Shard(0)])
        y = torch.mm(x, distribute_tensor(full.T.contiguous(), mesh, [Replicate()]))
        return y.placements, y.full_tensor()

    for placements, value in simpg.run(body, WORLD, schedule_seed=3):
        assert placements == (Shard(0),)
        torch.testing.assert_close(value, full @ full.T)
    assert len(_ranks_that_computed(computed, "aten.mm.default")) == 1


def test_a_decision_read_from_uneven_local_shapes_is_each_ranks_own(computed):
    # 10 rows over 4 ranks: pieces of 3, 3, 3, 1; torch rewrites view's sizes to the piece's
    full = torch.arange(60.0).reshape(10, 6)

    def body():
        mesh = init_device_mesh("cpu", (WORLD,))
        x = distribute_tensor(full, mesh, [Shard(0)])
        y = x.view(10, 2, 3)
        return y.to_local().shape, y.full_tensor()

    out = simpg.run(body, WORLD)
    assert [shape for shape, _ in out] == [(3, 2, 3)] * 3 + [(1, 2, 3)]
    for _, value in out:
        torch.testing.assert_close(value, full.view(10, 2, 3))
    assert _ranks_that_computed(computed, "aten.view.default") == list(range(WORLD))


def test_an_even_view_is_shared(computed):
    full = torch.arange(48.0).reshape(8, 6)

    def body():
        mesh = init_device_mesh("cpu", (WORLD,))
        return distribute_tensor(full, mesh, [Shard(0)]).view(8, 2, 3).to_local().shape

    assert simpg.run(body, WORLD) == [(2, 2, 3)] * WORLD
    assert len(_ranks_that_computed(computed, "aten.view.default")) == 1


def test_a_row_sharded_embedding_keeps_each_ranks_mask_its_own(computed):
    # torch's _MaskPartial carries a buffer the rank fills while it looks its ids up
    weight = torch.randn(12, 5, generator=torch.Generator().manual_seed(0))
    ids = torch.tensor([[0, 11, 3], [7, 7, 4]])

    def body():
        mesh = init_device_mesh("cpu", (WORLD,))
        w = distribute_tensor(weight, mesh, [Shard(0)])
        i = distribute_tensor(ids, mesh, [Replicate()])
        return F.embedding(i, w).full_tensor()

    seeds = (None, 0, 1, 2)
    for seed in seeds:
        for value in simpg.run(body, WORLD, schedule_seed=seed):
            torch.testing.assert_close(value, F.embedding(ids, weight))
    # each world decides once, on whichever rank gets there first
    assert sum(n for (op, _), n in computed.items() if op == "aten.embedding.default") == len(seeds)


def test_ranks_with_registered_strategies_decide_for_themselves(computed):
    # register_sharding writes into the rank's own tables (Note [values and objects]): a rank
    # whose tables are not the world's may not take or give the world's answer
    full = torch.arange(32.0).reshape(8, 4)
    op = torch.ops.aten.cumsum.default

    def rows_or_replicated(x, dim, dtype=None):
        return [([Shard(0)], [Shard(0), None]), ([Replicate()], [Replicate(), None])]

    def body():
        mesh = init_device_mesh("cpu", (WORLD,))
        register_sharding(op)(rows_or_replicated)
        y = torch.cumsum(distribute_tensor(full, mesh, [Shard(0)]), 1)
        return y.placements, y.full_tensor()

    for placements, value in simpg.run(body, WORLD, schedule_seed=5):
        assert placements == (Shard(0),)
        torch.testing.assert_close(value, torch.cumsum(full, 1))
    assert _ranks_that_computed(computed, str(op)) == list(range(WORLD))


def test_outside_a_world_propagation_is_torchs(computed):
    simpg.run(lambda: None, 1)
    prop = DTensor._op_dispatcher.sharding_propagator
    assert getattr(prop.propagate_op_sharding_non_cached, "simpg_shared", False)
    assert prop.propagate_op_sharding.cache_info().maxsize is None  # torch's LocalLRUCache
