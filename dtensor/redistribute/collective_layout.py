"""What each collective step of a plan moves, per process group: pure and cached.

``redistribute``'s executors ask here, at every call, which shapes an all_gather joins, which
pieces a reduce_scatter cuts, which boxes an all_to_all sends to whom. The answers depend
only on (step, mesh shape, tensor shape, group), so each is computed once per group, from
``dtensor.layout``, and every later call (and every rank of the group) looks it up: a call
costs no loop over mesh coordinates, and its bookkeeping grows at most linearly with the
group's size (Note [one buffer per collective] in dtensor/comm/collectives.py says how the
data moves).

A group is named by its index in ``layout.mesh_groups(mesh_shape, mesh_dims)``; members are
in group-rank order.

>>> from dtensor.placements import Shard, Replicate
>>> from dtensor.redistribute.planner import Step
>>> step = Step("all_gather", (0,), (Shard(0),), (Replicate(),))
>>> gather_layout(step, (4,), (5, 3), 0)
(0, ((2, 3), (2, 3), (1, 3), (0, 3)))
"""

from __future__ import annotations

from dataclasses import dataclass
from dtensor.symbolic import shape_cache

from dtensor.layout import (Box, Coord, box_contains, box_intersect, box_numel, local_box,
                            local_shape, mesh_groups, pieces)
from dtensor.redistribute import regions
from dtensor.redistribute.reference import StepError
from dtensor.placements import Partial, Placement, Replicate, Shard
from dtensor.redistribute.planner import Step



@shape_cache(maxsize=256)
def groups(mesh_shape: tuple[int, ...],
           mesh_dims: tuple[int, ...]) -> tuple[tuple[Coord, ...], ...]:
    """``layout.mesh_groups`` as tuples, computed once per (mesh shape, mesh dims)."""
    return tuple(tuple(g) for g in mesh_groups(mesh_shape, mesh_dims))


@shape_cache(maxsize=256)
def _positions(mesh_shape: tuple[int, ...],
               mesh_dims: tuple[int, ...]) -> dict[Coord, tuple[int, int]]:
    return {c: (g, i) for g, members in enumerate(groups(mesh_shape, mesh_dims))
            for i, c in enumerate(members)}


def position(mesh_shape: tuple[int, ...], mesh_dims: tuple[int, ...],
             coord: Coord) -> tuple[int, int]:
    """(index of the group spanning ``mesh_dims`` that holds ``coord``, its group rank).

    >>> position((2, 3), (1,), (1, 2))
    (1, 2)
    """
    return _positions(mesh_shape, mesh_dims)[coord]


# ---------------------------------------------------------------------------------------------
# all_gather and reduce_scatter: pieces that join along one tensor dim


@shape_cache(maxsize=4096)
def gather_layout(step: Step, mesh_shape: tuple[int, ...], global_shape: tuple[int, ...],
                  group: int) -> tuple[int, tuple[tuple[int, ...], ...]]:
    """(tensor dim the pieces join along, each member's piece shape) for an all_gather step."""
    kinds = {step.src[m] for m in step.mesh_dims}
    (p,) = kinds if len(kinds) == 1 else (None,)
    if not isinstance(p, Shard) or any(not isinstance(step.dst[m], Replicate)
                                       for m in step.mesh_dims):
        raise StepError(f"{step}: all_gather needs one S(d) -> R on every mesh dim of the group")
    members = groups(mesh_shape, step.mesh_dims)[group]
    return p.dim, tuple(local_shape(global_shape, mesh_shape, step.src, c) for c in members)


@dataclass(frozen=True, slots=True)
class ScatterLayout:
    """How a reduce_scatter cuts the common old piece: along ``dim`` into consecutive
    ``sizes`` in group-rank order when the new pieces tile it so; else (``dim`` None) each
    member's new piece as an index into the old one."""

    dim: int | None
    sizes: tuple[int, ...]
    index: tuple[tuple[slice, ...], ...]


@shape_cache(maxsize=4096)
def scatter_layout(step: Step, mesh_shape: tuple[int, ...], global_shape: tuple[int, ...],
                   group: int) -> ScatterLayout:
    if any(not isinstance(step.dst[m], Shard) for m in step.mesh_dims):
        raise StepError(f"{step}: reduce_scatter turns P(op) into S(d) on every mesh dim")
    members = groups(mesh_shape, step.mesh_dims)[group]
    have = local_box(global_shape, mesh_shape, step.src, members[0])  # alike: dims are Partial
    targets = [local_box(global_shape, mesh_shape, step.dst, c) for c in members]
    for c, target in zip(members, targets):
        if not box_contains(have, target):
            raise StepError(f"{step}: rank {c} needs {target} but the group holds only {have}")
    dims = {step.dst[m].dim for m in step.mesh_dims}  # type: ignore[attr-defined]
    if len(dims) == 1:
        (dim,) = dims
        sizes = _tiling(have, targets, dim)
        if sizes is not None:
            return ScatterLayout(dim, sizes, ())
    return ScatterLayout(None, (), tuple(rel(t, have) for t in targets))


