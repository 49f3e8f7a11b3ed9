"""No failure is lost: every rank's, in every combination, reported once (Note [no lost
failure], Note [one report for the whole world])."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import simpg


def _failures(world_size: int, grid: dict, check, **kwargs) -> simpg.SubtestsFailed:
    with pytest.raises(simpg.SubtestsFailed) as info:
        simpg.run(simpg.run_subtests, world_size, grid, check, **kwargs)
    return info.value


def test_combinations_failing_on_different_ranks_are_all_reported():
    def check(n):
        t = torch.ones(n)
        dist.all_reduce(t)
        assert not (n == 1 and dist.get_rank() == 1), "n=1 fails on rank 1"
        assert not (n == 2 and dist.get_rank() == 2), "n=2 fails on rank 2"

    error = _failures(4, {"n": [1, 2, 3]}, check)
    msg = str(error)
    assert "2 failing subtest(s) of 3 on 4 simulated ranks" in msg
    assert "[n=1] failed on rank 1 of 4" in msg and "n=1 fails on rank 1" in msg
    assert "[n=2] failed on rank 2 of 4" in msg and "n=2 fails on rank 2" in msg
    assert [(f.label, f.ranks) for f in error.failures] == [("n=1", (1,)), ("n=2", (2,))]


@pytest.mark.parametrize("seed", [None, 0, 1, 2])
def test_the_report_is_the_same_whichever_rank_raises_it(seed):
    reports = []

    def body():
        def check(n):
            if dist.get_rank() == n:
                raise ValueError(f"rank {n} fails")
            dist.barrier()

        try:
            simpg.run_subtests({"n": [0, 1, 2]}, check)
        except simpg.SubtestsFailed as e:
            reports.append(str(e))

    simpg.run(body, 3, schedule_seed=seed)
    assert len(reports) == 3 and len(set(reports)) == 1
    assert all(f"[n={n}] failed on rank {n} of 3" in reports[0] for n in range(3))


def test_one_combination_failing_on_several_ranks_is_listed_once_with_its_ranks():
    def check(n):
        rank = dist.get_rank()
        if n == 1 and rank in (1, 3):
            raise AssertionError("odd ranks disagree")
        if n == 1 and rank == 2:
            raise KeyError("rank 2 has its own problem")
        dist.barrier()

    error = _failures(4, {"n": [0, 1]}, check)
    assert [(f.ranks, f.error_type) for f in error.failures] == [
        ((1, 3), "AssertionError"), ((2,), "KeyError")]
    assert "[n=1] failed on ranks [1, 3] of 4" in str(error)
    assert str(error).count("AssertionError: odd ranks disagree") == 1


def test_a_mismatch_after_an_assertion_is_its_consequence_not_its_replacement():
    def check(n):
        rank = dist.get_rank()
        try:
            if n == 1 and rank == 1:
                raise AssertionError("rank 1 saw a wrong value")
        finally:
            # rank 1 reaches the gate early; rank 0's collective can never complete
            if rank == 0:
                dist.all_reduce(torch.ones(n))
            else:
                dist.barrier()

    error = _failures(2, {"n": [1]}, check)
    first, *rest = error.failures
    assert first.ranks == (1,) and first.error_type == "AssertionError"
    assert "rank 1 saw a wrong value" in str(error)
    assert all(f.consequence for f in rest)


def test_a_rank_failure_during_unwinding_is_not_hidden_by_the_mismatch_before_it():
    def body():
        rank = dist.get_rank()
        try:
            dist.all_reduce(torch.ones(5 if rank == 2 else 2))  # rank 2 mismatches
        finally:
            assert rank != 1, "rank 1's own check"

    with pytest.raises(AssertionError) as info:
        simpg.run(body, 3)
    notes = "\n".join(info.value.__notes__)
    assert "rank 1's own check" in str(info.value)
    assert "[simpg] raised on rank 1 of 3" in notes
    assert "before it, on every rank: CollectiveMismatchError" in notes


def test_an_assertion_unwinding_into_a_mismatch_is_reported_as_the_cause():
    def body():
        try:
            assert dist.get_rank() != 1, "rank 1's own check"
        finally:
            dist.all_reduce(torch.ones(1)) if dist.get_rank() == 0 else dist.barrier()

    with pytest.raises(AssertionError, match="rank 1's own check") as info:
        simpg.run(body, 2)
    notes = "\n".join(info.value.__notes__)
    assert "then, as a consequence, on every rank: CollectiveMismatchError" in notes


def test_a_rerun_command_runs_just_that_combination(monkeypatch):
    seen = []

    def check(n, flag):
        seen.append((n, flag))
        assert n != 2, "two"

    error = _failures(2, {"n": [1, 2, 3], "flag": [True]}, check)
    assert "rerun just this: " in str(error) and "--subtest 'n=2, flag=True'" in str(error)
    seen.clear()
    monkeypatch.setenv(simpg.subtests.SELECT_ENV, "n=2, flag=True")
    _failures(2, {"n": [1, 2, 3], "flag": [True]}, check)
    assert seen == [(2, True), (2, True)]


def test_a_stale_rerun_label_is_an_error_not_a_pass(monkeypatch):
    monkeypatch.setenv(simpg.subtests.SELECT_ENV, "n=9")
    with pytest.raises(ValueError, match="n=9.*matches no combination.*\n  n=1\n  n=2"):
        simpg.run(simpg.run_subtests, 2, {"n": [1, 2]}, lambda n: None)


@pytest.mark.world(3)
def test_marker_world_reports_every_combination():
    def check(n):
        if dist.get_rank() == n:
            raise ValueError(f"rank {n}")
        dist.barrier()

    with pytest.raises(simpg.SubtestsFailed) as info:
        simpg.run_subtests({"n": [1, 2]}, check)
    assert [f.ranks for f in info.value.failures] == [(1,), (2,)]
