"""``class_world = True``: the test methods of a class share one simulated world.

Note [a world kept between test methods] in simpg/class_world.py says how. What it saves, on
this 2-core host under load from other jobs (a class of 20 methods, each a Shard(0) ->
Replicate redistribute on 4 ranks, run through unittest; 15 interleaved rounds, fastest
round): 233 ms with a world per method, 161 ms with ``class_world = True``, 39 ms for the 20
bodies alone in one ``simpg.run``. The rest is per method: torch's TestCase (seeding, its
dynamo config patch), the hand-over to the parked ranks, simpg.testing's own per-method work.
"""

from __future__ import annotations

import threading
import time

import torch
import torch.distributed as dist

from simpg.class_world import ClassWorld, WorldEnded
from simpg.testing import DTensorTestBase, _kept_worlds
from simpg.world import rank_context
from tests.support.simpg_helpers import FAST_S, run_test_methods


class KeptUnderPytest(DTensorTestBase):
    """Collected by pytest, which calls tearDownClass after the last method: one world."""

    world_size = 2
    class_world = True
    worlds: list[object] = []

    def record(self) -> None:
        dist.barrier()
        if self.rank == 0:
            self.worlds.append(rank_context.get()[0])

    test_1 = test_2 = record

    def test_3_all_in_one_world(self):
        self.record()
        if self.rank == 0:
            self.assertEqual(len({id(w) for w in self.worlds}), 1)
            self.assertIn(len(self.worlds), (1, 3))  # 1: run alone (pytest -k)


def _worlds_seen(class_world: bool) -> list[object]:
    seen: list[object] = []  # the World objects (kept alive: ids are not reused)

    class Kept(DTensorTestBase):
        world_size = 2

        def record(self) -> None:
            dist.barrier()
            if self.rank == 0:
                seen.append(rank_context.get()[0])

        test_a = test_b = test_c = record

    Kept.class_world = class_world
    result = run_test_methods(Kept, "test_a", "test_b", "test_c")
    assert result.wasSuccessful(), result.errors + result.failures
    return seen


def test_the_methods_of_a_class_share_one_world_only_when_asked():
    kept = _worlds_seen(class_world=True)
    assert len(kept) == 3 and len(set(map(id, kept))) == 1
    fresh = _worlds_seen(class_world=False)
    assert len(fresh) == 3 and len(set(map(id, fresh))) == 3


def test_a_failing_method_ends_the_world_and_the_next_gets_a_new_one():
    worlds: list[object] = []  # the World objects (kept alive: ids are not reused)

    class FailsThenPasses(DTensorTestBase):
        world_size = 2
        class_world = True

        def test_1_fails(self):
            if self.rank == 0:
                worlds.append(rank_context.get()[0])
            t = torch.ones(2)
            dist.all_reduce(t)
            if self.rank == 1:
                self.assertEqual(t, torch.zeros(2))

        def test_2_deadlocks(self):
            if self.rank == 0:
                worlds.append(rank_context.get()[0])
            if self.rank == 0:
                dist.all_reduce(torch.ones(1))  # rank 1 never joins it

        def test_3_passes(self):
            if self.rank == 0:
                worlds.append(rank_context.get()[0])
            t = torch.ones(2)
            dist.all_reduce(t)
            self.assertEqual(t, torch.full((2,), 2.0))

        test_4_passes_too = test_3_passes

    start = time.monotonic()
    result = run_test_methods(FailsThenPasses, "test_1_fails", "test_2_deadlocks",
                              "test_3_passes", "test_4_passes_too")
    assert time.monotonic() - start < FAST_S
    assert [t.id().rsplit(".", 1)[1] for t, _ in result.failures] == ["test_1_fails"]
    assert "raised on rank 1 of 2" in result.failures[0][1]
    assert [t.id().rsplit(".", 1)[1] for t, _ in result.errors] == ["test_2_deadlocks"]
    assert "DeadlockError" in result.errors[0][1]
    assert result.testsRun == 4
    # one world per failing method, then one kept for the two that pass
    w1, w2, w3, w4 = worlds
    assert len({id(w1), id(w2), id(w3)}) == 3 and w3 is w4


def test_a_method_that_destroys_the_group_passes_and_the_next_gets_a_new_world():
    worlds: list[object] = []

    class Destroys(DTensorTestBase):
        world_size = 2
        class_world = True

        def test_1_destroys(self):
            worlds.append(rank_context.get()[0])
            dist.destroy_process_group()

        def test_2_runs(self):
            worlds.append(rank_context.get()[0])
            self.assertEqual(dist.get_world_size(), 2)

    result = run_test_methods(Destroys, "test_1_destroys", "test_2_runs")
    assert result.wasSuccessful(), result.errors + result.failures
    assert len({id(w) for w in worlds}) == 2


def test_each_method_starts_from_the_seed_on_every_rank():
    draws: dict[str, list[float]] = {}

    class Draws(DTensorTestBase):
        world_size = 2
        class_world = True

        def draw(self) -> None:
            value = torch.rand(1).item()
            dist.barrier()
            draws.setdefault(self._testMethodName, []).append(value)

        test_a = test_b = draw

    result = run_test_methods(Draws, "test_a", "test_b")
    assert result.wasSuccessful(), result.errors + result.failures
    assert len(draws["test_b"]) == 2
    assert len(set(draws["test_a"] + draws["test_b"])) == 1  # every rank, every method


def test_tear_down_class_ends_the_kept_world():
    class Short(DTensorTestBase):
        world_size = 2
        class_world = True

        def test_once(self):
            dist.barrier()

    before = {t for t in threading.enumerate() if t.name == "simpg-class-world"}
    result = run_test_methods(Short, "test_once")
    assert result.wasSuccessful(), result.errors + result.failures
    assert Short not in _kept_worlds
    after = {t for t in threading.enumerate() if t.name == "simpg-class-world"}
    assert after <= before


def test_a_kept_world_runs_functions_and_reports_its_end():
    kept = ClassWorld(3)
    try:
        assert kept.run_on_ranks(dist.get_rank) == [0, 1, 2]

        def fails() -> None:
            if dist.get_rank() == 2:
                raise ValueError("on purpose")
            dist.barrier()

        try:
            kept.run_on_ranks(fails)
        except ValueError as e:
            assert "[simpg] raised on rank 2 of 3" in e.__notes__
        else:
            raise AssertionError("the failure was not raised")
        try:
            kept.run_on_ranks(dist.get_rank)
        except WorldEnded:
            pass
        else:
            raise AssertionError("a failed world ran again")
    finally:
        kept.close()
