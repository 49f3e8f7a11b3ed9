"""Redistribute planning: which steps turn one placement list into another, and what they cost.

``plan`` is pure: it looks only at placements and shapes. It runs Dijkstra over placement
lists; each edge is one step (a collective or a local op) over a group of mesh dims, costed
by ``step_bytes``. The cheapest path wins: fewest bytes, then fewest collectives, then fewest
steps.

Note [Cost model]
Each step costs the bytes received, summed over all ranks, under ring algorithms. For a group
of n ranks, group rank i:
  all_gather     inputs in_j:                   received_i = sum_j in_j - in_i
  reduce_scatter input S, output pieces o_j:    received_i = S - o_i
  all_reduce     S bytes, numel split in n c_j: received_i = 2 * (S - c_i)
  all_to_all     received_i = what the others send to i (each needed element once)
  local steps    0
simpg's trace implements the same formulas independently; ``step_received`` gives the
per-rank figures to compare with it.

>>> from dtensor.placements import Shard, Replicate
>>> [s.kind for s in plan([Shard(0)], [Replicate()], (4,), (5, 3))]
['all_gather']
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from dtensor.symbolic import hints, shape_cache
from typing import Any

from dtensor.layout import (Coord,
    Box,
    box_contains,
    box_intersect,
    box_numel,
    local_box,
    mesh_coordinates,
    mesh_groups,
    check_layout,
    lays_out,
    pieces,
    refine,
)
from dtensor.redistribute import regions
from dtensor.placements import (
    Partial,
    Placement,
    Replicate,
    Shard,
    fmt_placements,
    has_block,
    normalize_placements,
)

COLLECTIVE_KINDS = ("all_gather", "all_to_all", "all_reduce", "reduce_scatter")
LOCAL_KINDS = ("local_slice", "local_partial", "local_scale")
STEP_KINDS = COLLECTIVE_KINDS + LOCAL_KINDS



@dataclass(frozen=True, slots=True)
class Step:
    """One step of a plan: ``kind`` run over the group spanning ``mesh_dims``.

    ``src`` / ``dst`` are the whole placement lists before and after; they differ only on
    ``mesh_dims`` (which may also hold unchanged Shard dims an all_to_all must span).

    kinds:
      all_gather      S(d) -> R on every mesh dim of the group; pieces cat in group-rank order
      all_to_all      S/R -> S/R; each rank receives the part of its new piece it lacks
      all_reduce      P(op) -> R
      reduce_scatter  P(op) -> S(d)
      local_slice     S/R -> S/R where each new piece lies inside the old one
      local_partial   R/S(d) -> P(op); the reduction's identity fills the rest
      local_scale     P(sum) <-> P(avg): multiply or divide by the group size

    ``view``, for a move of block shards, is the refined view the step's placements describe
    (``Refinement.groups``: the extents each tensor dim is read as; Note [block shards] in
    dtensor/layout.py); None for the tensor's own shape.
    """

    kind: str
    mesh_dims: tuple[int, ...]
    src: tuple[Placement, ...]
    dst: tuple[Placement, ...]
    view: tuple[tuple[int, ...], ...] | None = None

    def __post_init__(self) -> None:
        if self.kind not in STEP_KINDS:
            raise ValueError(f"Step kind {self.kind!r}: expected one of {', '.join(STEP_KINDS)}")
        if not self.mesh_dims or list(self.mesh_dims) != sorted(set(self.mesh_dims)):
            raise ValueError(f"Step mesh_dims {self.mesh_dims}: expected distinct mesh dims "
                             f"in increasing order")
        if len(self.src) != len(self.dst) or max(self.mesh_dims) >= len(self.src):
            raise ValueError(f"Step {self}: src, dst and mesh_dims must describe one mesh")
        for m in range(len(self.src)):
            if m not in self.mesh_dims and self.src[m] != self.dst[m]:
                raise ValueError(f"Step {self}: mesh dim {m} changes but is not in the group "
                                 f"{self.mesh_dims}")

    @property
    def is_collective(self) -> bool:
        return self.kind in COLLECTIVE_KINDS

    def __str__(self) -> str:
        dims = ",".join(map(str, self.mesh_dims))
        view = "" if self.view is None else f" in view {tuple(n for g in self.view for n in g)}"
        return (f"{self.kind}({dims}) {fmt_placements(self.src)}->{fmt_placements(self.dst)}"
                f"{view}")

    def shape(self, global_shape: tuple[int, ...]) -> tuple[int, ...]:
        """The global shape the step's placements describe."""
        return global_shape if self.view is None else tuple(n for g in self.view for n in g)


