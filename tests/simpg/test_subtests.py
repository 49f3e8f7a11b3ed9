"""run_subtests: a parameter grid in one world, every failing combination reported."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import simpg


def test_all_combinations_run_in_one_world():
    seen = []

    def check(n, dtype):
        t = torch.ones(n, dtype=dtype)
        dist.all_reduce(t)
        assert t.sum().item() == 3 * n
        seen.append((dist.get_rank(), n, dtype))

    simpg.run(simpg.run_subtests, 3, {"n": [1, 4], "dtype": [torch.int32, torch.float32]}, check)
    assert len(seen) == 12


def test_every_failing_combination_is_reported_not_just_the_first():
    def check(n, rank_to_fail):
        if dist.get_rank() == rank_to_fail and n % 2:
            raise AssertionError(f"odd n={n}")  # the other ranks wait in all_reduce below
        dist.all_reduce(torch.ones(n))

    with pytest.raises(simpg.SubtestsFailed) as info:
        simpg.run(simpg.run_subtests, 3, {"n": [1, 2, 3, 4, 5], "rank_to_fail": [2]}, check)
    msg = str(info.value)
    assert "3 failing subtest(s) of 5 on 3 simulated ranks" in msg
    for n in (1, 3, 5):
        assert f"[n={n}, rank_to_fail=2] failed on rank 2 of 3" in msg and f"odd n={n}" in msg


def test_a_deadlocked_or_mismatched_combination_does_not_stop_the_others():
    done = []

    def check(case):
        if case == "deadlock":
            if dist.get_rank() == 0:
                dist.all_reduce(torch.ones(1))  # nobody else calls it
        elif case == "mismatch":
            dist.all_reduce(torch.ones(1 + dist.get_rank()))
        else:
            t = torch.ones(1)
            dist.all_reduce(t)
            done.append((case, t.item()))

    with pytest.raises(simpg.SubtestsFailed) as info:
        simpg.run(simpg.run_subtests, 2, {"case": ["ok", "deadlock", "mismatch", "after"]}, check)
    msg = str(info.value)
    assert ("[case='deadlock'] failed on every rank of 2 (no rank to blame):\n"
            "  CollectiveMismatchError: ranks disagree") in msg
    assert "[case='mismatch'] failed on every rank of 2 (no rank to blame):\n" in msg
    assert sorted(done) == [("after", 2.0), ("after", 2.0), ("ok", 2.0), ("ok", 2.0)]


def test_grid_is_validated():
    with pytest.raises(ValueError, match="grid\\['n'\\] must be a non-empty sequence"):
        simpg.run(simpg.run_subtests, 1, {"n": []}, lambda n: None)


def test_outside_a_rank_is_an_error():
    with pytest.raises(RuntimeError, match="inside a simpg rank"):
        simpg.run_subtests({"n": [1]}, lambda n: None)


@pytest.mark.world(4)
def test_run_subtests_inside_the_world_marker():
    def check(op):
        t = torch.tensor([dist.get_rank() + 1])
        dist.all_reduce(t, op=op)
        assert t.item() == {dist.ReduceOp.SUM: 10, dist.ReduceOp.MAX: 4}[op]

    simpg.run_subtests({"op": [dist.ReduceOp.SUM, dist.ReduceOp.MAX]}, check)


def test_combinations_that_fail_on_every_rank_outside_collectives():
    def check(n):
        raise ValueError(f"bad {n}")  # no collective: nobody waits on anybody

    with pytest.raises(simpg.SubtestsFailed) as info:
        simpg.run(simpg.run_subtests, 3, {"n": [1, 2]}, check, timeout=10)
    msg = str(info.value)
    # the same error on every rank: one entry per combination, with its ranks
    assert "[n=1] failed on ranks [0, 1, 2] of 3" in msg
    assert "[n=2] failed on ranks [0, 1, 2] of 3" in msg
    assert msg.count("ValueError: bad 1") == 1
