"""Sharding rules on inputs held under split rules other than ``torch.chunk``'s (Note [split
rules in propagation] in dtensor/ops/propagate.py): every candidate is sound (the soundness
harness, rank by rank against one device), families marked ``takes_split_rules`` keep the
input's rule with no move, and the others see chunk pieces only."""

from __future__ import annotations

import pytest
import torch

from dtensor.ops.propagate import candidates, decide
from dtensor.ops.registry import (REGISTRY, SPLIT_RULE_AWARE, SPLIT_RULE_READERS, OpSpec,
                                  TensorSpec)
from dtensor.ops.soundness import check_candidate
from dtensor.placements import Partial, Replicate, Shard, fmt_placements, has_split_rule
from tests.support.cases import case_id

aten = torch.ops.aten
R = Replicate()
EXPLICIT = Shard(0, sizes=(3, 5, 0, 2))  # 10 rows over 4 ranks, one empty
BALANCED = Shard(0, sizes="balanced")


def _spec(x: torch.Tensor, placements: tuple) -> TensorSpec:
    return TensorSpec(tuple(x.shape), tuple(x.stride()), x.dtype, placements)


def _op_spec(op, args: tuple, placements: list, mesh: tuple) -> OpSpec:
    """The call with its tensors (in order) held under ``placements``; others Replicate."""
    it = iter(placements)

    def describe(a):
        if isinstance(a, torch.Tensor):
            return _spec(a, next(it, (R,) * len(mesh)))
        return a

    return OpSpec(op, tuple(describe(a) for a in args), (), mesh)


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# (op, args, placements of its tensors, mesh, whether the chosen strategy keeps the input's
# rule: None where the family takes split rules but this one cannot be kept free)
ONE_D = (4,)
CASES = [
    (aten.add.Tensor, (_x(10, 6), _x(10, 6, seed=1)), [(EXPLICIT,), (EXPLICIT,)], ONE_D, True),
    (aten.mul.Tensor, (_x(10, 6), _x(6)), [(EXPLICIT,)], ONE_D, True),
    (aten.mul.Tensor, (_x(10, 6), _x(10, 6, seed=1)), [(EXPLICIT,), (R,)], ONE_D, True),
    (aten.gelu.default, (_x(10, 6),), [(BALANCED,)], ONE_D, True),
    (aten.tanh_backward.default, (_x(10, 6), _x(10, 6, seed=1)), [(R,), (EXPLICIT,)], ONE_D,
     True),
    (aten.mm.default, (_x(10, 6), _x(6, 3)), [(EXPLICIT,)], ONE_D, True),
    (aten.mm.default, (_x(6, 10), _x(10, 3)), [(Shard(1, EXPLICIT.sizes),), (EXPLICIT,)],
     ONE_D, True),
    (aten.bmm.default, (_x(10, 2, 3), _x(10, 3, 4)), [(EXPLICIT,), (EXPLICIT,)], ONE_D, True),
    (aten._softmax.default, (_x(10, 6), 1, False), [(EXPLICIT,)], ONE_D, True),
    (aten._log_softmax.default, (_x(10, 6), 1, False), [(BALANCED,)], ONE_D, True),
    (aten.sum.dim_IntList, (_x(10, 6), [1]), [(EXPLICIT,)], ONE_D, True),
    (aten.sum.dim_IntList, (_x(10, 6), [0]), [(EXPLICIT,)], ONE_D, True),
    # mean over a dim cut unequally needs the pieces whole, under chunk's rule too
    (aten.mean.dim, (_x(10, 6), [0]), [(EXPLICIT,)], ONE_D, None),
    (aten.amax.default, (_x(10, 6), [0]), [(BALANCED,)], ONE_D, True),
    # chunk's pieces of 8 over 4 are equal and non-empty, these are neither: the rule's
    # P(avg) / P(max) must not be lifted onto them (Note [split rules in propagation])
    (aten.mean.dim, (_x(8, 6), [0]), [(Shard(0, sizes=(1, 4, 0, 3)),)], ONE_D, None),
    (aten.amax.default, (_x(8, 6), [0]), [(Shard(0, sizes=(1, 4, 0, 3)),)], ONE_D, None),
    (aten.max.dim, (_x(8, 6), 0), [(Shard(0, sizes=(2, 2, 0, 4)),)], ONE_D, None),
    (aten.t.default, (_x(10, 6),), [(EXPLICIT,)], ONE_D, True),
    (aten.transpose.int, (_x(10, 6, 2), 0, 2), [(EXPLICIT,)], ONE_D, True),
    (aten.permute.default, (_x(10, 6, 2), [2, 0, 1]), [(BALANCED,)], ONE_D, True),
    (aten.unsqueeze.default, (_x(10, 6), 0), [(EXPLICIT,)], ONE_D, True),
    (aten.native_layer_norm.default, (_x(10, 6), [6], _x(6), _x(6, seed=2), 1e-5),
     [(EXPLICIT,)], ONE_D, True),
    (aten.clone.default, (_x(10, 6),), [(EXPLICIT,)], ONE_D, True),
    (aten.zeros_like.default, (_x(10, 6),), [(BALANCED,)], ONE_D, True),
    (aten._to_copy.default, (_x(10, 6),), [(EXPLICIT,)], ONE_D, True),
    # a 2-D mesh: the rule on one mesh dim, chunk or another rule on the other
    (aten.add.Tensor, (_x(10, 6), _x(10, 6, seed=1)),
     [(Shard(0, sizes=(7, 3)), Shard(1)), (Shard(0, sizes=(7, 3)), Shard(1))], (2, 2), True),
    (aten.mm.default, (_x(10, 6), _x(6, 8)),
     [(Shard(0, sizes=(7, 3)), R), (R, Shard(1, sizes="balanced"))], (2, 2), True),
    # nested: both mesh dims cut dim 0, the inner one each outer piece
    (aten.mul.Tensor, (_x(10, 6), _x(10, 6, seed=1)),
     [(BALANCED, BALANCED), (BALANCED, BALANCED)], (2, 2), True),
    # foreach ops read each list position's own rule (``reads``): no lifting, kept as held
    (aten._foreach_add.List, ([_x(10, 6), _x(8)], [_x(10, 6, seed=1), _x(8, seed=1)]),
     [(EXPLICIT,), (Shard(0, sizes=(0, 0, 4, 4)),), (EXPLICIT,), (Shard(0, sizes=(0, 0, 4, 4)),)],
     ONE_D, True),
    (aten._foreach_mul_.Scalar, ([_x(10, 6), _x(8)], 0.5),
     [(BALANCED,), (Shard(0, sizes=(0, 0, 4, 4)),)], ONE_D, True),
    # an inf-norm over pieces some of which are empty: no P(max) (it has no identity)
    (aten._foreach_norm.Scalar, ([_x(8), _x(10)], float("inf")),
     [(Shard(0, sizes=(0, 0, 4, 4)),), (EXPLICIT,)], ONE_D, None),
    # views keep a split rule where every piece stays one box (Note [views of split rules])
    (aten.view.default, (_x(12, 4), [6, 2, 4]), [(Shard(0, sizes=(6, 2, 2, 2)),)], ONE_D, True),
    (aten.view.default, (_x(6, 2, 4), [12, 4]), [(Shard(0, sizes=(3, 1, 1, 1)),)], ONE_D, True),
    (aten.view.default, (_x(12, 4), [48]), [(BALANCED,)], ONE_D, True),
    (aten.view.default, (_x(10, 6), [10, 3, 2]), [(EXPLICIT,)], ONE_D, True),
    # an odd piece (3 rows) cannot hold whole pairs: the input moves
    (aten.view.default, (_x(10, 6), [5, 2, 6]), [(EXPLICIT,)], ONE_D, None),
    (aten.view.default, (_x(12, 4), [6, 2, 4]), [(BALANCED, BALANCED)], (2, 2), None),  # nested
    # families that see chunk pieces only: the input moves, the result is still right
    (aten.cat.default, ([_x(10, 6), _x(10, 6, seed=1)], 1), [(EXPLICIT,), (EXPLICIT,)], ONE_D,
     False),
    (aten.flip.default, (_x(10, 6), [0]), [(EXPLICIT,)], ONE_D, False),
]


