"""_trilinear, the kernel of ``nn.functional.bilinear`` and of its backward.

``_trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim)``: each input gets size-1 dims
inserted at its ``expand`` positions, so all three share one index space of
``i1.ndim + len(expand1)`` dims; the output is the product of the three summed over
``sumdim`` (those dims removed). bilinear is ``out[n, o] = sum_ij x1[n, i] W[o, i, j] x2[n, j]``:
expand1 = [1, 3], expand2 = [0], expand3 = [1, 2], sumdim = [2, 3].

Per mesh dim it is an einsum (Note [nested shards] in matmul needs nothing here: every input
that has a dim holds it whole or chunked alike):
- a kept dim: the inputs that have it Shard it, those expanded there Replicate (they broadcast
  along it), output Shard: each rank computes its chunk;
- a summed dim: the inputs that have it Shard it alike: each rank sums its part, P(sum);
- linear in each input with the others fixed: one input P(sum)/P(avg), the rest Replicate.
"""

from __future__ import annotations

import torch

from dtensor.ops._common import LINEAR, linear_partials
from dtensor.ops.registry import OpSpec, Strategy, sharding_rule
from dtensor.placements import Partial, Placement, Replicate, Shard

aten = torch.ops.aten
R = Replicate()


@sharding_rule(aten._trilinear.default)
def trilinear(op: OpSpec) -> list[Strategy]:
    tensors = op.tensors()
    expands = [tuple(op.arg(3 + k, f"expand{k + 1}")) for k in range(3)]
    sumdim = set(op.arg(6, "sumdim"))
    total = tensors[0].ndim + len(expands[0])
    found = [Strategy((R, R, R), (R,))]
    for c in range(total):
        ins: list[Placement] = []
        sizes = set()
        for t, ex in zip(tensors, expands):
            if c in ex:
                ins.append(R)
            else:
                d = c - sum(e < c for e in ex)
                ins.append(Shard(d))
                sizes.add(t.shape[d])
        if len(sizes) != 1 or 1 in sizes:  # none has it, or a size-1 dim broadcasts
            continue
        out: Placement = (Partial("sum") if c in sumdim
                          else Shard(c - sum(s < c for s in sumdim)))
        found.append(Strategy(tuple(ins), (out,)))
    for pos in range(3):
        found += linear_partials(op, pos, LINEAR)
    return found
