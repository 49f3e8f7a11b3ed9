"""comm.all_gather_in_place: every rank's row filled from that rank; a buffer of the wrong
shape or layout is refused with what was expected."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import simpg
from dtensor import comm


@pytest.mark.parametrize("row_shape", [(), (3,), (2, 3)])
def test_every_row_comes_from_its_rank(row_shape):
    def body():
        rows = torch.full((3, *row_shape), -1.0)
        rows[dist.get_rank()] = float(dist.get_rank())
        return comm.all_gather_in_place(rows, dist.group.WORLD)

    for out in simpg.run(body, 3):
        want = torch.arange(3.0).reshape(3, *[1] * len(row_shape)).expand(3, *row_shape)
        torch.testing.assert_close(out, want)


@pytest.mark.parametrize("make", [lambda: torch.zeros(2, 4),  # 2 rows for 3 ranks
                                  lambda: torch.zeros(4, 3).t(),  # not contiguous
                                  lambda: torch.zeros(())])
def test_a_wrong_buffer_is_refused(make):
    def body():
        with pytest.raises(ValueError, match="expected a contiguous buffer with one row per "
                                             "rank of the group \\(3 rows\\)"):
            comm.all_gather_in_place(make(), dist.group.WORLD)

    simpg.run(body, 3)