# ---------------------------------------------------------------------------------------------
# Cost model: Note [Cost model]


def step_received(step: Step, mesh_shape: Sequence[int], global_shape: Sequence[int],
                  itemsize: int = 4) -> dict[Coord, int]:
    """Bytes each rank receives in ``step``, by mesh coordinate (0 for local steps).

    >>> step = Step("all_gather", (0,), (Shard(0),), (Replicate(),))
    >>> step_received(step, (4,), (5,), itemsize=1)
    {(0,): 3, (1,): 3, (2,): 4, (3,): 5}
    """
    return dict(_step_received(step, tuple(mesh_shape), tuple(global_shape), itemsize))


@shape_cache(maxsize=65536)
def _step_received(step: Step, mesh_shape: tuple[int, ...], global_shape: tuple[int, ...],
                   itemsize: int) -> tuple[tuple[Coord, int], ...]:
    global_shape = step.shape(global_shape)
    if step.view is None and has_block(step.src + step.dst):
        return tuple(_piece_received(step, mesh_shape, global_shape, itemsize).items())

    def box_of(placements: tuple[Placement, ...], coord: Coord) -> Box:
        return local_box(global_shape, mesh_shape, placements, coord)

    out = {c: 0 for c in mesh_coordinates(mesh_shape)}
    for c, n in _received(step, mesh_shape, box_of):
        out[c] = n * itemsize
    return tuple(out.items())


def _piece_received(step: Step, mesh_shape: tuple[int, ...], global_shape: tuple[int, ...],
                    itemsize: int) -> dict[Coord, int]:
    """``_step_received`` for an all_to_all between block layouts (Note [moves between block
    layouts] in collective_layout.py): each rank receives what its new piece lacks of its old."""
    if step.kind != "all_to_all":
        raise ValueError(f"{step}: block layouts that share no refined view move by all_to_all")
    out = {}
    for c in mesh_coordinates(mesh_shape):
        new = pieces(global_shape, mesh_shape, step.dst, c)
        kept = regions.intersect(new, pieces(global_shape, mesh_shape, step.src, c))
        out[c] = (regions.numel(new) - (regions.numel(kept) if kept else 0)) * itemsize
    return out


def _received(step: Step, mesh_shape: tuple[int, ...], box_of: Callable[[tuple[Placement, ...],
              Coord], Box]) -> Iterator[tuple[Coord, int]]:
    """Elements each rank of a collective receives (Note [Cost model]), ``box_of(placements,
    coord)`` giving the pieces; ranks that receive nothing may be left out."""
    if not step.is_collective:
        return

    def numel(placements: tuple[Placement, ...], coord: Coord) -> int:
        return box_numel(box_of(placements, coord))

    for group in _groups(mesh_shape, step.mesh_dims):
        n = len(group)
        if step.kind == "all_gather":
            total = sum(numel(step.src, c) for c in group)
            for c in group:
                yield c, total - numel(step.src, c)
        elif step.kind == "all_to_all":
            for c in group:
                new, old = box_of(step.dst, c), box_of(step.src, c)
                yield c, box_numel(new) - box_numel(box_intersect(new, old))
        elif step.kind == "all_reduce":
            s = numel(step.src, group[0])
            for i, c in enumerate(group):
                part = s // n + (1 if i < s % n else 0)
                yield c, 2 * (s - part)
        else:  # reduce_scatter
            s = numel(step.src, group[0])
            for c in group:
                yield c, s - numel(step.dst, c)


