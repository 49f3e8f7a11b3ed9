"""layout: torch.chunk semantics, nested sharding in mesh-dim order, exact coverage."""

from __future__ import annotations

import itertools

import pytest
import torch

from dtensor.layout import (box_contains, box_intersect, chunk_bounds, local_box, local_shape,
                            local_slices, mesh_coordinates, mesh_groups)
from dtensor.placements import Partial, Replicate, Shard, fmt_placements


@pytest.mark.parametrize("size", range(0, 11))
@pytest.mark.parametrize("parts", range(1, 6))
def test_chunk_bounds_agree_with_torch_chunk(size, parts):
    chunks = torch.arange(size).chunk(parts)
    for i in range(parts):
        start, stop = chunk_bounds(size, parts, i)
        # torch.chunk may return fewer chunks: ranks beyond hold empty pieces.
        want = chunks[i].tolist() if i < len(chunks) else []
        assert list(range(start, stop)) == want


def test_five_over_four_is_2_2_1_0():
    assert [local_shape((5,), (4,), (Shard(0),), (i,)) for i in range(4)] == [
        (2,), (2,), (1,), (0,)]


def test_chunk_bounds_rejects_bad_index():
    with pytest.raises(ValueError, match=r"expected parts >= 1 and 0 <= index < parts"):
        chunk_bounds(5, 4, 4)


@pytest.mark.parametrize("n", [0, 3, 7, 8, 13])
def test_nested_shard_splits_in_mesh_dim_order(n):
    full = torch.arange(n)
    for i, j in itertools.product(range(2), range(4)):
        outer = full.chunk(2)[i] if i < len(full.chunk(2)) else full[:0]
        inner = outer.chunk(4)
        want = inner[j] if j < len(inner) else outer[:0]
        idx = local_slices((n,), (2, 4), (Shard(0), Shard(0)), (i, j))
        assert full[idx].tolist() == want.tolist()


def test_replicate_and_partial_hold_the_full_extent():
    for p in (Replicate(), Partial(), Partial("max")):
        for c in mesh_coordinates((2, 3)):
            assert local_box((4, 5), (2, 3), (p, Shard(1)), c)[0] == (0, 4)


SHARDINGS = [((4,), (Shard(0),)), ((2, 2), (Shard(0), Shard(1))),
             ((2, 2), (Shard(1), Shard(0))), ((2, 4), (Shard(0), Shard(0))),
             ((4, 2), (Shard(1), Shard(1))), ((2, 2, 2), (Shard(1), Shard(0), Shard(1))),
             ((3, 2), (Shard(0), Shard(0)))]


@pytest.mark.parametrize("shape", [(8, 4), (7, 5), (3, 1), (1, 6), (0, 3)], ids=str)
@pytest.mark.parametrize("mesh, placements", SHARDINGS,
                         ids=[f"{fmt_placements(p)}@mesh{m}" for m, p in SHARDINGS])
def test_all_shard_covers_every_element_exactly_once(shape, mesh, placements):
    count = torch.zeros(shape, dtype=torch.int64)
    for c in mesh_coordinates(mesh):
        count[local_slices(shape, mesh, placements, c)] += 1
    assert bool((count == 1).all())


def test_layout_errors_name_the_problem():
    with pytest.raises(ValueError, match=r"coordinate \(2,\) is not on mesh \(2,\)"):
        local_box((4,), (2,), (Shard(0),), (2,))
    with pytest.raises(ValueError, match=r"Shard\(1\) is out of range for a 1-d tensor"):
        local_box((4,), (2,), (Shard(1),), (0,))


def test_mesh_groups_are_row_major_over_their_dims():
    assert mesh_groups((2, 3), (1,)) == [[(0, 0), (0, 1), (0, 2)], [(1, 0), (1, 1), (1, 2)]]
    assert mesh_groups((2, 2, 2), (0, 2))[1] == [(0, 1, 0), (0, 1, 1), (1, 1, 0), (1, 1, 1)]


def test_box_helpers():
    assert box_intersect(((0, 4), (2, 5)), ((3, 8), (6, 9))) == ((3, 4), (6, 6))
    assert box_contains(((0, 4),), ((1, 3),)) and not box_contains(((0, 4),), ((3, 5),))
    assert box_contains(((0, 1),), ((7, 7),))  # the empty box lies anywhere