def _case_id(case) -> str:
    op, args, placements, mesh, _ = case
    return (f"{case_id(op, args)}:{'+'.join(fmt_placements(p) for p in placements)}"
            f"@mesh{mesh}")


def _flat_placements(op, args, placements):
    """``placements`` per tensor in flattening order (a tensor list counts each tensor)."""
    out, it = [], iter(placements)
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(next(it, None))
        elif isinstance(a, list):
            out.extend(next(it, None) for v in a if isinstance(v, torch.Tensor))
    return out


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_every_candidate_is_sound_and_the_rule_is_kept_where_it_can_be(case):
    op, args, placements, mesh, keeps = case
    flat = _flat_placements(op, args, placements)
    spec = _op_spec_flat(op, args, flat, mesh)
    found = candidates(spec, dispatchable_only=False)
    assert found, "no candidate"
    unsound = []
    for c in found:
        reason = check_candidate(op, args, {}, c, mesh)
        if reason:
            unsound.append(f"{' '.join(map(fmt_placements, c.inputs))} -> "
                           f"{' '.join(map(fmt_placements, c.outputs))}: {reason}")
    assert not unsound, "\n".join(unsound)
    chosen = candidates(spec)[0]
    aware = REGISTRY.get(op) in SPLIT_RULE_AWARE or REGISTRY.get(op) in SPLIT_RULE_READERS
    assert aware == (keeps is not False)
    if REGISTRY.get(op) in SPLIT_RULE_READERS and keeps is None:
        assert not any(has_split_rule(p) for p in chosen.outputs), chosen
    if keeps:  # the input stays where it is: nothing moves
        assert chosen.cost == 0, f"{chosen}"
        assert any(has_split_rule(p) for p in chosen.inputs)
    elif keeps is False:  # rules see chunk pieces: no candidate claims a split rule
        assert not any(has_split_rule(p) for c in found for p in c.inputs + c.outputs)