@shape_cache(maxsize=1024)
def _groups(mesh_shape: tuple[int, ...], mesh_dims: tuple[int, ...]
            ) -> tuple[tuple[Coord, ...], ...]:
    return tuple(tuple(g) for g in mesh_groups(mesh_shape, mesh_dims))


def step_bytes(step: Step, mesh_shape: Sequence[int], global_shape: Sequence[int],
               itemsize: int = 4) -> int:
    """Total bytes received over all ranks in ``step`` (Note [Cost model]).

    >>> step = Step("all_gather", (0,), (Shard(0),), (Replicate(),))
    >>> step_bytes(step, (4,), (8,))  # each of 4 ranks receives 6 float32s
    96
    """
    return sum(v for _, v in _step_received(step, tuple(mesh_shape), tuple(global_shape),
                                            itemsize))


def plan_bytes(steps: Sequence[Step], mesh_shape: Sequence[int], global_shape: Sequence[int],
               itemsize: int = 4) -> int:
    """Total bytes received over all ranks and all steps of a plan.

    >>> steps = plan([Shard(0), Shard(1)], [Replicate(), Replicate()], (2, 2), (4, 4))
    >>> plan_bytes(steps, (2, 2), (4, 4))  # each of 4 ranks receives 12 float32s
    192
    """
    if type(steps) is tuple:  # what plan returns: price each plan once
        return _steps_bytes(steps, tuple(mesh_shape), tuple(global_shape), itemsize)
    return sum(step_bytes(s, mesh_shape, global_shape, itemsize) for s in steps)


@shape_cache(maxsize=65536)
def _steps_bytes(steps: tuple[Step, ...], mesh_shape: tuple[int, ...],
                 global_shape: tuple[int, ...], itemsize: int) -> int:
    return sum(step_bytes(s, mesh_shape, global_shape, itemsize) for s in steps)


# ---------------------------------------------------------------------------------------------
# Planning


def plan(src_placements: Sequence[Placement | int], dst_placements: Sequence[Placement | int],
         mesh_shape: Sequence[int], global_shape: Sequence[int],
         itemsize: int = 4) -> tuple[Step, ...]:
    """The cheapest steps from ``src_placements`` to ``dst_placements``.

    >>> from dtensor.placements import Shard, Replicate
    >>> [str(s) for s in plan([Shard(0), Shard(0)], [Replicate(), Replicate()], (2, 4), (7, 5))]
    ['all_gather(0,1) [S(0),S(0)]->[R,R]']
    """
    # symbolic sizes plan at their hints: the steps are right at every size, only their
    # bytes differ (Note [symbolic sizes] in dtensor.symbolic)
    key = (tuple(src_placements), tuple(dst_placements), tuple(mesh_shape),
           hints(global_shape), 1 if itemsize > 0 else itemsize)
    # ``itemsize`` scales every step's bytes alike: the plan is the same at every size > 0
    found = _PLANS.get(key)
    if found is not None:
        return found
    steps = _plan_normalized(*key)
    # only placement objects are keys: an int entry (or a bool, equal to one) is normalized
    # anew each time, so True never finds the plan of 1
    if all(isinstance(p, _PLACEMENT_TYPES) for p in key[0] + key[1]):
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        _PLANS[key] = steps
    return steps


_PLACEMENT_TYPES = (Shard, Replicate, Partial)
_PLANS: dict[tuple, tuple[Step, ...]] = {}  # plan's cache: one dict lookup on a hit
_MAX_PLANS = 65536


def _plan_normalized(src_placements: tuple, dst_placements: tuple, mesh_shape: tuple[int, ...],
                     global_shape: tuple[int, ...], itemsize: int) -> tuple[Step, ...]:
    ndim, mesh_ndim = len(global_shape), len(mesh_shape)
    src = normalize_placements(src_placements, ndim, mesh_ndim, shape=global_shape)
    dst = normalize_placements(dst_placements, ndim, mesh_ndim, shape=global_shape)
    if src == dst:
        return ()
    if has_block(src + dst):
        return _plan_blocks(src, dst, mesh_shape, global_shape, itemsize)
    rules = _split_rules(src + dst)
    for placements in (src, dst) if rules else ():
        check_layout(global_shape, mesh_shape, placements)  # sizes that do not cut: say so
    ops = tuple(sorted({p.reduce_op for p in src + dst if isinstance(p, Partial)}))
    if itemsize > 0 and _enumerates_all(ndim, len(ops) + len(rules), mesh_ndim):
        return _state_graph(mesh_shape, global_shape, ops, rules).search(src).path_to(dst)
    return _plan(src, dst, mesh_shape, global_shape, itemsize)


