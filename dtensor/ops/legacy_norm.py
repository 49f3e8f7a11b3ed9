"""The legacy ``aten.norm`` overloads (``torch.norm`` now lowers to linalg_vector_norm, but
pairwise_distance and the triplet losses still call ``norm.ScalarOpt_dim``).

``norm(x, p, dim, keepdim)`` is the vector p-norm over ``dim``: the same reduction as
``linalg_vector_norm`` (dtensor/ops/reductions.py), with the same table of which p turns a
sharded reduced dim into which Partial (|x|_1, |x|_0: sums; |x|_inf, |x|_-inf: max/min of
non-empty pieces; other p need the reduced dim whole: the root of a sum is not a sum of
roots). Dims not reduced shard; no Partial passes through (|a + b| != |a| + |b|).
"""

from __future__ import annotations

import torch

from dtensor.ops.reductions import _NORM_ORDS, reduction_strategies
from dtensor.ops.registry import OpSpec, Strategy, sharding_rule

aten = torch.ops.aten


@sharding_rule(aten.norm.Scalar, aten.norm.ScalarOpt_dim, aten.norm.ScalarOpt_dim_dtype,
               aten.norm.ScalarOpt_dtype)
def norm(op: OpSpec) -> list[Strategy]:
    """``norm(x, p=2, [dim, keepdim=False], [dtype])``; no dim (or an empty one): all dims."""
    x = op.tensors()[0]
    p = op.arg(1, "p", 2)
    over, needs = _NORM_ORDS.get(float(2 if p is None else p), (None, ""))
    has_dim = "dim" in [a.name for a in op.op._schema.arguments]
    dim = op.arg(2, "dim") if has_dim else None
    if not dim:
        reduced = frozenset(range(x.ndim))
    else:
        reduced = frozenset(d % x.ndim for d in dim) if x.ndim else frozenset()
    keepdim = bool(op.arg(3, "keepdim", False)) if has_dim else False
    return reduction_strategies(op, x, reduced, keepdim, over, needs, (), 1)
