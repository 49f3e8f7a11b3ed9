"""The end-to-end op-database tier under split rules (Note [split rules] in dtensor/layout.py).

For an OpInfo's first sample on 4 ranks, each fixed sharded case of the chunk tier
(``cases.base_assignments``) runs three times in one world: as it is, with every Shard
balanced, and with every Shard cut by explicit sizes (chunk's sizes reversed, so the empty
pieces come first). Forward and backward results must equal one device wherever chunk's do:
a case that
passes under chunk's rule and fails under another is a split-rule bug, unless it is listed in
``SPLIT_EXPECTED`` with its reason (an unexpected pass of a listed one fails too, so the list
stays true). Every OpInfo, in the default run (about 6 ms a case).
"""

from __future__ import annotations

import pytest

from dtensor.layout import chunk_bounds
from dtensor.placements import Placement, Shard
from opdb_tests import sweep
from opdb_tests.cases import aten_call, base_assignments, entries, fmt_placements, samples

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

MESH = (4,)
TIERS = ("forward", "backward")
ALL = entries()

# key -> why it fails under a split rule where it passes under chunk's
SPLIT_EXPECTED: dict[str, str] = {}


def _reversed_chunks(n: int, parts: int) -> tuple[int, ...]:
    return tuple(reversed([b - a for a, b in (chunk_bounds(n, parts, i) for i in range(parts))]))


def _under(rule: str, tensors, placements) -> tuple[tuple[Placement, ...], ...]:
    def one(t, p):
        if not isinstance(p, Shard):
            return p
        if rule == "balanced":
            return Shard(p.dim, "balanced")
        return Shard(p.dim, _reversed_chunks(t.shape[p.dim], MESH[0]))

    return tuple(tuple(one(t, p) for p in ps) for t, ps in zip(tensors, placements))


def split_failures(e) -> list[str]:
    """The cases of ``e`` that fail under a split rule and pass under chunk's."""
    ss = samples(e, 1)
    if not ss:
        return []
    s = ss[0]
    call = aten_call(e, s)
    tensors = s.tensors()
    cases, labels = [], []
    for placements in base_assignments(tensors, MESH):
        if not any(isinstance(p, Shard) for ps in placements for p in ps):
            continue
        for tier in TIERS:
            for rule in ("chunk", "balanced", "explicit"):
                pl = placements if rule == "chunk" else _under(rule, tensors, placements)
                cases.append((e, s, call, pl, tier))
                labels.append((rule, f"{tier} {fmt_placements(pl)}"))
    results = sweep.run_world(MESH, cases) if cases else []
    out = []
    for i in range(0, len(results), 3):
        chunk, *others = results[i:i + 3]
        if chunk is not None:
            continue  # the chunk tier's own verdict (expected_failures.py) covers it
        out += [f"{labels[i + 1 + k][1]}: {f.reason}" for k, f in enumerate(others)
                if f is not None]
    return out


def _check(e) -> None:
    found = split_failures(e)
    if e.key in SPLIT_EXPECTED:
        assert found, f"{e.key} passes under split rules: remove it from SPLIT_EXPECTED"
        return
    assert not found, f"{e.key} under split rules:\n" + "\n".join(found[:4])


@pytest.mark.parametrize("e", ALL, ids=[e.key for e in ALL])
def test_split_rules_give_chunk_verdicts(e):
    _check(e)


def test_the_expected_list_names_real_entries():
    keys = {e.key for e in ALL}
    assert not set(SPLIT_EXPECTED) - keys
