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

Note [block shards]
``Shard(d, block=b)`` is a strided shard: the extent its mesh dim splits (all of dim d, or
the piece an earlier mesh dim left, read as one run of elements) is read as runs of ``b``; the
split rule cuts each run alike, and a rank holds its part of every run, in order. Flattening
(batch, heads) with heads sharded gives it (``Shard(0, block=heads)``: every batch row is a
run), and unflattening takes it back to ``Shard(1)`` with no communication.
A rank's piece is then no box but a list of intervals per dim (``pieces``). Every block layout
this module accepts is a box layout of a *refined view*: each blocked dim of extent E read as
(E // b, b), the block shard a Shard of the inner dim, and the dim's other Shards (whose cuts
must fall between runs, ``check_layout`` says so) Shards of the outer (``refine``). A rank's
piece in that view is its piece reshaped, so boxes, the planner and the executor work there
unchanged: a move between layouts that share a refined view is planned in it (at its byte
lower bound), other moves go through the nearest layout that shares one with both ends.

>>> local_slices((5, 4), (4,), (Shard(0),), (2,))
(slice(4, 5, None), slice(0, 4, None))
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from dtensor.symbolic import shape_cache, smallest

from dtensor.placements import Placement, PlacementError, Replicate, Shard, fmt_placements

_REPLICATE = Replicate()

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
    start = smallest(index * step, size)
    return start, smallest(start + step, size)


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


@shape_cache(maxsize=65536)
def _local_box(
    global_shape: tuple[int, ...],
    mesh_shape: tuple[int, ...],
    placements: tuple[Placement, ...],
    coordinate: tuple[int, ...],
) -> Box:
    _check(global_shape, mesh_shape, placements, coordinate)
    for p in placements:
        if type(p) is Shard and p.block is not None:
            raise PlacementError(
                f"{p!r} holds a strided piece, not a box (Note [block shards] in "
                f"dtensor/layout.py): ask for its pieces, or work in the refined view")
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
    if any(type(p) is Shard and p.block is not None for p in pl):
        try:
            for coord in mesh_coordinates(mesh):
                _pieces(shape, mesh, pl, coord)  # names a run that does not fit
            if refine(shape, mesh, (pl,)) is None:
                raise PlacementError(
                    f"{fmt_placements(pl)} of {shape} on mesh {mesh}: another Shard of a "
                    f"blocked dim cuts inside a run, or two blocks differ on one dim (Note "
                    f"[block shards] in dtensor/layout.py): expected cuts between runs")
        except PlacementError as e:
            raise PlacementError(str(e)) from None
        return
    if not any(type(p) is Shard and p.sizes not in (None, "balanced") for p in pl):
        _check(shape, mesh, pl, (0,) * len(mesh))  # chunk and balanced cut any extent
        return
    try:
        for coord in mesh_coordinates(mesh):
            _local_box(shape, mesh, pl, coord)
    except PlacementError as e:
        raise PlacementError(str(e)) from None  # from here: the layout's own frames say nothing