def _op_spec_flat(op, args, flat, mesh):
    it = iter(flat)
    none = (R,) * len(mesh)

    def describe(a):
        if isinstance(a, torch.Tensor):
            return _spec(a, next(it) or none)
        if isinstance(a, list):
            return tuple(describe(v) for v in a)
        return a

    return OpSpec(op, tuple(describe(a) for a in args), (), mesh)


def test_decide_drops_candidates_whose_sizes_do_not_cut_the_output():
    spec = _op_spec(aten.add.Tensor, (_x(10, 6), _x(10, 6)), [(EXPLICIT,), (EXPLICIT,)], ONE_D)
    assert decide(spec, frozenset(), ((10, 6),)).chosen.outputs == ((EXPLICIT,),)
    # told the output has 9 rows (as if the op cut one), (3, 5, 0, 2) cannot lay it out
    chosen = decide(spec, frozenset(), ((9, 6),)).chosen
    assert not has_split_rule(chosen.outputs[0]) and chosen.cost > 0


def test_two_inputs_under_different_rules_meet_under_one():
    spec = _op_spec(aten.add.Tensor, (_x(10, 6), _x(10, 6)), [(EXPLICIT,), (BALANCED,)], ONE_D)
    chosen = candidates(spec)[0]
    # one of them moves (an all_to_all of the rows it lacks), the other stays
    assert chosen.cost > 0 and 0 in chosen.moves
    assert chosen.outputs[0][0] in (EXPLICIT, BALANCED)


def test_partial_inputs_still_combine_with_a_split_rule():
    spec = _op_spec(aten.add.Tensor, (_x(10, 6), _x(10, 6)), [(Partial(),), (EXPLICIT,)], ONE_D)
    for c in candidates(spec, dispatchable_only=False):
        assert check_candidate(aten.add.Tensor, (_x(10, 6), _x(10, 6)), {}, c, ONE_D) is None
