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
stays true). Every OpInfo, in the default run (about 6 ms a case). On a 2-D mesh (2, 2) the
same, each Shard under the rule mesh dim by mesh dim (nested cuts included): every OpInfo
with ``-m slow``, every eighth in the default run.
"""

from __future__ import annotations

import pytest

import dataclasses
import warnings

from dtensor.layout import chunk_bounds, lays_out, pieces
from dtensor.ops.propagate import candidates
from dtensor.ops.registry import REGISTRY, OpSpec, TensorSpec
from dtensor.ops.soundness import check_candidate, op_spec
from dtensor.placements import Placement, Replicate, Shard, chunk_rule, has_split_rule
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


def _under(rule: str, tensors, placements, mesh=MESH) -> tuple[tuple[Placement, ...], ...]:
    """Each tensor's placements with every Shard under ``rule``, mesh dim by mesh dim; where
    the rule cannot cut what that mesh dim splits (nested explicit sizes must fit every
    piece, a block every run), that Shard keeps the rule before it: balanced, or chunk's."""
    def one(shape, pl):
        out = list(pl)
        for m, p in enumerate(pl):
            if not isinstance(p, Shard):
                continue
            if rule == "block":
                n = shape[p.dim]
                block = next((b for b in range(n // 2, 1, -1) if n % b == 0), None)
                tries = [Shard(p.dim, block=block)]
            elif rule == "balanced":
                tries = [Shard(p.dim, "balanced")]
            else:  # explicit: chunk's sizes reversed, of the extent this mesh dim splits
                upto = out[:m] + [Replicate()] * (len(pl) - m)
                held = pieces(shape, mesh, upto, (0,) * len(mesh))[p.dim]
                extent = sum(b - a for a, b in held)
                tries = [Shard(p.dim, _reversed_chunks(extent, mesh[m])),
                         Shard(p.dim, "balanced")]
            for candidate in tries:
                trial = out[:m] + [candidate] + out[m + 1:]
                if lays_out(shape, mesh, trial):
                    out = trial
                    break
        return tuple(out)

    return tuple(one(tuple(t.shape), ps) for t, ps in zip(tensors, placements))


def split_failures(e, mesh=MESH) -> list[str]:
    """The cases of ``e`` on ``mesh`` that fail under a split rule and pass under chunk's."""
    ss = samples(e, 1)
    if not ss:
        return []
    s = ss[0]
    call = aten_call(e, s)
    tensors = s.tensors()
    cases, labels = [], []
    for placements in base_assignments(tensors, mesh):
        if not any(isinstance(p, Shard) for ps in placements for p in ps):
            continue
        for tier in TIERS:
            for rule in RULES:
                pl = placements if rule == "chunk" else _under(rule, tensors, placements, mesh)
                cases.append((e, s, call, pl, tier))
                labels.append((rule, f"{tier} {fmt_placements(pl)}"))
    out = _unsound_kept_rules(e, s, call, cases, mesh)
    results = sweep.run_world(mesh, cases) if cases else []
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


def _unsound_kept_rules(e, s, call, cases, mesh) -> list[str]:
    if call is None or call.func not in REGISTRY:
        return []
    rtol, atol = tolerances(e.dtype)
    out, seen = [], set()
    for _, _, _, placements, _ in cases:
        if not has_split_rule([p for ps in placements for p in ps]) or placements in seen:
            continue
        seen.add(placements)
        spec = _held(op_spec(call.func, call.args, call.kwargs, mesh), call, placements)
        for c in candidates(spec, dispatchable_only=False):
            if not any(has_split_rule(p) for p in c.inputs + c.outputs):
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                reason = check_candidate(call.func, call.args, call.kwargs, c, mesh,
                                         rtol=rtol, atol=atol)
            if reason and _chunk_twin_sound(call, c, mesh, rtol, atol):
                out.append(f"sound {fmt_placements(c.inputs)} -> {fmt_placements(c.outputs)}: "
                           f"{reason}")
    return out


def _chunk_twin_sound(call, c, mesh, rtol: float, atol: float) -> bool:
    """Whether ``c`` with every Shard under chunk's rule is sound: where it is not, the chunk
    tier's verdict (expected_failures.py) covers the split one too."""
    twin = dataclasses.replace(c, inputs=tuple(map(chunk_rule, c.inputs)),
                               outputs=tuple(map(chunk_rule, c.outputs)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return check_candidate(call.func, call.args, call.kwargs, twin, mesh, rtol=rtol,
                               atol=atol) is None


def _check(e, mesh=MESH, expected=SPLIT_EXPECTED) -> None:
    found = split_failures(e, mesh)
    if e.key in expected:
        assert found, f"{e.key} passes under split rules on mesh {mesh}: remove it from the list"
        return
    assert not found, f"{e.key} under split rules on mesh {mesh}:\n" + "\n".join(found[:4])


@pytest.mark.parametrize("e", ALL, ids=[e.key for e in ALL])
def test_split_rules_give_chunk_verdicts(e):
    _check(e)


# the 2-D mesh: every OpInfo under -m slow, every DEFAULT_2D_STRIDE-th in the default run
MESH_2D = (2, 2)
DEFAULT_2D_STRIDE = 8
SPLIT_EXPECTED_2D: dict[str, str] = {}
_DEFAULT_2D = set(range(0, len(ALL), DEFAULT_2D_STRIDE))


@pytest.mark.parametrize("e", [pytest.param(e, marks=() if i in _DEFAULT_2D else pytest.mark.slow)
                               for i, e in enumerate(ALL)], ids=[e.key for e in ALL])
def test_split_rules_give_chunk_verdicts_on_a_2d_mesh(e):
    _check(e, MESH_2D, SPLIT_EXPECTED_2D)


def test_the_expected_lists_name_real_entries():
    keys = {e.key for e in ALL}
    assert not (set(SPLIT_EXPECTED) | set(SPLIT_EXPECTED_2D)) - keys


def test_nested_rules_fall_back_where_they_cannot_cut():
    # 6 rows over (2, 2): the first cut is (3, 3), then (1, 2) cuts each piece; 5 rows are
    # cut (2, 3), pieces no one size list cuts: balanced there
    import torch

    six, five = torch.zeros(6, 4), torch.zeros(5, 4)
    nested = ((Shard(0), Shard(0)),)
    assert _under("explicit", [six], nested, MESH_2D) == (
        (Shard(0, (3, 3)), Shard(0, (1, 2))),)
    assert _under("explicit", [five], nested, MESH_2D) == (
        (Shard(0, (2, 3)), Shard(0, "balanced")),)
    assert _under("block", [six], ((Shard(0), Shard(1)),), MESH_2D) == (
        (Shard(0, block=3), Shard(1, block=2)),)
