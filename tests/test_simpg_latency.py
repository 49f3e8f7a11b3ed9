"""What simpg's hand-over path must keep while it is made cheaper: nothing it does between
two ranks may leave the interpreter in a state that slows or breaks other code."""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist

import simpg


def _profiled_all_reduces(profile_ranks: tuple[int, ...], calls: int) -> int:
    t = torch.zeros(4)
    on = dist.get_rank() in profile_ranks
    if on:
        sys.setprofile(lambda frame, event, arg: None)
    try:
        for _ in range(calls):
            dist.all_reduce(t)
    finally:
        if on:
            sys.setprofile(None)
    return dist.get_rank()


def test_a_profiled_rank_outlives_a_rank_that_finished_first() -> None:
    # Note [never clear an async exception]: a rank thread ending used to leave CPython 3.11's
    # "async exception pending" flag up, and a rank with a profiler then spun for ever at its
    # next function entry (reported as a timeout here, a hang in a profiling session)
    for profile_ranks in [(1,), (0, 1), (0,)]:
        for _ in range(2):  # the second world starts after the first one's threads ended
            assert simpg.run(_profiled_all_reduces, 2, profile_ranks, 50,
                             timeout=20) == [0, 1]