@shape_cache(maxsize=65536)
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
    >>> local_shape((2 * 5, 3), (4,), (Shard(0, block=5),), (2,))  # 1 of each 5-run
    (2, 3)
    """
    return _local_shape(tuple(global_shape), tuple(mesh_shape), tuple(placements),
                        tuple(coordinate))


@shape_cache(maxsize=65536)
def _local_shape(global_shape: tuple[int, ...], mesh_shape: tuple[int, ...],
                 placements: tuple[Placement, ...], coordinate: tuple[int, ...]
                 ) -> tuple[int, ...]:
    if any(type(p) is Shard and p.block is not None for p in placements):
        return tuple(sum(b - a for a, b in dim)
                     for dim in _pieces(global_shape, mesh_shape, placements, coordinate))
    return box_shape(_local_box(global_shape, mesh_shape, placements, coordinate))


Intervals = tuple[tuple[int, int], ...]  # increasing, disjoint [start, stop) bounds


def pieces(global_shape: Sequence[int], mesh_shape: Sequence[int],
           placements: Sequence[Placement], coordinate: Sequence[int]
           ) -> tuple[Intervals, ...]:
    """Per tensor dim, the intervals of the global tensor held at mesh ``coordinate``, in the
    order the piece holds them (Note [block shards]): the definition of every layout.

    >>> pieces((8, 2), (2,), (Shard(0, block=4),), (1,))  # rows 2-3 of each run of 4
    (((2, 4), (6, 8)), ((0, 2),))
    """
    return _pieces(tuple(global_shape), tuple(mesh_shape), tuple(placements),
                   tuple(coordinate))


@shape_cache(maxsize=65536)
def _pieces(global_shape: tuple[int, ...], mesh_shape: tuple[int, ...],
            placements: tuple[Placement, ...], coordinate: tuple[int, ...]
            ) -> tuple[Intervals, ...]:
    _check(global_shape, mesh_shape, placements, coordinate)
    held: list[Intervals] = [((0, n),) for n in global_shape]
    for m, p in enumerate(placements):  # each Shard cuts what the earlier ones left
        if not isinstance(p, Shard):
            continue
        extent = sum(b - a for a, b in held[p.dim])
        run = extent if p.block is None else p.block
        try:
            if run and extent % run:
                raise PlacementError(f"its extent {extent} is not a whole number of runs of "
                                     f"{run}")
            lo, hi = split_bounds(run, mesh_shape[m], coordinate[m], p.sizes)
        except PlacementError as e:
            raise PlacementError(f"{p!r} on mesh dim {m} ({mesh_shape[m]} ranks) of a tensor "
                                 f"of shape {global_shape}: {e}") from None
        kept = [(k * run + lo, k * run + hi) for k in range(extent // run)] if hi > lo else []
        # (an empty extent: run is 0, and split_bounds has checked explicit sizes against it)
        held[p.dim] = _select(held[p.dim], kept)
    return tuple(held)


def _select(held: Intervals, positions: list[tuple[int, int]]) -> Intervals:
    """The parts of ``held`` at ``positions`` of its concatenation, merged where they touch."""
    out: list[list[int]] = []
    for lo, hi in positions:
        offset = 0
        for a, b in held:
            s, e = max(lo, offset), min(hi, offset + b - a)
            if s < e:
                start, stop = a + s - offset, a + e - offset
                if out and out[-1][1] == start:
                    out[-1][1] = stop
                else:
                    out.append([start, stop])
            offset += b - a
    return tuple((a, b) for a, b in out) if out else ((0, 0),)


@dataclass(frozen=True)
class Refinement:
    """A refined view (Note [block shards]): ``groups[d]`` the extents tensor dim d is read
    as (one, or (E // b, b) for a blocked dim), ``placements`` each list given to ``refine``
    as a box layout of ``shape``."""

    groups: tuple[tuple[int, ...], ...]
    placements: tuple[tuple[Placement, ...], ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(n for g in self.groups for n in g)

    def merged(self, refined_local: Sequence[int]) -> tuple[int, ...]:
        """A piece's shape in the tensor's own view, from its shape in this one."""
        out, i = [], 0
        for g in self.groups:
            out.append(math.prod(refined_local[i:i + len(g)]))
            i += len(g)
        return tuple(out)


def refine(global_shape: Sequence[int], mesh_shape: Sequence[int],
           lists: Sequence[Sequence[Placement]]) -> Refinement | None:
    """The refined view in which every placement list of ``lists`` is a box layout, or None
    if there is none (Note [block shards]).

    >>> r = refine((8, 2), (2,), [(Shard(0, block=4),), (Shard(0),)])
    >>> r.shape, r.placements
    ((2, 4, 2), ((Shard(dim=1),), (Shard(dim=0),)))
    """
    return _refine(tuple(global_shape), tuple(mesh_shape),
                   tuple(tuple(pl) for pl in lists))


@shape_cache(maxsize=4096)
def _refine(shape: tuple[int, ...], mesh_shape: tuple[int, ...],
            lists: tuple[tuple[Placement, ...], ...]) -> Refinement | None:
    blocks: dict[int, set[int]] = {}
    for pl in lists:
        for p in pl:
            if type(p) is Shard and p.block is not None and p.block < shape[p.dim]:
                blocks.setdefault(p.dim, set()).add(p.block)
    if any(len(b) > 1 for b in blocks.values()):
        return None
    run = {d: b.pop() for d, b in blocks.items()}
    if any(shape[d] % b for d, b in run.items()):
        return None
    groups = tuple((n // run[d], run[d]) if d in run else (n,) for d, n in enumerate(shape))
    first = [sum(len(g) for g in groups[:d]) for d in range(len(shape))]
    refined = []
    for pl in lists:
        options: list[list[Placement]] = []
        for m, p in enumerate(pl):
            if type(p) is not Shard:
                options.append([p])
            elif p.dim not in run:  # a block of the whole extent is one run: a plain cut
                options.append([Shard(first[p.dim], p.sizes)])
            elif p.block is not None and p.block < shape[p.dim]:
                options.append([Shard(first[p.dim] + 1, p.sizes)])
            else:  # a cut of whole runs: the outer dim's, under the rule that gives its pieces
                options.append(_outer_cuts(shape, mesh_shape, pl, m, run[p.dim],
                                           first[p.dim]))
        found = next((tuple(c) for c in itertools.product(*options)
                      if _same_pieces(shape, mesh_shape, pl, groups, tuple(c))), None)
        if found is None:
            return None
        refined.append(found)
    return Refinement(groups, tuple(refined))


def _outer_cuts(shape: tuple[int, ...], mesh_shape: tuple[int, ...],
                pl: tuple[Placement, ...], m: int, run: int, outer: int) -> list[Placement]:
    """Candidate Shards of the outer dim for mesh dim ``m``'s cut of whole runs: chunk's,
    balanced, and the explicit run counts its pieces hold."""
    p = pl[m]
    found: list[Placement] = [Shard(outer), Shard(outer, "balanced")]
    upto = tuple(q if i <= m else _REPLICATE for i, q in enumerate(pl))
    for coord in mesh_coordinates(mesh_shape):
        if coord[m]:
            continue
        try:
            lengths = [sum(b - a for a, b in _pieces(shape, mesh_shape, upto,
                                                     coord[:m] + (j,) + coord[m + 1:])[p.dim])
                       for j in range(mesh_shape[m])]
        except PlacementError:
            return []
        unit = _run_part(shape, mesh_shape, upto, m, coord, p.dim, run)
        if unit and all(n % unit == 0 for n in lengths):
            found.append(Shard(outer, tuple(n // unit for n in lengths)))
    return list(dict.fromkeys(found))


def _run_part(shape: tuple[int, ...], mesh_shape: tuple[int, ...], pl: tuple[Placement, ...],
              m: int, coord: tuple[int, ...], dim: int, run: int) -> int:
    """How many elements of each run mesh dim ``m``'s cut sees at ``coord``: the run, or the
    part an earlier block shard of the dim left."""
    part = run
    for i, q in enumerate(pl[:m]):
        if type(q) is Shard and q.dim == dim and q.block is not None:
            lo, hi = split_bounds(q.block, mesh_shape[i], coord[i], q.sizes)
            part = hi - lo
    return part


def _same_pieces(shape: tuple[int, ...], mesh_shape: tuple[int, ...],
                 pl: tuple[Placement, ...], groups: tuple[tuple[int, ...], ...],
                 refined: tuple[Placement, ...]) -> bool:
    """Whether ``refined``'s boxes of the refined view hold what ``pl`` does, rank by rank."""
    flat = tuple(n for g in groups for n in g)
    try:
        for coord in mesh_coordinates(mesh_shape):
            want = _pieces(shape, mesh_shape, pl, coord)
            box = _local_box(flat, mesh_shape, refined, coord)
            i = 0
            for d, g in enumerate(groups):
                if len(g) == 1:
                    got: Intervals = (box[i],)
                else:
                    (o0, o1), (i0, i1) = box[i], box[i + 1]
                    got = _select(((0, shape[d]),), [(k * g[1] + i0, k * g[1] + i1)
                                                     for k in range(o0, o1) if i1 > i0])
                i += len(g)
                if _nonempty(got) != _nonempty(want[d]):
                    return False
    except PlacementError:
        return False
    return True


def _nonempty(iv: Intervals) -> Intervals:
    return tuple(x for x in iv if x[1] > x[0])


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
    >>> print(layout_picture((12,), (2,), [Shard(0, block=4)]))
    0 0 1 1 0 0 1 1 0 0 1 1
    """
    shape = tuple(global_shape)
    if len(shape) not in (1, 2):
        raise ValueError(f"layout_picture draws 1-d and 2-d tensors, got shape {shape}")
    rows, cols = (1, shape[0]) if len(shape) == 1 else shape
    held: list[list[str]] = [[""] * cols for _ in range(rows)]
    for rank, coord in enumerate(mesh_coordinates(mesh_shape)):
        dims = pieces(shape, mesh_shape, placements, coord)
        row_ivs, col_ivs = (((0, 1),), dims[0]) if len(shape) == 1 else dims
        for r in (r for a, b in row_ivs for r in range(a, b)):
            for c in (c for a, b in col_ivs for c in range(a, b)):
                held[r][c] += str(rank) if rank < 10 else f"({rank})"
    width = max((len(h) for row in held for h in row), default=1) or 1
    return "\n".join(" ".join((h or ".").ljust(width) for h in row).rstrip() for row in held)