def _plan_blocks(src: tuple[Placement, ...], dst: tuple[Placement, ...],
                 mesh_shape: tuple[int, ...], global_shape: tuple[int, ...], itemsize: int
                 ) -> tuple[Step, ...]:
    """A move to or from block shards (Note [block shards] in dtensor/layout.py): planned in
    the refined view both ends share; else, between Shard/Replicate layouts, one all_to_all
    of the pieces as they are (Note [moves between block layouts] in collective_layout.py);
    else through the layout that keeps every mesh dim of either end not sharding a blocked dim
    (the rest Replicate), which shares a view with each."""
    for placements in (src, dst):
        check_layout(global_shape, mesh_shape, placements)
    both = refine(global_shape, mesh_shape, (src, dst))
    if both is not None:
        a, b = both.placements
        return tuple(dataclasses.replace(s, view=both.groups)
                     for s in plan(a, b, mesh_shape, both.shape, itemsize))
    dims = tuple(m for m in range(len(src)) if src[m] != dst[m])
    if not any(isinstance(p, Partial) for p in src + dst):
        # Note [moves between block layouts]: one all_to_all, each rank receiving what it lacks
        return (Step("all_to_all", _exchange_group(src, dst, dims), src, dst),)
    blocked = {p.dim for p in src + dst if type(p) is Shard and p.block is not None}
    mid = tuple(_REPLICATE if type(p) is Shard and p.dim in blocked else p for p in src)
    return (_plan_normalized(src, mid, mesh_shape, global_shape, itemsize)
            + _plan_normalized(mid, dst, mesh_shape, global_shape, itemsize))


_REPLICATE = Replicate()


def _split_rules(placements: tuple[Placement, ...]) -> tuple[Shard, ...]:
    """The Shards of ``placements`` with a split rule of their own (Note [split rules] in
    dtensor/layout.py): the planner's universe holds them besides chunk Shards."""
    return tuple(sorted({p for p in placements if type(p) is Shard and p.sizes is not None},
                        key=repr))


def distances(src_placements: Sequence[Placement | int], mesh_shape: Sequence[int],
              global_shape: Sequence[int], itemsize: int = 4,
              partial_ops: Sequence[str] = ()) -> dict[tuple[Placement, ...], int] | None:
    """Bytes of the planned move from ``src_placements`` to every placement list reachable
    over Shard, Replicate and the Partial kinds of ``src_placements`` and ``partial_ops``:
    ``plan_bytes(plan(src, dst, ...))`` for every ``dst`` at once, from one search (Note [one
    search per source]). None where the planner's edges depend on the target (Note
    [one search per source]): ask ``plan`` pair by pair there.

    >>> d = distances([Shard(0), Shard(0)], (2, 4), (8, 8))
    >>> d[(Replicate(), Replicate())]  # 7/8 of 256 B, 8 ranks
    1792
    """
    ndim, mesh_ndim = len(global_shape), len(mesh_shape)
    mesh_shape, global_shape = tuple(mesh_shape), tuple(global_shape)
    src = normalize_placements(src_placements, ndim, mesh_ndim, shape=global_shape)
    ops = tuple(sorted({p.reduce_op for p in src if isinstance(p, Partial)} | set(partial_ops)))
    rules = _split_rules(src)
    if itemsize <= 0 or not _enumerates_all(ndim, len(ops) + len(rules), mesh_ndim):
        return None
    costs = _state_graph(mesh_shape, global_shape, ops, rules).search(src).costs()
    return {state: (cost >> (2 * _LOW)) * itemsize for state, cost in costs.items()}


