"""Pairwise distances within one set of rows: ``_pdist_forward`` and ``_pdist_backward``
(``F.pdist``). (Distances between two sets, ``_cdist_forward``, live in linalg.)

Note [pdist over features]
``_pdist_forward(x (N, M), p)`` returns, for each pair i < j of rows, the p-norm of
x_i - x_j over the M features. Every output element reads two whole rows, so the row dim N
stays whole. The feature dim M shards where the norm is a reduction a Partial can finish:
p = 0 counts the differing features and p = 1 adds |x_ik - x_jk|, both sums over features
(each rank's piece gives an addend: P(sum)); p = inf takes their max (P(max)). Other p take a
root of the sum (not a sum of roots): Replicate. An empty piece of features adds 0 (max: the
distances are >= 0, and an empty rank's 0 does not raise the max).
"""

from __future__ import annotations

import math

import torch

from dtensor.ops._common import LINEAR, R, partials_of
from dtensor.ops.registry import OpSpec, Strategy, sharding_rule
from dtensor.placements import Partial, Shard

aten = torch.ops.aten


@sharding_rule(aten._pdist_forward.default)
def pdist(op: OpSpec) -> list[Strategy]:
    """Note [pdist over features]."""
    p = float(op.arg(1, "p", 2.0))
    found = [Strategy((R,), (R,))]
    if p in (0.0, 1.0):
        found.append(Strategy((Shard(1),), (Partial("sum"),)))
    elif p == math.inf:
        found.append(Strategy((Shard(1),), (Partial("max"),)))
    return found


@sharding_rule(aten._pdist_backward.default)
def pdist_backward(op: OpSpec) -> list[Strategy]:
    """``(grad (P,), x (N, M), p, pdist (P,)) -> grad_x (N, M)``: grad_x[i, k] adds, over the
    pairs of row i, grad * d dist / d x_ik, which reads feature k of both rows and the whole
    distance (given: ``pdist``): with grad and pdist Replicate, x S(1) -> grad_x S(1). Linear
    in grad with x and pdist fixed: P(sum)/P(avg) grad -> the same Partial."""
    g = op.tensors()[0]
    found = [Strategy((R, R, R), (R,)), Strategy((R, Shard(1), R), (Shard(1),))]
    return found + [Strategy((k, R, R), (k,)) for k in partials_of(g, LINEAR)]