def _tiling(whole: Box, parts: list[Box] | list[Box | None],
            dim: int) -> tuple[int, ...] | None:
    """Sizes along ``dim`` when ``parts``, in order, cut ``whole`` along ``dim`` alone into
    consecutive slabs (empty parts are slabs of size 0); else None (a None part included)."""
    at, sizes = whole[dim][0], []
    for p in parts:
        if p is None:
            return None
        size = p[dim][1] - p[dim][0]
        if box_numel(p) == 0:
            sizes.append(0)
            continue
        if p[dim][0] != at or p[:dim] + p[dim + 1:] != whole[:dim] + whole[dim + 1:]:
            return None
        at += size
        sizes.append(size)
    return tuple(sizes) if at == whole[dim][1] else None


# ---------------------------------------------------------------------------------------------
# all_to_all: who sends which sub-blocks to whom


@dataclass(frozen=True, slots=True)
class Exchange:
    """One member's part in an all_to_all step, flat buffers both ways.

    Regular (``src_dim`` set): S(a) -> S(b) where this rank's piece cut along b gives, in
    group-rank order, what each member receives, and the pieces received, in order, tile the
    new piece along a. Each block travels laid out with dim a first, so the received buffer
    is the new piece with a moved first: a view away from the result when a is 0.
    Otherwise ``sends[j]`` / ``receives[j]`` are the boxes sent to / received from member j
    (each packed flat in order), ``own`` what this rank keeps of its old piece.
    """

    have: Box
    target: Box
    send_sizes: tuple[int, ...]  # elements to each member, in group-rank order
    recv_sizes: tuple[int, ...]
    src_dim: int | None = None  # a
    dst_dim: int | None = None  # b
    cut: tuple[int, ...] = ()  # sizes of this rank's piece along b, one per member
    sends: tuple[tuple[Box, ...], ...] = ()
    receives: tuple[tuple[Box, ...], ...] = ()
    own: tuple[Box, ...] = ()


@shape_cache(maxsize=4096)
def exchange(step: Step, mesh_shape: tuple[int, ...], global_shape: tuple[int, ...],
             group: int) -> tuple[Exchange, ...]:
    """Every member's ``Exchange`` for an all_to_all step: regular for all or for none, since
    both ends of a block must agree on its layout."""
    members = groups(mesh_shape, step.mesh_dims)[group]
    table = _a2a_table(step, mesh_shape, global_shape, members)
    n = len(members)
    haves = [local_box(global_shape, mesh_shape, step.src, c) for c in members]
    targets = [local_box(global_shape, mesh_shape, step.dst, c) for c in members]
    a, b = _shard_dim(step.src, step.mesh_dims), _shard_dim(step.dst, step.mesh_dims)
    if a is not None and b is not None and a != b:
        regular = []
        for i in range(n):
            cut = _tiling(haves[i], [_one(table[j][i], haves[i]) for j in range(n)], b)
            got = _tiling(targets[i], [_one(table[i][j], targets[i]) for j in range(n)], a)
            if cut is None or got is None:
                break
            numel = [sum(box_numel(x) for x in table[j][i]) for j in range(n)]
            regular.append(Exchange(haves[i], targets[i], tuple(numel),
                                    tuple(sum(box_numel(x) for x in table[i][j])
                                          for j in range(n)), a, b, cut))
        else:
            return tuple(regular)
    return tuple(
        Exchange(haves[i], targets[i],
                 tuple(0 if j == i else sum(box_numel(x) for x in table[j][i]) for j in range(n)),
                 tuple(0 if j == i else sum(box_numel(x) for x in table[i][j]) for j in range(n)),
                 sends=tuple(table[j][i] for j in range(n)), receives=table[i], own=table[i][i])
        for i in range(n))


def _shard_dim(placements: tuple[Placement, ...], mesh_dims: tuple[int, ...]) -> int | None:
    kinds = {placements[m] for m in mesh_dims}
    (p,) = kinds if len(kinds) == 1 else (None,)
    return p.dim if isinstance(p, Shard) else None


def _one(boxes: tuple[Box, ...], like: Box) -> Box | None:
    """The one box of ``boxes``, an empty box for none, None for several."""
    if len(boxes) > 1:
        return None
    return boxes[0] if boxes else tuple((lo, lo) for lo, _ in like)