def _universe(ndim: int, ops: Sequence[str], rules: Sequence[Shard] = ()) -> list[Placement]:
    return ([Shard(d) for d in range(ndim)] + [Replicate()] + [Partial(op) for op in ops]
            + list(rules))


def _enumerates_all(ndim: int, n_extra: int, mesh_ndim: int) -> bool:
    """Whether ``_edges`` tries every target list for every group of mesh dims: then the edges
    out of a state do not depend on the plan's target (Note [one search per source]).
    ``n_extra``: the Partial kinds and split-rule Shards in the universe besides S(d) and R."""
    return all((ndim + 1 + n_extra) ** k <= _FULL_ENUMERATION for k in range(1, mesh_ndim + 1))


# Note [one search per source]
# Where _edges enumerates every target list (_enumerates_all: 1-d and 2-d meshes for all but
# very high-rank tensors), the planner's graph depends only on (mesh, shape, the Partial kinds
# of the universe), not on the pair asked for (nor on the itemsize, which scales every step's
# bytes alike and so leaves their order as it is): so one Dijkstra per source,
# kept and resumed, answers every target. A target already settled is a dict hit; a new one
# pops more of the same heap. The heap sees the same pushes in the same order as a fresh
# search for that one pair would (edges in _edges' order, ties broken by push order, a state
# expanded once when first popped), and a fresh search stops at the first pop of its target,
# which is the resumed search's first pop of it too: the plans are the pair search's, step
# for step (tests/redistribute/test_planner.py checks both against each other and against brute
# force).


@shape_cache(maxsize=256)  # a few hundred kB at most each; a sweep's op reuses its own
def _state_graph(mesh_shape: tuple[int, ...], global_shape: tuple[int, ...],
                 ops: tuple[str, ...], rules: tuple[Shard, ...] = ()) -> _StateGraph:
    return _StateGraph(mesh_shape, global_shape, ops, rules)


class _StateGraph:
    """The planner's states of one (mesh, shape, Partial kinds) and the edges out of each,
    found when first needed, priced in elements; one resumable search per source state.

    Every step's bytes are its elements times the itemsize, so costs compare alike at every
    itemsize and one graph serves them all. Each state's pieces are computed once, for
    ``classify``'s and the cost model's box tests alike.
    """

    def __init__(self, mesh_shape: tuple[int, ...], global_shape: tuple[int, ...],
                 ops: tuple[str, ...], rules: tuple[Shard, ...] = ()) -> None:
        self.mesh_shape, self.global_shape = mesh_shape, global_shape
        self.universe = _universe(len(global_shape), ops, rules)
        self.rules = rules
        self.coords = tuple(mesh_coordinates(mesh_shape))
        self._coord_index = {c: k for k, c in enumerate(self.coords)}
        self._boxes: dict[tuple[Placement, ...], tuple[Box, ...]] = {}
        self.index: dict[tuple[Placement, ...], int] = {}
        self.states: list[tuple[Placement, ...]] = []
        self._edges: dict[int, tuple[list[tuple[int, int, Step]], Iterator[Step]]] = {}
        self._searches: dict[int, _Search] = {}
        self._lock = threading.Lock()

    def id_of(self, state: tuple[Placement, ...]) -> int:
        i = self.index.get(state)
        if i is None:
            i = self.index[state] = len(self.states)
            self.states.append(state)
        return i

    def boxes(self, state: tuple[Placement, ...]) -> tuple[Box, ...]:
        """The piece at each coordinate, in ``mesh_coordinates`` order."""
        out = self._boxes.get(state)
        if out is None:
            out = self._boxes[state] = tuple(local_box(self.global_shape, self.mesh_shape,
                                                       state, c) for c in self.coords)
        return out

    def box_of(self, state: tuple[Placement, ...], coord: Coord) -> Box:
        return self.boxes(state)[self._coord_index[coord]]

    def edge(self, i: int, k: int) -> tuple[int, int, Step] | None:
        """The ``k``-th edge out of state ``i`` in ``_edges``' order, None past the last:
        (target id, cost increment, step), the increment packing (elements, collectives,
        steps) into one int (``_pack``). Edges are classified as far as asked, no further."""
        out = self._edges.get(i)
        if out is None:
            out = self._edges[i] = ([], self._edge_iter(i))
        found, more = out
        while len(found) <= k:
            step = next(more, None)
            if step is None:
                return None
            elements = sum(n for _, n in _received(step, self.mesh_shape, self.box_of))
            found.append((self.id_of(step.dst), _pack(elements, step.is_collective, 1), step))
        return found[k]

    def _edge_iter(self, i: int) -> Iterator[Step]:
        state = self.states[i]
        mine = self.boxes(state)

        def step_to(new: tuple[Placement, ...]) -> Step | None:
            if self.rules and not lays_out(self.global_shape, self.mesh_shape, new):
                return None  # a split rule on a mesh dim or extent it does not cut
            return _classify(state, new, lambda: zip(mine, self.boxes(new)))

        return _edges(state, state, self.universe, self.mesh_shape, self.global_shape, step_to)

    def search(self, src: tuple[Placement, ...]) -> _Search:
        with self._lock:
            i = self.id_of(src)
            s = self._searches.get(i)
            if s is None:
                s = self._searches[i] = _Search(self, i)
            return s


