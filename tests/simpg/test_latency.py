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


# -- all_gather into any layout of outputs --------------------------------------------------------

def _gather_layouts(n: int, sizes: list[int]) -> list[list[torch.Tensor]]:
    """One output list per rank, laid out in turn as each of these."""
    total = sum(sizes)
    layouts = [
        lambda: list(torch.empty(total).split(sizes)),  # adjacent pieces of one buffer
        lambda: [torch.empty(k) for k in sizes],  # separate tensors
        lambda: list(torch.empty(total + 3)[3:].split(sizes)),  # adjacent, at an offset
        lambda: list(reversed(torch.empty(total).split(sizes[::-1]))),  # one buffer, reversed
        lambda: [torch.empty(2 * k, 2)[::2, 0] for k in sizes],  # not contiguous
        lambda: list(torch.empty(total, 2).t()[0].split(sizes)),  # one buffer, strided
    ]
    return [layouts[rank % len(layouts)]() for rank in range(n)]


def test_gather_into_every_layout_equals_the_pure_function() -> None:
    from simpg import collectives as C
    from simpg import kernels as K

    for n, sizes in [(2, [3, 3]), (6, [4] * 6), (6, [1, 0, 5, 2, 2, 7]), (1, [4])]:
        ins = [torch.arange(k, dtype=torch.float32) + 100 * r for r, k in enumerate(sizes)]
        outs = _gather_layouts(n, sizes)
        K.gather_into(outs, ins)
        expected = C.all_gather(ins)
        for row, erow in zip(outs, expected):
            assert all(torch.equal(o, e) for o, e in zip(row, erow))


def _in_place_all_gather() -> list[float]:
    n, rank = dist.get_world_size(), dist.get_rank()
    buf = torch.zeros(2 * n)
    pieces = list(buf.chunk(n))
    pieces[rank].fill_(rank + 1)
    dist.all_gather(pieces, pieces[rank])  # the input is one of the outputs
    return buf.tolist()


def test_in_place_all_gather_into_chunks_of_one_buffer() -> None:
    expected = [float(r + 1) for r in range(4) for _ in range(2)]
    assert simpg.run(_in_place_all_gather, 4) == [expected] * 4


def test_gather_into_transposed_pieces_that_follow_each_other_are_not_one_buffer() -> None:
    from simpg import collectives as C
    from simpg import kernels as K

    # each piece spans exactly its own elements, right after the previous one, but in
    # column order: one flat copy would write it row by row
    ins = [torch.arange(6, dtype=torch.float32).view(2, 3) + 10 * r for r in range(3)]
    buf = torch.empty(18)
    outs = [[p.view(3, 2).t() for p in buf.split(6)] for _ in range(2)]
    K.gather_into(outs, ins)
    for row in outs:
        assert all(torch.equal(o, e) for o, e in zip(row, C.all_gather(ins)[0]))


# -- Note [lazy call sites] ----------------------------------------------------------------------

def test_a_lazy_site_names_the_line_the_frame_was_on() -> None:
    from simpg.rendezvous import Site

    frame = sys._getframe()
    site, line = Site(frame.f_code, frame.f_lasti), frame.f_lineno
    assert str(site) == f"{__file__}:{line}"
    assert str(Site(None, -1)) == "<unknown>"


# -- Note [cheap switch snapshots] ----------------------------------------------------------------

def test_an_unchanged_snapshot_is_the_last_one_and_a_change_is_seen() -> None:
    from simpg.isolation import snapshot

    last = snapshot()
    assert snapshot(last) is last
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64 if old is torch.float32 else torch.float32)
    try:
        changed = snapshot(last)
        assert changed is not last and changed["default dtype"] is torch.get_default_dtype()
        assert last["default dtype"] is old
    finally:
        torch.set_default_dtype(old)
