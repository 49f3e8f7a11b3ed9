"""The planner's resumable per-source search (Note [one search per source], Note [lazy
edges]) gives the pair search's plan step for step, whatever order targets are asked in."""

from __future__ import annotations

import itertools
import random

import pytest

from dtensor.redistribute import planner
from dtensor.placements import Partial, Replicate, Shard

R = Replicate()


def _lists(ndim: int, mesh_ndim: int, partials: tuple[Partial, ...]) -> list[tuple]:
    universe = [Shard(d) for d in range(ndim)] + [R, *partials]
    return [tuple(p) for p in itertools.product(universe, repeat=mesh_ndim)]


def _pair_search(src, dst, mesh, shape, itemsize):
    try:
        return planner._plan(src, dst, mesh, shape, itemsize)
    except ValueError as e:
        return str(e)


@pytest.mark.parametrize("mesh, shape, partials", [
    ((4,), (5, 3), (Partial(),)),
    ((3,), (2, 0), (Partial("max"),)),
    ((2, 2), (7, 5), (Partial(), Partial("avg"))),
    ((2, 3), (5, 1, 2), (Partial(),)),
], ids=str)
@pytest.mark.parametrize("order", ["forward", "shuffled"])
def test_search_equals_the_pair_search(mesh, shape, partials, order):
    lists = _lists(len(shape), len(mesh), partials)
    pairs = list(itertools.product(lists, lists))
    if order == "shuffled":
        random.Random(0).shuffle(pairs)
    for src, dst in pairs:
        want = _pair_search(src, dst, mesh, shape, 4)
        try:
            got = planner.plan(src, dst, mesh, shape, 4)
        except ValueError as e:
            got = str(e)
        assert got == want, (src, dst)


def test_plans_do_not_depend_on_the_itemsize():
    mesh, shape = (2, 2), (7, 5)
    lists = _lists(2, 2, (Partial(),))
    for src, dst in itertools.product(lists, lists):
        plans = {planner._plan(src, dst, mesh, shape, k) for k in (1, 2, 8)}
        assert plans == {planner.plan(src, dst, mesh, shape, 4)}, (src, dst)


def test_a_one_step_local_target_classifies_only_what_it_needs():
    # from R, a local slice settles at the first cost: the search classifies R's edges up to
    # it, and no edge of any other state (Note [lazy edges])
    mesh, shape = (2, 2), (6, 6, 6)
    graph = planner._StateGraph(mesh, shape, ())
    graph.search((R, R)).path_to((Shard(0), R))
    assert list(graph._edges) == [graph.id_of((R, R))]
