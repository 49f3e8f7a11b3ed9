"""Which piece of a global tensor each rank holds: the single source of truth.

Shards follow ``torch.chunk``: a dim of size ``n`` split ``k`` ways has chunks of
``ceil(n / k)``; trailing chunks may be smaller or empty (5 over 4 ranks: 2, 2, 1, 0).

A tensor dim sharded over several mesh dims is split in mesh-dim order (nested): first into
``mesh_shape[m0]`` chunks by the first such mesh dim, then each chunk by the next, and so on.
Replicate and Partial mesh dims leave the extent whole.

A *box* is a tuple of half-open ``(start, stop)`` bounds, one per tensor dim.

Note [split rules]
A Shard's split rule says where its cuts fall; chunk order (rank i holds the i-th piece) and
nesting are the same under every rule:
- ``torch.chunk`` (``Shard(d)``, the default): pieces of ``ceil(n / k)``, the last ones smaller
  or empty (5 over 4: 2, 2, 1, 0);
- balanced (``Shard(d, sizes="balanced")``): sizes differ by at most one, the larger first
  (5 over 4: 2, 1, 1, 1), as ``numpy.array_split``;
- explicit (``Shard(d, sizes=(3, 5, 0, 2))``): one size per rank of the mesh dim, summing to
  the extent the mesh dim splits (all of dim d, or the piece an earlier mesh dim left; nested
  explicit sizes must fit every such piece).
Every path that places, moves, checks or saves pieces asks this module for their boxes, so a
rule is carried wherever boxes are: the planner (its steps and bytes come from boxes),
redistribute, ``from_local``/``full_tensor``, checkpoints. Sharding rules see chunk placements
unless the op's family takes a split rule through (Note [split rules in propagation] in
dtensor/ops/propagate.py).

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


def split_bounds(size: int, parts: int, index: int, rule: tuple[int, ...] | str | None = None
                 ) -> tuple[int, int]:
    """Bounds of piece ``index`` of ``size`` split ``parts`` ways by ``rule`` (Note [split
    rules]): None for ``torch.chunk``'s, ``"balanced"``, or explicit sizes.

    >>> [split_bounds(5, 4, i, "balanced") for i in range(4)]
    [(0, 2), (2, 3), (3, 4), (4, 5)]
    >>> [split_bounds(10, 4, i, (3, 5, 0, 2)) for i in range(4)]
    [(0, 3), (3, 8), (8, 8), (8, 10)]
    """
    if rule is None:
        return chunk_bounds(size, parts, index)
    if parts < 1 or not 0 <= index < parts:
        raise ValueError(f"split_bounds(size={size}, parts={parts}, index={index}): expected "
                         f"parts >= 1 and 0 <= index < parts")
    if rule == "measured":
        raise PlacementError("Shard(d, sizes='measured') is resolved by DTensor.from_local "
                             "only (it measures every rank's piece); elsewhere give the sizes")
    if rule == "balanced":
        small, extra = divmod(size, parts)
        start = index * small + min(index, extra)
        return start, start + small + (index < extra)
    if len(rule) != parts or sum(rule) != size:
        raise PlacementError(
            f"expected {parts} sizes summing to {size}, the extent this mesh dim splits; got "
            f"{len(rule)} summing to {sum(rule)}")
    start = sum(rule[:index])
    return start, start + rule[index]


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
            try:
                lo, hi = split_bounds(stop - start, mesh_shape[m], coordinate[m], p.sizes)
            except PlacementError as e:  # name the placement, mesh dim and tensor
                raise PlacementError(f"{p!r} on mesh dim {m} ({mesh_shape[m]} ranks) of a "
                                     f"tensor of shape {global_shape}: {e}") from None
            bounds[p.dim] = (start + lo, start + hi)
    return tuple(bounds)


def check_layout(global_shape: Sequence[int], mesh_shape: Sequence[int],
                 placements: Sequence[Placement]) -> None:
    """Raise ``PlacementError`` unless ``placements`` lay the tensor out at every coordinate
    (an explicit split rule must cut the extent its mesh dim splits everywhere).

    >>> check_layout((10,), (4,), (Shard(0, sizes=(3, 5, 0, 2)),))
    """
    shape, mesh, pl = tuple(global_shape), tuple(mesh_shape), tuple(placements)
    if not any(type(p) is Shard and p.sizes not in (None, "balanced") for p in pl):
        _check(shape, mesh, pl, (0,) * len(mesh))  # chunk and balanced cut any extent
        return
    try:
        for coord in mesh_coordinates(mesh):
            _local_box(shape, mesh, pl, coord)
    except PlacementError as e:
        raise PlacementError(str(e)) from None  # from here: the layout's own frames say nothing


@lru_cache(maxsize=65536)
def _lays_out(global_shape: tuple[int, ...], mesh_shape: tuple[int, ...],
              placements: tuple[Placement, ...]) -> bool:
    try:
        check_layout(global_shape, mesh_shape, placements)
    except PlacementError:
        return False
    return True


def lays_out(global_shape: Sequence[int], mesh_shape: Sequence[int],
             placements: Sequence[Placement]) -> bool:
    """``check_layout`` as a yes or no, for searches that skip what does not fit.

    >>> lays_out((9,), (4,), (Shard(0, sizes=(3, 5, 0, 2)),))
    False
    """
    return _lays_out(tuple(global_shape), tuple(mesh_shape), tuple(placements))


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


def layout_picture(global_shape: Sequence[int], mesh_shape: Sequence[int],
                   placements: Sequence[Placement]) -> str:
    """Which ranks hold each element of a 1-d or 2-d tensor: one row of the tensor per line,
    each element as the ranks (row-major over the mesh) holding it, ``.`` for none. For the
    docs' pictures of each layout (docs/placements.md).

    >>> print(layout_picture((10,), (4,), [Shard(0, sizes=(3, 5, 0, 2))]))
    0 0 0 1 1 1 1 1 3 3
    >>> print(layout_picture((3, 4), (2, 2), [Shard(0), Shard(1, sizes="balanced")]))
    0 0 1 1
    0 0 1 1
    2 2 3 3
    """
    shape = tuple(global_shape)
    if len(shape) not in (1, 2):
        raise ValueError(f"layout_picture draws 1-d and 2-d tensors, got shape {shape}")
    rows, cols = (1, shape[0]) if len(shape) == 1 else shape
    held: list[list[str]] = [[""] * cols for _ in range(rows)]
    for rank, coord in enumerate(mesh_coordinates(mesh_shape)):
        box = local_box(shape, mesh_shape, placements, coord)
        (r0, r1), (c0, c1) = ((0, 1), box[0]) if len(shape) == 1 else box
        for r in range(r0, r1):
            for c in range(c0, c1):
                held[r][c] += str(rank) if rank < 10 else f"({rank})"
    width = max((len(h) for row in held for h in row), default=1) or 1
    return "\n".join(" ".join((h or ".").ljust(width) for h in row).rstrip() for row in held)
