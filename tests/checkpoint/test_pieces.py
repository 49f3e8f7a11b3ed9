"""The pure planning of dtensor.checkpoint.pieces, without threads: the one writer of each
box (Note [one writer]) tiles every tensor exactly once on every mesh and placement list,
uneven and empty shards included, and chunks tile their box within the byte budget."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from dtensor import Partial, Replicate, Shard
from dtensor.checkpoint.pieces import chunk_boxes, first_replica
from dtensor.layout import box_numel, local_box, mesh_coordinates

MESHES = [(1,), (4,), (2, 3), (2, 2, 2)]
SHAPES = [(5, 3), (0, 4), (7,), (1, 9)]


def _cases():
    for mesh, shape in itertools.product(MESHES, SHAPES):
        options = [Replicate(), Partial()] + [Shard(d) for d in range(len(shape))]
        for placements in itertools.product(options, repeat=len(mesh)):
            yield mesh, shape, placements


@pytest.mark.parametrize("mesh,shape,placements", list(_cases()),
                         ids=lambda x: str(x).replace(" ", ""))
def test_first_replicas_write_every_element_exactly_once(mesh, shape, placements):
    # Partial is reduced to Replicate before writing (Note [saving Partial])
    sharding = {m for m, p in enumerate(placements) if isinstance(p, Shard)}
    count = torch.zeros(shape, dtype=torch.int32)
    writers = 0
    for coord in mesh_coordinates(mesh):
        if first_replica(coord, sharding):
            writers += 1
            box = local_box(shape, mesh, placements, coord)
            count[tuple(slice(a, b) for a, b in box)] += 1
    assert torch.all(count == 1), (mesh, shape, placements)
    assert writers == math.prod(mesh[m] for m in sharding)


@pytest.mark.parametrize("box,itemsize,budget", [
    (((0, 100), (3, 40)), 4, 1024), (((5, 6),), 8, 8), (((0, 1000),), 2, 100),
    (((0, 3), (0, 3), (0, 3)), 4, 16), ((), 4, 1),
])
def test_chunks_tile_their_box_within_the_budget(box, itemsize, budget):
    chunks = chunk_boxes(box, itemsize, budget)
    shape = tuple(b - a for a, b in box)
    count = torch.zeros(shape, dtype=torch.int32)
    for c in chunks:
        assert box_numel(c) * itemsize <= max(budget, itemsize)
        count[tuple(slice(a - o, b - o) for (a, b), (o, _) in zip(c, box))] += 1
    assert torch.all(count == 1)


def test_chunks_meeting_a_box_are_those_the_grid_scan_finds():
    """chunks_meeting works the chunks out per dimension; the naive reference lists the whole
    grid and keeps the chunks that intersect."""
    import random

    from dtensor.checkpoint.pieces import chunks_meeting, grid, grid_size, overlaps

    rng = random.Random(0)
    for _ in range(400):
        ndim = rng.randint(0, 3)
        box = tuple((a, a + rng.randint(1, 9)) for a in (rng.randint(0, 5) for _ in range(ndim)))
        chunk = tuple(rng.randint(1, 4) for _ in range(ndim))
        other = tuple((a, a + rng.randint(0, 9)) for a in (rng.randint(0, 12)
                                                            for _ in range(ndim)))
        cells = grid(box, chunk)
        want = [(i, c) for i, c in enumerate(cells) if overlaps(c, other)]
        assert chunks_meeting(box, chunk, other) == want, (box, chunk, other)
        assert grid_size(box, chunk) == len(cells)
