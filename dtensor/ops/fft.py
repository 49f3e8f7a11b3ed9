"""FFT: _fft_r2c, _fft_c2r, _fft_c2c (every torch.fft function reaches dispatch as these, after
padding or trimming its input with constant_pad_nd / slice).

A transform along ``dim`` mixes every element of each line along those dims and nothing
across lines, so every dim NOT transformed is independent (Note [independent dims] in
_common): sharded, each rank transforms its own lines, and the output (same rank; only the
last transformed dim changes size for r2c/c2r) is sharded on the same dim. Transformed dims
are Replicate. The MKL kernels fail on an empty tensor, so a dim shards only where no piece
is empty.

The DFT is linear, F(x1 + x2) = F(x1) + F(x2) (c2r too: it reads the half-spectrum linearly
over the reals), so P(sum) passes through (Note [linear in one argument]); P(avg) of the
complex side is refused by the runtime, so P(sum) only.
"""

from __future__ import annotations

import torch

from dtensor.ops._common import dim_of, independent_dims, linear_partials
from dtensor.ops.registry import OpSpec, Strategy, sharding_rule
from dtensor.placements import Partial

aten = torch.ops.aten


@sharding_rule(aten._fft_r2c.default, aten._fft_c2r.default, aten._fft_c2c.default)
def fft(op: OpSpec) -> list[Strategy]:
    """``(x, dim, normalization, onesided | last_dim_size | forward)``."""
    x = op.tensors()[0]
    transformed = {dim_of(d, x.ndim) for d in op.arg(1, "dim")}
    free = [d for d in range(x.ndim) if d not in transformed]
    return (independent_dims(op, free, 1, nonempty=True)
            + linear_partials(op, 0, (Partial("sum"),)))
