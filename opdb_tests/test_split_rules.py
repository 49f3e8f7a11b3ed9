"""The end-to-end op-database tier under split rules (Note [split rules] in dtensor/layout.py).

For an OpInfo's first sample on 4 ranks, each fixed sharded case of the chunk tier
(``cases.base_assignments``) runs three times in one world: as it is, with every Shard
balanced, with every Shard cut by explicit sizes (chunk's sizes reversed, so the empty
pieces come first), and with every Shard a block shard (Note [block shards]: runs of the
dim's largest proper divisor, where it has one; else chunk's cut again). The soundness harness also checks, for the op's aten call held under
each rule, every candidate that keeps a split rule (the others are chunk's, which the
default tier checks). Forward and backward results must equal one device wherever chunk's do:
a case that
passes under chunk's rule and fails under another is a split-rule bug, unless it is listed in
``SPLIT_EXPECTED`` with its reason (an unexpected pass of a listed one fails too, so the list
stays true). Every OpInfo, in the default run (about 6 ms a case).
"""

from __future__ import annotations

import pytest

import dataclasses
import warnings

from dtensor.layout import chunk_bounds
from dtensor.ops.propagate import candidates
from dtensor.ops.registry import REGISTRY, OpSpec, TensorSpec
from dtensor.ops.soundness import check_candidate, op_spec
from dtensor.placements import Placement, Shard, chunk_rule, has_split_rule
from opdb_tests import sweep
from opdb_tests.cases import (aten_call, base_assignments, entries, fmt_placements, samples,
                              tolerances)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

MESH = (4,)
TIERS = ("forward", "backward")
RULES = ("chunk", "balanced", "explicit", "block")
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
        if rule == "block":
            n = t.shape[p.dim]
            block = next((b for b in range(n // 2, 1, -1) if n % b == 0), None)
            return Shard(p.dim, block=block)
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
            for rule in RULES:
                pl = placements if rule == "chunk" else _under(rule, tensors, placements)
                cases.append((e, s, call, pl, tier))
                labels.append((rule, f"{tier} {fmt_placements(pl)}"))
    out = _unsound_kept_rules(e, s, call, cases)
    results = sweep.run_world(MESH, cases) if cases else []
    for i in range(0, len(results), len(RULES)):
        chunk, *others = results[i:i + len(RULES)]
        if chunk is not None:
            continue  # the chunk tier's own verdict (expected_failures.py) covers it
        out += [f"{labels[i + 1 + k][1]}: {f.reason}" for k, f in enumerate(others)
                if f is not None]
    return out


def _held(spec: OpSpec, call, placements) -> OpSpec:
    """``spec`` (every tensor Replicate) with its aten tensors held as ``placements`` says
    (indexed like the sample's tensors)."""
    it = iter(call.tensor_index)

    def held(x):
        if isinstance(x, TensorSpec):
            return dataclasses.replace(x, placements=tuple(placements[next(it)]))
        if type(x) is tuple:
            return tuple(held(v) for v in x)
        return x

    return dataclasses.replace(spec, args=held(spec.args),
                               kwargs=tuple((k, held(v)) for k, v in spec.kwargs))


def _unsound_kept_rules(e, s, call, cases) -> list[str]:
    if call is None or call.func not in REGISTRY:
        return []
    rtol, atol = tolerances(e.dtype)
    out, seen = [], set()
    for _, _, _, placements, _ in cases:
        if not has_split_rule([p for ps in placements for p in ps]) or placements in seen:
            continue
        seen.add(placements)
        spec = _held(op_spec(call.func, call.args, call.kwargs, MESH), call, placements)
        for c in candidates(spec, dispatchable_only=False):
            if not any(has_split_rule(p) for p in c.inputs + c.outputs):
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                reason = check_candidate(call.func, call.args, call.kwargs, c, MESH,
                                         rtol=rtol, atol=atol)
            if reason and _chunk_twin_sound(call, c, rtol, atol):
                out.append(f"sound {fmt_placements(c.inputs)} -> {fmt_placements(c.outputs)}: "
                           f"{reason}")
    return out


def _chunk_twin_sound(call, c, rtol: float, atol: float) -> bool:
    """Whether ``c`` with every Shard under chunk's rule is sound: where it is not, the chunk
    tier's verdict (expected_failures.py) covers the split one too."""
    twin = dataclasses.replace(c, inputs=tuple(map(chunk_rule, c.inputs)),
                               outputs=tuple(map(chunk_rule, c.outputs)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return check_candidate(call.func, call.args, call.kwargs, twin, MESH, rtol=rtol,
                               atol=atol) is None


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