# Costs (bytes, collectives, steps) compare as one int: bytes in the high bits, then 16 bits
# each for collectives and steps (a plan has at most as many steps as there are states).
_LOW = 16


def _pack(nbytes: int, collectives: int, steps: int) -> int:
    return (nbytes << (2 * _LOW)) | (collectives << _LOW) | steps


_CURSOR = -2  # a heap entry's "from" for a state's cursor over its edges (Note [lazy edges])
_BLOCK = 32  # tie numbers per settled state: one per edge, fewer than 2 ** 32


class _Search:
    """Dijkstra from one state, stopped at the last target asked for and resumed for the next
    (Note [one search per source]).

    Note [lazy edges]
    A settled state does not classify its edges at once: it pushes one cursor standing for all
    of them, keyed by the least cost any of them can have (its own plus one step) and the
    first of a block of tie numbers, one per edge in ``_edges``' order, taken in the order
    states settle, as an eager search numbers its pushes. Popping the cursor classifies one
    edge, pushes it with its own cost and tie number, and pushes the cursor back for the rest.
    Every entry keeps the cost and relative tie order the eager search gives it, and an edge
    is classified only before anything its cursor could precede: so states settle in the
    eager order, and a search stopped at its target never classifies the edges it did not
    need (reaching a two-step local target from R classifies the edges of the one-step
    states up to the one that leads there, not all edges of all of them).
    """

    def __init__(self, graph: _StateGraph, src: int) -> None:
        self.graph, self.src = graph, src
        # (cost, tie, state, from, step) for an edge; (cost, tie, state, _CURSOR, k) for the
        # cursor at state's k-th edge
        self.heap: list[tuple[int, int, int, int, Any]] = [(0, 0, src, -1, None)]
        self.blocks = itertools.count(1)
        self.settled: dict[int, tuple[int, int, Step | None]] = {}  # id -> (cost, from, step)
        self.paths: dict[int, tuple[Step, ...]] = {src: ()}

    def path_to(self, dst: tuple[Placement, ...]) -> tuple[Step, ...]:
        g = self.graph
        with g._lock:
            j = g.id_of(dst)
            path = self.paths.get(j)
            if path is not None:
                return path
            if not self._settle(j):
                raise ValueError(
                    f"no plan from {fmt_placements(g.states[self.src])} to "
                    f"{fmt_placements(dst)} on mesh {g.mesh_shape} for shape "
                    f"{g.global_shape}")  # every state reaches R..R
            return self._path(j)

    def costs(self) -> dict[tuple[Placement, ...], int]:
        """Every reachable state's least cost (packed, ``_pack``), the search run to its end."""
        g = self.graph
        with g._lock:
            self._settle(None)
            return {g.states[i]: cost for i, (cost, _, _) in self.settled.items()}

    def _settle(self, j: int | None) -> bool:
        """Run the search until state ``j`` is settled (every state for None); whether it is."""
        g, settled, heap = self.graph, self.settled, self.heap
        while j is None or j not in settled:
            if not heap:
                return j is None
            cost, tie, i, came_from, x = heapq.heappop(heap)
            if came_from == _CURSOR:
                edge = g.edge(i, x)
                if edge is not None:
                    k, inc, step = edge
                    if k not in settled:
                        heapq.heappush(heap, (cost - 1 + inc, tie, k, i, step))
                    heapq.heappush(heap, (cost, tie + 1, i, _CURSOR, x + 1))
                continue
            if i in settled:
                continue
            settled[i] = (cost, came_from, x)
            heapq.heappush(heap, (cost + 1, next(self.blocks) << _BLOCK, i, _CURSOR, 0))
        return True

    def _path(self, j: int) -> tuple[Step, ...]:
        path = self.paths.get(j)
        if path is None:
            _, came_from, step = self.settled[j]
            path = self.paths[j] = self._path(came_from) + (step,)  # type: ignore[operator]
        return path


