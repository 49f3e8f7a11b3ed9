"""Ops that act on each rank's piece as it is: aliases, copies and the ``*_like`` factories."""

from __future__ import annotations

import torch

from dtensor.ops.registry import OpSpec, Strategy, sharding_rule, takes_split_rules
from dtensor.placements import REDUCE_OPS, Partial, Placement, Replicate, Shard

aten = torch.ops.aten


@takes_split_rules  # Note [split rules in propagation]
def _same(op: OpSpec) -> list[Strategy]:
    """Any placement in, the same out: the op keeps every element where it is."""
    t = op.tensors()[0]
    options = [Replicate()] + [Shard(d) for d in range(t.ndim)]
    options += [Partial(k) for k in REDUCE_OPS]
    return [Strategy((p,), (p,)) for p in options]


sharding_rule(aten.detach.default, aten.alias.default, aten.clone.default,
              aten.contiguous.default, aten.lift_fresh.default)(_same)


@sharding_rule(aten.zeros_like.default, aten.ones_like.default, aten.empty_like.default,
               aten.full_like.default)
@takes_split_rules  # Note [split rules in propagation]
def like(op: OpSpec) -> list[Strategy]:
    """A fresh tensor shaped like the input: sharded like it, never Partial (the fill value
    is the value, not an addend)."""
    t = op.tensors()[0]
    options = [Replicate()] + [Shard(d) for d in range(t.ndim)]
    out = [Strategy((p,), (p,)) for p in options]
    out += [Strategy((Partial(k),), (Replicate(),)) for k in REDUCE_OPS]
    return out


@sharding_rule(aten.new_zeros.default, aten.new_ones.default, aten.new_empty.default,
               aten.new_full.default, aten.new_empty_strided.default)
def new_factory(op: OpSpec) -> list[Strategy]:
    """``x.new_zeros(size)``: ``x`` only lends dtype and device, so it stays where it is. The
    output is a fresh constant: whole on every rank, or cut into pieces along any dim (each
    rank is handed its piece's size, Note [global size arguments]). Never Partial."""
    x = op.tensors()[0]
    here = x.placements[op.mesh_dim]
    size = tuple(op.arg(1, "size"))
    options: list[Placement] = [Replicate()] + [Shard(d) for d in range(len(size))]
    if isinstance(here, Shard) and size == x.shape:
        # shaped like x (autograd accumulating a gradient it must restride): it is filled
        # from x-like values next, so x's own layout first (all options cost nothing here)
        options.remove(here)
        options.insert(0, here)
    return [Strategy((here,), (p,)) for p in options]


@sharding_rule(aten._local_scalar_dense.default)
def local_scalar(op: OpSpec) -> list[Strategy]:
    """``item()``: a Python number, so every rank needs the one element whole (a Shard is
    gathered, a Partial reduced); the output is no tensor, so it has no placement."""
    return [Strategy((Replicate(),), ())]


@sharding_rule(aten.fill_.Scalar, aten.fill.Scalar, aten.zero_.default)
@takes_split_rules  # Note [split rules in propagation]
def fill(op: OpSpec) -> list[Strategy]:
    """Every element becomes ``v``: each piece is filled where it is. Of a Partial, n copies
    of ``v`` reduce to ``v`` under avg/max/min, and n zeros to 0 under every op (``zero_``
    keeps sum and product too); sum and product of n copies of another ``v`` are not ``v``."""
    t = op.tensors()[0]
    value = 0 if op.op is aten.zero_.default else op.arg(1, "value")
    out = [Strategy((Replicate(),), (Replicate(),))]
    out += [Strategy((Shard(d),), (Shard(d),)) for d in range(t.ndim)]
    kinds = [k for k in REDUCE_OPS if value == 0 or k in ("avg", "max", "min")]
    exact = t.dtype.is_floating_point or t.dtype.is_complex
    return out + [Strategy((Partial(k),), (Partial(k),)) for k in kinds if k != "avg" or exact]
