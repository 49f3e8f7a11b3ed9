"""Real and complex views of one another: view_as_real, view_as_complex; and the elementwise
constructors complex(real, imag), polar(abs, angle), which torch does not tag pointwise;
the lazy conjugate and negative views _conj, _neg_view.

Note [lazy conj on a piece]
``_conj`` returns a view with the conj bit set. Run on a piece, the bit lands on the local
tensor but not on the DTensor around it, so an op that reads raw storage (view_as_real)
would see the unconjugated values: a wrong gradient end to end. So each rank materializes
the conjugate instead (local function ``resolved``: conj_physical / neg): the same values, in
a fresh tensor. What is lost is aliasing: a write through the result does not reach x.

``view_as_real`` appends a dim of 2 (real, imaginary) to a complex tensor; ``view_as_complex``
folds that last dim of 2 back. Every other dim is carried through in place, so it may be
sharded (a rank's rows of the complex tensor are its rows of the real view); the size-2 dim
is Replicate. Both are linear over the reals: P(sum) passes (P(avg) of the complex side is
refused by the runtime). complex/polar shard like any elementwise op with broadcasting;
complex(re, im) is linear in the pair, so two P(sum) give P(sum); polar is not linear.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from dtensor.ops._common import R, broadcast_shards
from dtensor.ops.registry import OpSpec, Strategy, local_function, sharding_rule
from dtensor.placements import Partial, Shard

aten = torch.ops.aten
_SUM = Partial("sum")


def _carried(ndim: int) -> list[Strategy]:
    found = [Strategy((R,), (R,))] + [Strategy((Shard(d),), (Shard(d),)) for d in range(ndim)]
    return found + [Strategy((_SUM,), (_SUM,))]


@sharding_rule(aten.view_as_real.default)
def view_as_real(op: OpSpec) -> list[Strategy]:
    """(...) complex -> (..., 2) real: every input dim carried."""
    return _carried(op.tensors()[0].ndim)


@sharding_rule(aten.view_as_complex.default)
def view_as_complex(op: OpSpec) -> list[Strategy]:
    """(..., 2) real -> (...) complex: every dim but the last carried."""
    return _carried(op.tensors()[0].ndim - 1)


@sharding_rule(aten.complex.default)
def complex_(op: OpSpec) -> list[Strategy]:
    """complex(r1 + r2, i1 + i2) = complex(r1, i1) + complex(r2, i2)."""
    found = broadcast_shards(op)
    if all(t.ndim > 0 for t in op.tensors()):
        found.append(Strategy((_SUM, _SUM), (_SUM,)))
    return found


sharding_rule(aten.polar.default)(broadcast_shards)



@sharding_rule(aten._conj.default, aten._neg_view.default)
def lazy_view(op: OpSpec) -> list[Strategy]:
    """Elementwise and additive, conj(x1 + x2) = conj(x1) + conj(x2): any Shard, P(sum);
    run as ``resolved`` (Note [lazy conj on a piece])."""
    return [dataclasses.replace(s, local="resolved") for s in _carried(op.tensors()[0].ndim)]


@local_function("resolved")
def _resolved(op: Any, args: tuple, kwargs: dict, boxes: Sequence[object]) -> torch.Tensor:
    x = args[0]
    return torch.conj_physical(x) if op is aten._conj.default else torch.neg(x)


@sharding_rule(aten._conj_physical.default)
def conj_physical(op: OpSpec) -> list[Strategy]:
    """The materialized conjugate: elementwise and additive, any Shard and P(sum)."""
    return _carried(op.tensors()[0].ndim)
