"""Reshard bytes for inference, in bulk: every target from one source in one search.

Note [reshard tables]
Inference prices thousands of (source, target) placement pairs per value class (Note [even
dims scale] in ``dtensor.graph.problem``). Only the bytes of the planner's plan are needed
here, and where the planner's state graph does not depend on the target (Note [one search
per source] in ``dtensor.redistribute.planner``) one search from a source gives them for
every target: ``dtensor.redistribute.planner.distances``, over the planner's own graph and
search, so the answer is the planner's by construction. Past that (very high-rank tensors
on 3-d meshes and up) each pair goes to ``plan`` itself. ``tests/graph/test_costs.py`` checks
the tables against ``plan_bytes(plan(...))`` pair by pair.
"""

from __future__ import annotations

from functools import lru_cache

from dtensor.placements import Partial, Pl, normalize_placements
from dtensor.redistribute.planner import distances, plan, plan_bytes


class ReshardTable:
    """Planner-minimal bytes between placement lists of one (mesh, shape, itemsize).

    >>> from dtensor import Replicate, Shard
    >>> t = ReshardTable((2, 4), (8, 8), 4)
    >>> t.bytes((Shard(0), Shard(0)), (Replicate(), Replicate()))  # 7/8 of 256 B, 8 ranks
    1792
    """

    def __init__(self, mesh_shape: tuple[int, ...], shape: tuple[int, ...], itemsize: int):
        self.mesh_shape, self.shape, self.itemsize = mesh_shape, shape, itemsize
        # (source, Partial kinds) -> bytes to every target, or None: priced pair by pair
        self._from: dict[tuple[Pl, tuple[str, ...]], dict[Pl, int] | None] = {}
        self._pairs: dict[tuple[Pl, Pl], int] = {}  # pairs the planner itself priced

    def bytes(self, src: Pl, dst: Pl) -> int:
        ndim, m = len(self.shape), len(self.mesh_shape)
        src = normalize_placements(src, ndim, m, shape=self.shape)
        dst = normalize_placements(dst, ndim, m, shape=self.shape)
        if src == dst:
            return 0
        ops = tuple(sorted({p.reduce_op for p in src + dst if isinstance(p, Partial)}))
        key = (src, ops)
        if key not in self._from:
            self._from[key] = distances(src, self.mesh_shape, self.shape, self.itemsize, ops)
        table = self._from[key]
        if table is not None:
            return table[dst]
        if (src, dst) not in self._pairs:
            steps = plan(src, dst, self.mesh_shape, self.shape, self.itemsize)
            self._pairs[(src, dst)] = plan_bytes(steps, self.mesh_shape, self.shape,
                                                 self.itemsize)
        return self._pairs[(src, dst)]


@lru_cache(maxsize=512)
def reshard_table(mesh_shape: tuple[int, ...], shape: tuple[int, ...],
                  itemsize: int) -> ReshardTable:
    """One shared table per (mesh, shape, itemsize): problems over one graph (or layers of
    one width) price their pairs once. Its entries are pure functions of the key."""
    return ReshardTable(tuple(mesh_shape), tuple(shape), itemsize)
