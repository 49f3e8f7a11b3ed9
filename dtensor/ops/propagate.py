"""From one-mesh-dim strategies to a decision: product over mesh dims, priced, cached.

Note [choice by cost]
Every combination of the rule's per-mesh-dim strategies is a candidate; a candidate's cost is
the bytes the planner needs to move each input from its current placements to the ones the
candidate requires (``plan_bytes``, the proven-minimal plan). The cheapest wins; ties go to the
candidate touching fewer inputs, then to fewer Partial outputs, then to the rule's own order.
Decisions are cached per (op, input specs, arguments, pins), so steady-state dispatch does no
rule work.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

from dtensor.ops.registry import REGISTRY, OpSpec, Registry, Strategy
from dtensor.placements import (Partial, Placement, PlacementError, Replicate, Shard,
                                mixes_partial_families, normalize_placements)
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
    for combo in itertools.product(*per_dim_strategies(op, registry)):
        ins = tuple(tuple(s.inputs[i] for s in combo) for i in range(len(tensors)))
        outs_n = len(combo[0].outputs) if combo else 0
        outs = tuple(tuple(s.outputs[j] for s in combo) for j in range(outs_n))
        if dispatchable_only and _creates_partial(tensors, ins, outs):
            continue
        if any(mixes_partial_families(o) for o in outs):
            continue  # e.g. [P(max), P(sum)]: no single value (Note [Mixing Partial ops])
        locals_ = {st.local for st in combo if st.local}
        if len(locals_) > 1:
            continue  # two different per-rank computations cannot both run
        local = locals_.pop() if locals_ else None
        try:
            for t, p in zip(tensors, ins):
                normalize_placements(p, t.ndim, len(op.mesh_shape))
            moves = tuple(_move_bytes(t.placements, p, op.mesh_shape, t.shape, t.dtype)
                          for t, p in zip(tensors, ins))
        except PlacementError:
            continue
        key = (ins, outs, local)
        if key not in found:
            found[key] = Candidate(ins, outs, moves, local)
    ordered = list(found.values())
    ordered.sort(key=lambda c: _rank(c, tensors))  # stable: ties keep the rule's order
    return ordered


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
    return plan_bytes(plan(src, dst, mesh_shape, shape, itemsize), mesh_shape, shape, itemsize)


def _itemsize(dtype) -> int:
    import torch

    return torch.empty((), dtype=dtype).element_size()


@lru_cache(maxsize=65536)
def decide(op: OpSpec, fixed: frozenset[int] = frozenset()) -> Decision:
    """The cheapest candidate whose inputs listed in ``fixed`` (pinned tensors, in-place
    targets) keep their placements; raises ``ShardingError`` naming the alternatives."""
    all_candidates = candidates(op)
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


def _fmt(p: Sequence[Placement]) -> str:
    return "[" + ",".join(str(x) for x in p) + "]"


def _fmt_candidate(c: Candidate) -> str:
    ins = " ".join(_fmt(p) for p in c.inputs)
    outs = " ".join(_fmt(p) for p in c.outputs)
    return f"{ins} -> {outs}  ({c.cost} bytes moved)"


format_candidate = _fmt_candidate