def _a2a_table(step: Step, mesh_shape: tuple[int, ...], global_shape: tuple[int, ...],
               members: tuple[Coord, ...]) -> tuple[tuple[tuple[Box, ...], ...], ...]:
    """``table[i][j]``: the disjoint boxes of member i's new piece that member j provides.

    As in the reference, each element comes from the first holder in the order
    [i itself] + the others in group-rank order, so it crosses the wire at most once.
    """
    if any(isinstance(step.src[m], Partial) or isinstance(step.dst[m], Partial)
           for m in step.mesh_dims):
        raise StepError(f"{step}: all_to_all moves S/R pieces; the group has Partial mesh dims")
    table = []
    for i, c in enumerate(members):
        missing = [local_box(global_shape, mesh_shape, step.dst, c)]
        row: list[tuple[Box, ...]] = [()] * len(members)
        for j in [i] + [k for k in range(len(members)) if k != i]:
            have = local_box(global_shape, mesh_shape, step.src, members[j])
            row[j] = tuple(x for b in missing if box_numel(x := box_intersect(b, have)))
            missing = [rest for b in missing for rest in _subtract(b, have)]
        if missing:
            raise StepError(f"{step}: rank {c} needs {missing} but its group {list(members)} "
                            f"does not hold it: expected a group spanning every mesh dim that "
                            f"splits those elements")
        table.append(tuple(row))
    return tuple(table)


@dataclass(frozen=True, slots=True)
class PieceExchange:
    """One member's part in an all_to_all between block layouts that share no refined view
    (Note [moves between block layouts]): indexes (``regions.index``) into its old piece of
    what it sends each member, into its new piece of what it receives from each (with the
    shape each arrives in) and of what it keeps."""

    target: tuple[int, ...]  # the new piece's shape
    send_sizes: tuple[int, ...]
    recv_sizes: tuple[int, ...]
    sends: tuple[tuple[tuple, ...], ...]
    receives: tuple[tuple[tuple[tuple, tuple[int, ...]], ...], ...]
    own: tuple[tuple[tuple, tuple], ...]  # (index into the new piece, into the old)


# Note [moves between block layouts]
# Two layouts with block shards whose pieces no refined view makes boxes of both (a block of 4
# rows to a plain cut of 12 rows over 2 ranks: rank 0 holds rows 0-1, 4-5, 8-9 and needs 0-5)
# are one all_to_all: the pieces are products of interval sets (dtensor/redistribute/
# regions.py), each element comes from the first holder in [the rank itself] + the others in
# group-rank order, as for boxes, so each rank receives exactly what it lacks.
@shape_cache(maxsize=1024)
def piece_exchange(step: Step, mesh_shape: tuple[int, ...], global_shape: tuple[int, ...],
                   group: int) -> tuple[PieceExchange, ...]:
    """Every member's ``PieceExchange`` for an all_to_all step on block layouts."""
    members = groups(mesh_shape, step.mesh_dims)[group]
    if any(isinstance(step.src[m], Partial) or isinstance(step.dst[m], Partial)
           for m in step.mesh_dims):
        raise StepError(f"{step}: all_to_all moves S/R pieces; the group has Partial mesh dims")
    haves = [pieces(global_shape, mesh_shape, step.src, c) for c in members]
    targets = [pieces(global_shape, mesh_shape, step.dst, c) for c in members]
    n = len(members)
    table = []  # table[i][j]: the regions of member i's new piece that member j provides
    for i in range(n):
        missing = [targets[i]] if regions.numel(targets[i]) else []
        row: list[tuple] = [()] * n
        for j in [i] + [k for k in range(n) if k != i]:
            row[j] = tuple(x for b in missing if (x := regions.intersect(b, haves[j])))
            missing = [rest for b in missing for rest in regions.subtract(b, haves[j])]
        if missing:
            raise StepError(f"{step}: rank {members[i]} needs {missing} but its group "
                            f"{list(members)} does not hold it")
        table.append(row)

    def count(rs: tuple) -> int:
        return sum(regions.numel(r) for r in rs)

    return tuple(PieceExchange(
        regions.shape(targets[i]),
        tuple(0 if j == i else count(table[j][i]) for j in range(n)),
        tuple(0 if j == i else count(table[i][j]) for j in range(n)),
        tuple(tuple(regions.index(r, haves[i]) for r in table[j][i]) if j != i else ()
              for j in range(n)),
        tuple(tuple((regions.index(r, targets[i]), regions.shape(r)) for r in table[i][j])
              if j != i else () for j in range(n)),
        tuple((regions.index(r, targets[i]), regions.index(r, haves[i])) for r in table[i][i]))
        for i in range(n))


def _subtract(a: Box, b: Box) -> list[Box]:
    """``a`` minus ``b`` as disjoint non-empty boxes (slab by slab, one tensor dim at a time)."""
    cut = box_intersect(a, b)
    if box_numel(cut) == 0:
        return [a] if box_numel(a) else []
    out = []
    lead = list(a)
    for d, ((a0, a1), (c0, c1)) in enumerate(zip(a, cut)):
        for lo, hi in ((a0, c0), (c1, a1)):
            if hi > lo:
                out.append(tuple(lead[:d] + [(lo, hi)] + list(a[d + 1:])))
        lead[d] = (c0, c1)
    return out


def rel(box: Box, within: Box) -> tuple[slice, ...]:
    """Index of ``box`` inside a tensor that holds ``within``."""
    return tuple(slice(a - w0, b - w0) for (a, b), (w0, _) in zip(box, within))