@shape_cache(maxsize=4096)
def _plan(src: tuple[Placement, ...], dst: tuple[Placement, ...], mesh_shape: tuple[int, ...],
          global_shape: tuple[int, ...], itemsize: int) -> tuple[Step, ...]:
    """One pair's search, where the edges depend on the target (past _FULL_ENUMERATION)."""
    ops = sorted({p.reduce_op for p in src + dst if isinstance(p, Partial)})
    universe = _universe(len(global_shape), ops, _split_rules(src + dst))
    tie = itertools.count()
    heap: list = [((0, 0, 0), next(tie), src, ())]
    done: set[tuple[Placement, ...]] = set()
    while heap:
        cost, _, state, path = heapq.heappop(heap)
        if state == dst:
            return path
        if state in done:
            continue
        done.add(state)
        for step in _edges(state, dst, universe, mesh_shape, global_shape):
            if step.dst in done:
                continue
            b = step_bytes(step, mesh_shape, global_shape, itemsize)
            new = (cost[0] + b, cost[1] + step.is_collective, cost[2] + 1)
            heapq.heappush(heap, (new, next(tie), step.dst, path + (step,)))
    raise ValueError(f"no plan from {fmt_placements(src)} to {fmt_placements(dst)} on mesh "
                     f"{mesh_shape} for shape {global_shape}")  # every state reaches R..R


def _edges(state: tuple[Placement, ...], dst: tuple[Placement, ...], universe: list[Placement],
           mesh_shape: tuple[int, ...], global_shape: tuple[int, ...],
           step_to: Callable[[tuple[Placement, ...]], Step | None] | None = None
           ) -> Iterator[Step]:
    """Steps out of ``state``: every placement list that differs on a set of mesh dims, when
    there are few enough; otherwise one placement on mesh dims that share one, or ``dst``'s.
    ``step_to(new)`` stands in for ``classify(state, new, ...)`` where given."""
    seen = set()
    for r in range(1, len(state) + 1):
        for dims in itertools.combinations(range(len(state)), r):
            if len(universe) ** r <= _FULL_ENUMERATION:
                choices = itertools.product(*([q for q in universe if q != state[m]]
                                              for m in dims))
            else:
                same = len({state[m] for m in dims}) == 1
                choices = [tuple(q for _ in dims) for q in universe if same] + [
                    tuple(dst[m] for m in dims)]
            for qs in choices:
                new = list(state)
                for m, q in zip(dims, qs):
                    new[m] = q
                if any(new[m] == state[m] for m in dims) or tuple(new) in seen:
                    continue
                target = tuple(new)
                seen.add(target)
                if step_to is not None:
                    step = step_to(target)
                elif lays_out(global_shape, mesh_shape, target):
                    step = classify(state, target, mesh_shape, global_shape)
                else:
                    step = None
                if step is not None:
                    yield step


# Up to this many target lists per set of mesh dims, _edges tries them all (so 2-d meshes
# are searched exhaustively); beyond, it tries the homogeneous ones and dst's.
_FULL_ENUMERATION = 64


