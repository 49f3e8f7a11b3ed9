"""Ops that act on each rank's piece as it is: aliases, copies and the ``*_like`` factories."""

from __future__ import annotations

import torch

from dtensor.ops.registry import OpSpec, Strategy, sharding_rule
from dtensor.placements import Partial, Replicate, Shard

aten = torch.ops.aten


def _same(op: OpSpec) -> list[Strategy]:
    """Any placement in, the same out: the op keeps every element where it is."""
    t = op.tensors()[0]
    options = [Replicate()] + [Shard(d) for d in range(t.ndim)]
    options += [Partial(k) for k in ("sum", "avg", "max", "min")]
    return [Strategy((p,), (p,)) for p in options]


sharding_rule(aten.detach.default, aten.alias.default, aten.clone.default,
              aten.contiguous.default, aten.lift_fresh.default)(_same)


@sharding_rule(aten.zeros_like.default, aten.ones_like.default, aten.empty_like.default,
               aten.full_like.default)
def like(op: OpSpec) -> list[Strategy]:
    """A fresh tensor shaped like the input: sharded like it, never Partial (the fill value
    is the value, not an addend)."""
    t = op.tensors()[0]
    options = [Replicate()] + [Shard(d) for d in range(t.ndim)]
    out = [Strategy((p,), (p,)) for p in options]
    out += [Strategy((Partial(k),), (Replicate(),)) for k in ("sum", "avg", "max", "min")]
    return out
