"""From one-mesh-dim strategies to a decision: product over mesh dims, priced, cached.

Note [choice by cost]
Every combination of the rule's per-mesh-dim strategies is a candidate; a candidate's cost is
the bytes the planner needs to move each input from its current placements to the ones the
candidate requires (``plan_bytes``, the proven-minimal plan). The cheapest wins; ties go to the
candidate touching fewer inputs, then to fewer Partial outputs, then to the rule's own order.
Decisions are cached per (op, input specs, arguments, pins), so steady-state dispatch does no
rule work.

Note [split rules in propagation]
Rules are written for ``torch.chunk`` pieces: they see every Shard with the default split rule
(Note [split rules] in dtensor/layout.py), and an input held under another rule is priced
moving to what the strategy asks (an all_to_all at the byte lower bound). A rule marked
``takes_split_rules`` (registry.py) also yields, for each of its strategies, the *lifted*
one: on a mesh dim where an input holds ``Shard(d, sizes=r)`` and the strategy asks that input
for ``Shard(d)``, every Shard of that mesh dim, inputs and outputs, takes rule ``r``. That is
right exactly when the strategy pairs positions one to one along the dims it shards (element
i of the sharded dim of one tensor meets element i of the others'): pointwise ops, matmul's
M/N/K, reductions and softmax over other dims, transposes. It is not for shifts, gathers or
concatenations, which stay unmarked. Rules also test the pieces they shard (a mean over a
sharded dim needs equal pieces, a max non-empty ones): a lifted strategy is kept only where
its pieces are equal wherever chunk's are and non-empty wherever chunk's are, on the mesh dims
the rule may have tested (every lifted one for ``tests_pieces``, else those a non-sum Partial
output reduces), so every such test the rule passed holds for it too. A lifted candidate whose explicit sizes
do not cut a tensor's extent is dropped (inputs here, outputs where the output shapes are
known: ``decide``'s ``out_shapes``). A rule marked ``reads`` instead sees the placements as
held and carries their rules itself: the foreach rule, whose list positions are independent
tensors with rules of their own, and ``view``, which keeps a rule where the pieces stay blocks
of the output (Note [views of split rules] in dtensor/ops/views.py). The soundness harness checks these strategies as any other
(tests/rules/test_split_rules.py).
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from dtensor.symbolic import hints, shape_cache
from typing import Sequence

from dtensor.layout import check_layout, lays_out, local_shape, mesh_coordinates
from dtensor.ops.registry import (REGISTRY, SPLIT_RULE_AWARE, SPLIT_RULE_READERS, OpSpec,
                                  Registry, Strategy, TensorSpec)
from dtensor.placements import (Partial, Placement, PlacementError, Replicate, Shard,
                                chunk_rule, has_split_rule, mixes_partial_families,
                                normalize_placements)
from dtensor.redistribute.planner import plan, plan_bytes


@dataclass(frozen=True, slots=True)
class Candidate:
    inputs: tuple[tuple[Placement, ...], ...]  # per tensor argument, one per mesh dim
    outputs: tuple[tuple[Placement, ...], ...]  # per output tensor
    moves: tuple[int, ...]  # bytes to move each input into place
    local: str | None = None  # Note [local functions]

    @property
    def cost(self) -> int:
        return sum(self.moves)


@dataclass(frozen=True, slots=True)
class Decision:
    op: OpSpec
    chosen: Candidate
    candidates: tuple[Candidate, ...]  # every feasible one, cheapest first


class ShardingError(ValueError, RuntimeError):
    """No strategy satisfies the op's constraints (pins, in-place arguments). A
    ``RuntimeError`` too, as torch's refusal of an in-place op that would move its target is
    (Note [torch's error types] in dtensor/__init__.py)."""


def per_dim_strategies(op: OpSpec, registry: Registry = REGISTRY) -> list[list[Strategy]]:
    rule = registry.get(op.op)
    if rule is None:
        raise KeyError(op.op)
    return [list(rule(dataclasses.replace(op, mesh_dim=m))) for m in range(len(op.mesh_shape))]


def candidates(op: OpSpec, registry: Registry = REGISTRY, *,
               dispatchable_only: bool = True) -> list[Candidate]:
    """Every valid combination of per-mesh-dim strategies, priced, cheapest first.
    ``dispatchable_only=False`` keeps those Note [no implicit Partial] excludes (the
    soundness harness checks every strategy a rule can return)."""
    tensors = op.tensors()
    found: dict[tuple, Candidate] = {}
    rule = registry.get(op.op)
    held = any(has_split_rule(t.placements) for t in tensors) and rule not in SPLIT_RULE_READERS
    asked = _as_chunks(op) if held else op  # Note [split rules in propagation]
    lifts = held and rule in SPLIT_RULE_AWARE
    tests_pieces = lifts and SPLIT_RULE_AWARE[rule]
    for combo in itertools.product(*per_dim_strategies(asked, registry)):
        ins = tuple(tuple(s.inputs[i] for s in combo) for i in range(len(tensors)))
        outs_n = len(combo[0].outputs) if combo else 0
        outs = tuple(tuple(s.outputs[j] for s in combo) for j in range(outs_n))
        variants = [(ins, outs)]
        if lifts:
            variants += _lifts(tensors, ins, outs, op.mesh_shape, tests_pieces)
        for ins, outs in variants:
            _add_candidate(found, op, tensors, combo, ins, outs, dispatchable_only)
    ordered = list(found.values())
    ordered.sort(key=lambda c: _rank(c, tensors))  # stable: ties keep the rule's order
    return ordered


def _as_chunks(op: OpSpec) -> OpSpec:
    """``op`` with every input's Shards under ``torch.chunk``'s rule: what rules see."""
    def plain(x):
        if isinstance(x, TensorSpec):
            return dataclasses.replace(x, placements=chunk_rule(x.placements))
        if type(x) is tuple:
            return tuple(plain(v) for v in x)
        return x

    return dataclasses.replace(op, args=plain(op.args),
                               kwargs=tuple((k, plain(v)) for k, v in op.kwargs))


def _lifts(tensors: list, ins: tuple, outs: tuple, mesh_shape: tuple[int, ...],
           tests_pieces: bool) -> list[tuple[tuple, tuple]]:
    """The strategy with each mesh dim's Shards under a split rule an input holds there where
    the strategy asks that input for the same dim (Note [split rules in propagation]): one
    variant per choice where inputs hold different rules on one mesh dim."""
    mesh_ndim = len(ins[0]) if ins else 0
    options: list[list[object]] = []
    for m in range(mesh_ndim):
        # a rule is the Shard's cut less its dim: its split rule and block
        held = sorted({(t.placements[m].sizes, t.placements[m].block)
                       for t, want in zip(tensors, ins)
                       if type(t.placements[m]) is Shard and not t.placements[m].is_plain
                       and want[m] == Shard(t.placements[m].dim)}, key=repr)
        options.append(held or [None])
    found = []
    for choice in itertools.product(*options):
        rules = {m: r for m, r in enumerate(choice) if r is not None}
        if rules and (lifted := _lift(tensors, ins, outs, mesh_shape, tests_pieces, rules)):
            found.append(lifted)
    return found


def _lift(tensors: list, ins: tuple, outs: tuple, mesh_shape: tuple[int, ...],
          tests_pieces: bool, rules: dict[int, object]) -> tuple[tuple, tuple] | None:
    """``ins -> outs`` with the Shards of each mesh dim in ``rules`` under its rule; None
    where a piece test the rule made does not carry over (``_as_regular``)."""
    mesh_ndim = len(ins[0])

    def lift(pl: tuple) -> tuple:
        return tuple(Shard(p.dim, *rules[m]) if m in rules and type(p) is Shard else p
                     for m, p in enumerate(pl))

    lifted = tuple(lift(p) for p in ins)
    # the mesh dims whose pieces the rule may have tested: all (tests_pieces), else those a
    # non-sum Partial output reduces (mean needs equal pieces, max non-empty ones)
    tested = set(rules) if tests_pieces else {
        m for m in rules for out in outs
        if isinstance(out[m], Partial) and out[m].reduce_op != "sum"}
    for t, chunked, under_rule in zip(tensors, ins, lifted):
        if chunked == under_rule:
            continue
        only = tuple(under_rule[m] if m in tested else chunked[m] for m in range(mesh_ndim))
        if not _as_regular(t.shape, mesh_shape, chunked, under_rule, only):
            return None
    return lifted, tuple(lift(p) for p in outs)


def _as_regular(shape: tuple[int, ...], mesh_shape: tuple[int, ...], chunked: tuple,
                under_rule: tuple, tested: tuple) -> bool:
    """Whether ``under_rule`` cuts ``shape``, and its pieces on the mesh dims in ``tested``
    (``under_rule`` there, ``chunked`` elsewhere) are equal wherever chunk's are and non-empty
    wherever chunk's are: what rules test of pieces (``even_pieces``, ``no_empty_piece``) then
    holds for the lifted strategy too (Note [split rules in propagation])."""
    if not lays_out(shape, mesh_shape, under_rule):
        return False
    if tested == chunked:
        return True
    coords = list(mesh_coordinates(mesh_shape))
    for d in {p.dim for p in tested if type(p) is Shard and not p.is_plain}:
        a = [local_shape(shape, mesh_shape, chunked, c)[d] for c in coords]
        b = [local_shape(shape, mesh_shape, tested, c)[d] for c in coords]
        if (len(set(a)) == 1 and len(set(b)) > 1) or (min(a) > 0 and min(b) == 0):
            return False
    return True


def _add_candidate(found: dict, op: OpSpec, tensors: list, combo: tuple, ins: tuple,
                   outs: tuple, dispatchable_only: bool) -> None:
    if dispatchable_only and _creates_partial(tensors, ins, outs):
        return
    if any(mixes_partial_families(o) for o in outs):
        return  # e.g. [P(max), P(sum)]: no single value (Note [Mixing Partial ops])
    locals_ = {st.local for st in combo if st.local}
    if len(locals_) > 1:
        return  # two different per-rank computations cannot both run
    local = locals_.pop() if locals_ else None
    try:
        for t, p in zip(tensors, ins):
            normalize_placements(p, t.ndim, len(op.mesh_shape))
            if has_split_rule(p):
                check_layout(t.shape, op.mesh_shape, p)
        moves = tuple(_move_bytes(t.placements, p, op.mesh_shape, t.shape, t.dtype)
                      for t, p in zip(tensors, ins))
    except PlacementError:
        return
    key = (ins, outs, local)
    if key not in found:
        found[key] = Candidate(ins, outs, moves, local)


# Note [no implicit Partial]
# Turning an input into Partial is free here but defers a reduction someone pays later, so a
# strategy may ask for Partial on a mesh dim only where some input already is that Partial
# (then the output inherits it; a Replicate operand is placed on one rank, e.g. P + plain
# tensor), or where the op itself owes that reduction: a contraction over a sharded dim makes
# every output that Partial whatever the bias is, so placing a Replicate bias on one rank
# defers nothing more (addmm with a row-wise weight).
def _creates_partial(tensors: list, ins: tuple, outs: tuple) -> bool:
    """Whether the strategy asks for a Partial that Note [no implicit Partial] rules out."""
    for m in range(len(ins[0]) if ins else 0):
        wanted = {p[m] for p in ins if isinstance(p[m], Partial)}
        if not wanted:
            continue
        held = {t.placements[m] for t in tensors if isinstance(t.placements[m], Partial)}
        if wanted <= held:
            continue
        owed = ({o[m] for o in outs} == wanted and len(wanted) == 1
                and any(isinstance(p[m], Shard) for p in ins)
                and all(t.placements[m] == p[m] or not isinstance(p[m], Partial)
                        or isinstance(t.placements[m], Replicate)
                        for t, p in zip(tensors, ins)))
        if not owed:
            return True
    return False


def _rank(c: Candidate, tensors: list) -> tuple[int, int, int]:
    """Bytes first; then fewer inputs touched at all (a free local slice still copies); then
    fewer Partial outputs (a Partial defers a reduction that someone pays for later)."""
    touched = sum(p != t.placements for p, t in zip(c.inputs, tensors))
    partial = sum(isinstance(x, Partial) for out in c.outputs for x in out)
    return c.cost, touched, partial


def _move_bytes(src: Sequence[Placement], dst: Sequence[Placement], mesh_shape: tuple[int, ...],
                shape: tuple[int, ...], dtype) -> int:
    if tuple(src) == tuple(dst):
        return 0
    itemsize = _itemsize(dtype)
    shape = hints(shape)  # a cost chooses among right answers: no guard (Note [symbolic sizes])
    return plan_bytes(plan(src, dst, mesh_shape, shape, itemsize), mesh_shape, shape, itemsize)


def _itemsize(dtype) -> int:
    import torch

    return torch.empty((), dtype=dtype).element_size()


@shape_cache(maxsize=65536)
def decide(op: OpSpec, fixed: frozenset[int] = frozenset(),
           out_shapes: tuple[tuple[int, ...], ...] | None = None) -> Decision:
    """The cheapest candidate whose inputs listed in ``fixed`` (pinned tensors, in-place
    targets) keep their placements; raises ``ShardingError`` naming the alternatives.
    ``out_shapes``, where known, drops candidates whose outputs' explicit split sizes do not
    cut the output (Note [split rules in propagation])."""
    all_candidates = candidates(op)
    if out_shapes is not None:
        all_candidates = [c for c in all_candidates if _outputs_fit(c, out_shapes, op.mesh_shape)]
    tensors = op.tensors()
    feasible = [c for c in all_candidates
                if all(c.inputs[i] == tensors[i].placements for i in fixed)]
    if not all_candidates:
        described = ", ".join(f"input {i} {tuple(t.shape)} stride {tuple(t.stride)} "
                              f"{_fmt(t.placements)}" for i, t in enumerate(tensors))
        raise ShardingError(f"{op.op}: its sharding rule offers no strategy for {described} "
                            f"(see the rule's Note in dtensor/ops)")
    if not feasible:
        alternatives = "\n  ".join(_fmt_candidate(c) for c in all_candidates[:8]) or "(none)"
        fixed_txt = ", ".join(f"input {i} {_fmt(tensors[i].placements)}" for i in sorted(fixed))
        raise ShardingError(
            f"{op.op}: no strategy keeps {fixed_txt} in place (pinned or written in place); "
            f"feasible strategies would move them:\n  {alternatives}")
    return Decision(op, feasible[0], tuple(feasible))


def _outputs_fit(c: Candidate, out_shapes: tuple, mesh_shape: tuple[int, ...]) -> bool:
    return all(lays_out(shape, mesh_shape, p) for p, shape in zip(c.outputs, out_shapes))


def _fmt(p: Sequence[Placement]) -> str:
    return "[" + ",".join(str(x) for x in p) + "]"


def _fmt_candidate(c: Candidate) -> str:
    ins = " ".join(_fmt(p) for p in c.inputs)
    outs = " ".join(_fmt(p) for p in c.outputs)
    return f"{ins} -> {outs}  ({c.cost} bytes moved)"


format_candidate = _fmt_candidate