@shape_cache(maxsize=65536)
def classify(src: tuple[Placement, ...], dst: tuple[Placement, ...],
             mesh_shape: tuple[int, ...], global_shape: tuple[int, ...]) -> Step | None:
    """The one step that turns ``src`` into ``dst``, or None when no single step does."""
    return _classify(src, dst, _boxes_fn(src, dst, mesh_shape, global_shape))


def _classify(src: tuple[Placement, ...], dst: tuple[Placement, ...],
              boxes: Callable[[], Iterable[tuple[Box, Box]]]) -> Step | None:
    """``classify``, with ``boxes()`` giving (src piece, dst piece) at every coordinate."""
    if not _families_ok(dst):
        return None
    dims = tuple(m for m in range(len(src)) if src[m] != dst[m])
    if not dims:
        return None
    a = {src[m] for m in dims}
    b = {dst[m] for m in dims}
    if all(not isinstance(p, Partial) for p in a | b):
        if all(box_contains(old, new) for old, new in boxes()):
            return Step("local_slice", dims, src, dst)
        group = _exchange_group(src, dst, dims)
        return Step(_gather_or_all_to_all(src, dst, dims, group), group, src, dst)
    if len(b) == 1 and isinstance(q := next(iter(b)), Partial):
        # Any mix of R and S(d) becomes P(op) by filling with the identity; a P -> P step
        # can only rescale between sum and avg.
        if all(not isinstance(p, Partial) for p in a):
            if all(box_contains(new, old) for old, new in boxes()):
                return Step("local_partial", dims, src, dst)
            return None
        (p,) = a if len(a) == 1 else (None,)
        if isinstance(p, Partial) and {p.reduce_op, q.reduce_op} == {"sum", "avg"}:
            return Step("local_scale", dims, src, dst)
        return None
    if len(a) != 1 or not isinstance(next(iter(a)), Partial):
        return None
    if all(isinstance(q, Replicate) for q in b):
        return Step("all_reduce", dims, src, dst)
    if all(isinstance(q, Shard) for q in b) and all(box_contains(old, new)
                                                     for old, new in boxes()):
        return Step("reduce_scatter", dims, src, dst)
    return None


def _families_ok(placements: tuple[Placement, ...]) -> bool:
    ops = {p.reduce_op for p in placements if isinstance(p, Partial)}
    return ops <= {"sum", "avg"} or len(ops) == 1


def _boxes_fn(src: tuple[Placement, ...], dst: tuple[Placement, ...],
              mesh_shape: tuple[int, ...], global_shape: tuple[int, ...]):
    def boxes() -> Iterator[tuple[Box, Box]]:
        for c in mesh_coordinates(mesh_shape):
            yield (local_box(global_shape, mesh_shape, src, c),
                   local_box(global_shape, mesh_shape, dst, c))
    return boxes


def _exchange_group(src: tuple[Placement, ...], dst: tuple[Placement, ...],
                    dims: tuple[int, ...]) -> tuple[int, ...]:
    """The mesh dims an S/R -> S/R exchange must span.

    Shards nest in mesh-dim order, so a later mesh dim sharding the same tensor dim as a
    changing one splits the changing one's pieces: ranks along it hold scattered parts of what
    the group needs, and must join the group. Earlier ones only pick the group's region.
    """
    first: dict[int, int] = {}
    for m in dims:
        for p in (src[m], dst[m]):
            if isinstance(p, Shard):
                first[p.dim] = min(first.get(p.dim, m), m)
    extra = [m for m, p in enumerate(src)
             if m not in dims and isinstance(p, Shard) and p.dim in first and m > first[p.dim]]
    return tuple(sorted(set(dims) | set(extra)))


def _gather_or_all_to_all(src: tuple[Placement, ...], dst: tuple[Placement, ...],
                          dims: tuple[int, ...], group: tuple[int, ...]) -> str:
    # A plain all_gather cats the pieces in group-rank order: right only when the group is
    # exactly the innermost mesh dims sharding one tensor dim, all going to Replicate.
    if group == dims and len({src[m] for m in dims}) == 1 and isinstance(src[dims[0]], Shard) \
            and all(isinstance(dst[m], Replicate) for m in dims):
        return "all_gather"
    return "all_to_all"
