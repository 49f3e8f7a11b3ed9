"""Which piece of a global tensor each rank holds: the single source of truth.

Shards follow ``torch.chunk``: a dim of size ``n`` split ``k`` ways has chunks of
``ceil(n / k)``; trailing chunks may be smaller or empty (5 over 4 ranks: 2, 2, 1, 0).

A tensor dim sharded over several mesh dims is split in mesh-dim order (nested): first into
``mesh_shape[m0]`` chunks by the first such mesh dim, then each chunk by the next, and so on.
Replicate and Partial mesh dims leave the extent whole.

A *box* is a tuple of half-open ``(start, stop)`` bounds, one per tensor dim.

>>> local_slices((5, 4), (4,), (Shard(0),), (2,))
(slice(4, 5, None), slice(0, 4, None))
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from functools import lru_cache

from dtensor.placements import Placement, PlacementError, Shard

Box = tuple[tuple[int, int], ...]  # per tensor dim, the [start, stop) a piece covers
Coord = tuple[int, ...]  # a rank's position on the mesh, one index per mesh dim


def chunk_bounds(size: int, parts: int, index: int) -> tuple[int, int]:
    """Bounds of chunk ``index`` when ``size`` is split ``parts`` ways like ``torch.chunk``.

    Chunks past the end (torch.chunk returns fewer of them) are empty at ``size``.

    >>> [chunk_bounds(5, 4, i) for i in range(4)]
    [(0, 2), (2, 4), (4, 5), (5, 5)]
    """
    if parts < 1 or not 0 <= index < parts:
        raise ValueError(f"chunk_bounds(size={size}, parts={parts}, index={index}): expected "
                         f"parts >= 1 and 0 <= index < parts")
    step = -(-size // parts)
    start = min(index * step, size)
    return start, min(start + step, size)


def local_box(
    global_shape: Sequence[int],
    mesh_shape: Sequence[int],
    placements: Sequence[Placement],
    coordinate: Sequence[int],
) -> Box:
    """The box of the global tensor held at mesh ``coordinate``.

    >>> local_box((8, 4), (2, 2), (Shard(0), Shard(0)), (1, 0))
    ((4, 6), (0, 4))
    """
    return _local_box(tuple(global_shape), tuple(mesh_shape), tuple(placements), tuple(coordinate))


@lru_cache(maxsize=65536)
def _local_box(
    global_shape: tuple[int, ...],
    mesh_shape: tuple[int, ...],
    placements: tuple[Placement, ...],
    coordinate: tuple[int, ...],
) -> Box:
    _check(global_shape, mesh_shape, placements, coordinate)
    bounds = [(0, n) for n in global_shape]
    # Mesh-dim order is the nesting order: each Shard narrows what the earlier ones left.
    for m, p in enumerate(placements):
        if isinstance(p, Shard):
            start, stop = bounds[p.dim]
            lo, hi = chunk_bounds(stop - start, mesh_shape[m], coordinate[m])
            bounds[p.dim] = (start + lo, start + hi)
    return tuple(bounds)


def local_slices(
    global_shape: Sequence[int],
    mesh_shape: Sequence[int],
    placements: Sequence[Placement],
    coordinate: Sequence[int],
) -> tuple[slice, ...]:
    """Slices of the global tensor held at mesh ``coordinate``: ``full[local_slices(...)]``.

    >>> local_slices((5,), (4,), (Shard(0),), (3,))
    (slice(5, 5, None),)
    """
    return tuple(slice(a, b) for a, b in local_box(global_shape, mesh_shape, placements,
                                                   coordinate))


def local_shape(
    global_shape: Sequence[int],
    mesh_shape: Sequence[int],
    placements: Sequence[Placement],
    coordinate: Sequence[int],
) -> tuple[int, ...]:
    """Shape of the local piece at mesh ``coordinate``.

    >>> local_shape((7, 5), (2, 2), (Shard(0), Shard(1)), (1, 1))
    (3, 2)
    """
    return box_shape(local_box(global_shape, mesh_shape, placements, coordinate))


def mesh_coordinates(mesh_shape: Sequence[int]) -> Iterator[tuple[int, ...]]:
    """All coordinates of the mesh in row-major (rank) order.

    >>> list(mesh_coordinates((2, 2)))
    [(0, 0), (0, 1), (1, 0), (1, 1)]
    """
    return itertools.product(*(range(n) for n in mesh_shape))


def box_shape(box: Box) -> tuple[int, ...]:
    """``((0, 2), (1, 4))`` -> ``(2, 3)``."""
    return tuple(b - a for a, b in box)


def box_numel(box: Box) -> int:
    """Number of elements in a box."""
    return math.prod(b - a for a, b in box)


def box_intersect(a: Box, b: Box) -> Box:
    """The common part of two boxes (empty bounds collapse to ``(lo, lo)``)."""
    out = []
    for (a0, a1), (b0, b1) in zip(a, b):
        lo = max(a0, b0)
        out.append((lo, max(lo, min(a1, b1))))
    return tuple(out)


def box_contains(outer: Box, inner: Box) -> bool:
    """True when every element of ``inner`` lies in ``outer`` (an empty box always does)."""
    if box_numel(inner) == 0:
        return True
    return all(o0 <= i0 and i1 <= o1 for (o0, o1), (i0, i1) in zip(outer, inner))


def _check(
    global_shape: tuple[int, ...],
    mesh_shape: tuple[int, ...],
    placements: tuple[Placement, ...],
    coordinate: tuple[int, ...],
) -> None:
    if len(placements) != len(mesh_shape):
        raise PlacementError(f"{len(placements)} placements for mesh shape {mesh_shape}: "
                             f"expected one per mesh dim")
    if len(coordinate) != len(mesh_shape) or any(
            not 0 <= c < n for c, n in zip(coordinate, mesh_shape)):
        raise ValueError(f"coordinate {coordinate} is not on mesh {mesh_shape}")
    for p in placements:
        if isinstance(p, Shard) and p.dim >= len(global_shape):
            raise PlacementError(f"Shard({p.dim}) is out of range for a {len(global_shape)}-d "
                                 f"tensor of shape {global_shape}: expected a dim in "
                                 f"[{-len(global_shape)}, {len(global_shape) - 1}]")


def mesh_groups(mesh_shape: Sequence[int],
                mesh_dims: Sequence[int]) -> list[list[tuple[int, ...]]]:
    """The process groups spanning ``mesh_dims``: one per setting of the other mesh dims.

    Members are listed in group-rank order: row-major over ``mesh_dims`` in mesh-dim order.

    >>> mesh_groups((2, 2), (0,))
    [[(0, 0), (1, 0)], [(0, 1), (1, 1)]]
    """
    dims = sorted(mesh_dims)
    others = [m for m in range(len(mesh_shape)) if m not in dims]
    groups = []
    for rest in itertools.product(*(range(mesh_shape[m]) for m in others)):
        members = []
        for inner in itertools.product(*(range(mesh_shape[m]) for m in dims)):
            coord = [0] * len(mesh_shape)
            for m, c in zip(others, rest):
                coord[m] = c
            for m, c in zip(dims, inner):
                coord[m] = c
            members.append(tuple(coord))
        groups.append(members)
    return groups
