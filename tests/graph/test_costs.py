"""dtensor.graph.costs: the reshard tables give the planner's bytes for every pair (Note
[reshard tables]), through one search per source, or through the planner itself where it
does not enumerate every target."""

from __future__ import annotations

import itertools

import pytest

from dtensor import Partial, Replicate, Shard
from dtensor.graph.costs import ReshardTable
from dtensor.redistribute.planner import plan, plan_bytes

R = Replicate()


def _lists(ndim: int, mesh_ndim: int, partials: tuple[Partial, ...]) -> list[tuple]:
    universe = [Shard(d) for d in range(ndim)] + [R, *partials]
    return [tuple(p) for p in itertools.product(universe, repeat=mesh_ndim)]


@pytest.mark.parametrize("mesh, shape, partials", [
    ((4,), (5, 3), (Partial(),)),
    ((2, 4), (7, 5), (Partial(),)),
    ((2, 4), (3, 8), (Partial(), Partial("max"))),
    ((2, 2), (5, 1, 2), (Partial("avg"),)),
    ((3, 2), (6,), (Partial(), Partial("avg"))),
], ids=str)
def test_every_pair_is_the_planners(mesh, shape, partials):
    table = ReshardTable(mesh, shape, 4)
    lists = _lists(len(shape), len(mesh), partials)
    for src, dst in itertools.product(lists, lists):
        ops = {p.reduce_op for p in src + dst if isinstance(p, Partial)}
        if len(ops) > 1 and not ops <= {"sum", "avg"}:
            continue  # sum and max never meet in one plan (Partial families)
        want = plan_bytes(plan(src, dst, mesh, shape, 4), mesh, shape, 4)
        assert table.bytes(src, dst) == want, (src, dst)


def test_past_full_enumeration_the_planner_prices_each_pair():
    # a 3-d mesh with Partial sum and max: 5 ** 3 target lists per source, more than the
    # planner enumerates, so its edges depend on the target and the table asks plan()
    mesh, shape = (2, 2, 2), (4, 4)
    table = ReshardTable(mesh, shape, 2)
    src = (Partial(), Shard(0), R)
    for dst in [(R, R, R), (Shard(1), Shard(0), R), (Partial("max"), R, R)]:
        want = plan_bytes(plan(src, dst, mesh, shape, 2), mesh, shape, 2)
        assert table.bytes(src, dst) == want
    assert table._from[(src, ("max", "sum"))] is None
    assert table._pairs, "priced by the planner"
