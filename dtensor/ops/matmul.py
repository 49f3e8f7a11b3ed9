"""The matmul family: one einsum string per op, one strategy function for all of them.

For one mesh dim, an einsum ``"mk,kn->mn"`` can run on matching pieces in these ways:

- all Replicate -> Replicate;
- a letter kept in the output (batch or free: m, n, b) sharded on every operand having it,
  the others Replicate -> Shard on that letter's output dim: every operand's chunk of the
  letter is the same ``torch.chunk`` piece (same size), so each rank computes exactly its
  chunk of the output, uneven or empty chunks included;
- a contracted letter (k) sharded on every operand having it -> P(sum): the sum over k splits
  into one partial sum per rank;
- P(sum) or P(avg) on one operand, the others Replicate -> the same Partial: the product is
  linear in each operand, A (B1 + B2) = A B1 + A B2. P(max)/P(min) are not: a negative factor
  flips the order. Two Partial operands are not either: (A1 + A2)(B1 + B2) has cross terms.

Note [bias of the add* ops]
``addmm(bias, a, b) = beta * bias + alpha * (a @ b)`` with ``bias`` broadcast to the output.
The bias follows the product's placement: sharded on the dims aligned with the output's
sharded dim (Replicate where it broadcasts), Replicate when the product is Replicate, and the
product's own Partial when the product is Partial: P(sum) + R is not P(sum), R would be added
once per rank; P(sum) + P(sum) is, sum(b_i) + sum(p_i) = sum(b_i + p_i). A Partial bias with a
Replicate product is unsound for the same reason (the product is added once per rank).

Note [nested shards]
A tensor dim sharded on mesh dims m0 < m1 is chunked by m0, then each chunk by m1. A rule asked
about mesh dim m does not know whether earlier mesh dims split the same dim, so where it needs
even chunks it asks for divisibility by the product of the mesh sizes up to m: then every
nested chunk is even too.

(Attention has its own family: dtensor/ops/attention.py.)
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from dtensor.layout import chunk_bounds
from dtensor.ops.registry import OpSpec, Strategy, TensorSpec, sharding_rule, takes_split_rules
from dtensor.placements import Partial, Placement, Replicate, Shard

aten = torch.ops.aten

def _linear_kinds(operands: Sequence[TensorSpec]) -> tuple[str, ...]:
    """The reductions a product is linear in; P(avg) only where the mean does not round."""
    exact = all(t.dtype.is_floating_point or t.dtype.is_complex for t in operands)
    return ("sum", "avg") if exact else ("sum",)


def _parse(equation: str) -> tuple[list[str], str]:
    lhs, out = equation.split("->")
    return lhs.split(","), out


def einsum_strategies(equation: str, operands: Sequence[TensorSpec]) -> list[Strategy]:
    """Every strategy of one mesh dim for the einsum ``equation`` over ``operands``.

    >>> a = TensorSpec((4, 3), (3, 1), torch.float32, (Replicate(),))
    >>> [str(s) for s in einsum_strategies("mk,kn->mn", [a, a])][:2]
    ['Strategy(R,R->R)', 'Strategy(S(0),R->S(0))']
    """
    ins, out = _parse(equation)
    if len(ins) != len(operands):
        raise ValueError(f"einsum {equation!r} has {len(ins)} operands, got {len(operands)}")
    n = len(operands)
    found = [Strategy((Replicate(),) * n, (Replicate(),))]
    letters = list(dict.fromkeys("".join(ins)))
    for letter in letters:
        shards = tuple(Shard(s.index(letter)) if letter in s else Replicate() for s in ins)
        # a kept letter splits the output; a contracted one splits the sum: P(sum)
        result: Placement = Shard(out.index(letter)) if letter in out else Partial("sum")
        found.append(Strategy(shards, (result,)))
    for kind in _linear_kinds(operands):
        for i in range(n):
            # A (B1 + B2) = A B1 + A B2: linear in each operand while the others are fixed
            found.append(Strategy(tuple(Partial(kind) if j == i else Replicate()
                                        for j in range(n)), (Partial(kind),)))
    return found


def _with_bias(bias: TensorSpec, out_shape: Sequence[int], strategies: list[Strategy],
               operands: Sequence[TensorSpec], parts: int) -> list[Strategy]:
    """Note [bias of the add* ops]: the bias takes the product's placement, aligned."""
    lead = len(out_shape) - bias.ndim
    broadcast = any(size == 1 and out_shape[lead + d] != 1 for d, size in enumerate(bias.shape))
    found = []
    for s in strategies:
        # the add* kernels return a size-1 broadcast bias's shape, not the output's, when a
        # rank's product is empty (addmv(bias(1,), rows(0, k)) is (1,)): no such rank may exist
        if broadcast and any(isinstance(p, Shard) and _has_empty_piece(t.shape[p.dim], parts)
                             for p, t in zip(s.inputs, operands)):
            continue
        p = s.outputs[0]
        b: Placement = p
        if isinstance(p, Shard):
            d = p.dim - (len(out_shape) - bias.ndim)  # bias dims align to the right
            # a broadcast (size-1 or missing) bias dim is the same on every rank's chunk
            b = Shard(d) if d >= 0 and bias.shape[d] == out_shape[p.dim] else Replicate()
        found.append(Strategy((b,) + s.inputs, s.outputs))
    return found


def _has_empty_piece(size: int, parts: int) -> bool:
    return any(a == b for a, b in (chunk_bounds(size, parts, i) for i in range(parts)))


# op -> (einsum of the product, whether the first tensor argument is a broadcast bias)
EINSUMS = {
    aten.mm.default: ("mk,kn->mn", False),
    aten.bmm.default: ("bmk,bkn->bmn", False),
    aten.mv.default: ("mk,k->m", False),
    aten.dot.default: ("k,k->", False),
    aten.addmm.default: ("mk,kn->mn", True),
    aten.baddbmm.default: ("bmk,bkn->bmn", True),
    aten.addbmm.default: ("bmk,bkn->mn", True),  # sums over the batch too: b is contracted
    aten.addmv.default: ("mk,k->m", True),
    aten.addr.default: ("m,n->mn", True),
}


@sharding_rule(*(op for op, (_, bias) in EINSUMS.items() if not bias))
@takes_split_rules  # Note [split rules in propagation]
def einsum_rule(op: OpSpec) -> list[Strategy]:
    equation, has_bias = EINSUMS[op.op]
    tensors = op.tensors()
    if not has_bias:
        return einsum_strategies(equation, tensors)
    return biased_einsum_rule(op)


# a broadcast bias needs every product piece non-empty (_with_bias): under a split rule too
@sharding_rule(*(op for op, (_, bias) in EINSUMS.items() if bias))
@takes_split_rules(tests_pieces=True)  # Note [split rules in propagation]
def biased_einsum_rule(op: OpSpec) -> list[Strategy]:
    equation, _ = EINSUMS[op.op]
    tensors = op.tensors()
    bias, operands = tensors[0], tensors[1:]
    ins, out = _parse(equation)
    sizes = {c: t.shape[i] for s, t in zip(ins, operands) for i, c in enumerate(s)}
    parts = math.prod(op.mesh_shape[:op.mesh_dim + 1])  # Note [nested shards]
    return _with_bias(bias, [sizes[c] for c in out], einsum_strategies(equation, operands),
                      operands, parts)

