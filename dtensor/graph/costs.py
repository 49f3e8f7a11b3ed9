"""Reshard bytes for inference, in bulk: every target from one source in one search.

Note [reshard tables]
Inference prices thousands of (source, target) placement pairs per value class (Note [even
dims scale] in ``dtensor.graph.problem``). ``dtensor.redistribute.plan`` answers one pair with
its own Dijkstra (~10 ms), but only its bytes are needed here, and they are a shortest-path
distance over a graph that does not depend on the target: the planner's states are every
placement list over its universe (each tensor dim's Shard, Replicate, and the Partial kinds
of the pair), its edges the single steps ``classify`` finds between two states, priced by
``step_bytes``. So one Dijkstra from a source gives the bytes to every target, each edge is
classified once per class and shared by every source, and the answer is the planner's:
its cost is (bytes, collectives, steps) in that order, so the first part of its optimum is
the least bytes over the same edges.

The planner enumerates every target state only while ``universe ** k`` stays within
``_FULL_ENUMERATION`` for every group of k mesh dims (2-d meshes, tensors up to 6-d); past
that it tries fewer edges, which depend on the target. Such pairs go to ``plan`` itself.
``tests/test_graph_costs.py`` checks the tables against ``plan_bytes(plan(...))`` pair by
pair.
"""

from __future__ import annotations

import heapq
import itertools
from functools import lru_cache

from dtensor.placements import Partial, Placement, Replicate, Shard, normalize_placements
from dtensor.redistribute.planner import _FULL_ENUMERATION, classify, plan, plan_bytes, step_bytes

Pl = tuple[Placement, ...]


class ReshardTable:
    """Planner-minimal bytes between placement lists of one (mesh, shape, itemsize).

    >>> t = ReshardTable((2, 4), (8, 8), 4)
    >>> t.bytes((Shard(0), Shard(0)), (Replicate(), Replicate()))  # 7/8 of 256 B, 8 ranks
    1792
    """

    def __init__(self, mesh_shape: tuple[int, ...], shape: tuple[int, ...], itemsize: int):
        self.mesh_shape, self.shape, self.itemsize = mesh_shape, shape, itemsize
        self._graphs: dict[tuple[str, ...], _StateGraph | None] = {}
        self._pairs: dict[tuple[Pl, Pl], int] = {}  # pairs the planner itself priced

    def bytes(self, src: Pl, dst: Pl) -> int:
        ndim, m = len(self.shape), len(self.mesh_shape)
        src = normalize_placements(src, ndim, m, shape=self.shape)
        dst = normalize_placements(dst, ndim, m, shape=self.shape)
        if src == dst:
            return 0
        ops = tuple(sorted({p.reduce_op for p in src + dst if isinstance(p, Partial)}))
        if ops not in self._graphs:
            universe = ([Shard(d) for d in range(ndim)] + [Replicate()]
                        + [Partial(op) for op in ops])
            full = all(len(universe) ** k <= _FULL_ENUMERATION for k in range(1, m + 1))
            self._graphs[ops] = _StateGraph(self, universe) if full else None
        graph = self._graphs[ops]
        if graph is not None:
            return graph.distances(src)[dst]
        if (src, dst) not in self._pairs:
            steps = plan(src, dst, self.mesh_shape, self.shape, self.itemsize)
            self._pairs[(src, dst)] = plan_bytes(steps, self.mesh_shape, self.shape,
                                                 self.itemsize)
        return self._pairs[(src, dst)]


class _StateGraph:
    """The planner's states over one universe; edges found lazily, distances per source."""

    def __init__(self, table: ReshardTable, universe: list[Placement]) -> None:
        self.table = table
        self.states: list[Pl] = [tuple(p) for p in
                                 itertools.product(universe, repeat=len(table.mesh_shape))]
        self._edges: dict[Pl, list[tuple[Pl, int]]] = {}
        self._dist: dict[Pl, dict[Pl, int]] = {}

    def edges(self, state: Pl) -> list[tuple[Pl, int]]:
        out = self._edges.get(state)
        if out is None:
            t = self.table
            out = []
            for new in self.states:
                if new != state and (step := classify(state, new, t.mesh_shape,
                                                      t.shape)) is not None:
                    out.append((new, step_bytes(step, t.mesh_shape, t.shape, t.itemsize)))
            self._edges[state] = out
        return out

    def distances(self, src: Pl) -> dict[Pl, int]:
        dist = self._dist.get(src)
        if dist is None:
            dist = {}
            heap: list[tuple[int, int, Pl]] = [(0, 0, src)]
            tie = itertools.count(1)
            while heap:
                d, _, state = heapq.heappop(heap)
                if state in dist:
                    continue
                dist[state] = d
                for new, b in self.edges(state):
                    if new not in dist:
                        heapq.heappush(heap, (d + b, next(tie), new))
            self._dist[src] = dist
        return dist


@lru_cache(maxsize=512)
def reshard_table(mesh_shape: tuple[int, ...], shape: tuple[int, ...],
                  itemsize: int) -> ReshardTable:
    """One shared table per (mesh, shape, itemsize): problems over one graph (or layers of
    one width) price their pairs once. Its entries are pure functions of the key."""
    return ReshardTable(tuple(mesh_shape), tuple(shape), itemsize)
