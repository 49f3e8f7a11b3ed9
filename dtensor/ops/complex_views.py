"""Real and complex views of one another: view_as_real, view_as_complex; and the elementwise
constructors complex(real, imag), polar(abs, angle), which torch does not tag pointwise.
(The lazy ``_conj`` view has no rule yet: its conj bit lives on the local piece, not on the
DTensor, and a rule run on pieces gave a wrong gradient end to end.)

``view_as_real`` appends a dim of 2 (real, imaginary) to a complex tensor; ``view_as_complex``
folds that last dim of 2 back. Every other dim is carried through in place, so it may be
sharded (a rank's rows of the complex tensor are its rows of the real view); the size-2 dim
is Replicate. Both are linear over the reals: P(sum) passes (P(avg) of the complex side is
refused by the runtime). complex/polar shard like any elementwise op with broadcasting;
complex(re, im) is linear in the pair, so two P(sum) give P(sum); polar is not linear.
"""

from __future__ import annotations

import torch

from dtensor.ops._common import R, broadcast_shards
from dtensor.ops.registry import OpSpec, Strategy, sharding_rule
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

