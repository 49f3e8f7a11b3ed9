"""Decompositions that communicate inside an op: sharded vector norms (Note [sharded vector
norms]) and gradient clipping over sharded gradients."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import simpg
from tests.support.mesh_world import run_on_mesh
from dtensor import DTensor, Replicate, Shard, distribute_tensor

ORDS = (2, 1, 0, math.inf, -math.inf, 3.5, -1)
DIMS = ((None, False), (0, False), (1, True), ((0, 1), False))


@pytest.mark.parametrize("mesh_shape, placements", [
    ((4,), [Shard(0)]), ((4,), [Shard(1)]), ((2, 2), [Shard(0), Shard(1)]),
    ((2, 2), [Shard(1), Shard(0)]), ((2, 2), [Shard(0), Shard(0)]),
    ((2, 2), [Replicate(), Shard(0)]),
], ids=str)
@pytest.mark.parametrize("shape", [(7, 5), (3, 2)], ids=str)  # (3, 2): empty pieces
def test_vector_norm_over_shards_equals_one_device(mesh_shape, placements, shape):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0))

    def body(mesh) -> None:
        d = distribute_tensor(x, mesh, placements)
        for ord_ in ORDS:
            for dim, keepdim in DIMS:
                out = torch.linalg.vector_norm(d, ord_, dim, keepdim)
                assert isinstance(out, DTensor)
                torch.testing.assert_close(out.full_tensor(),
                                           torch.linalg.vector_norm(x, ord_, dim, keepdim),
                                           msg=f"ord={ord_} dim={dim}")

    run_on_mesh(mesh_shape, body)


def test_clip_grad_norm_moves_one_value_per_parameter():
    torch.manual_seed(0)
    shapes = [(64, 32), (32,), (3, 64)]
    grads = [torch.randn(s) for s in shapes]

    def body(mesh) -> tuple[float, int]:
        params = []
        for g, pl in zip(grads, ([Shard(0), Shard(1)], [Shard(0), Replicate()],
                                 [Shard(1), Shard(0)])):
            p = nn.Parameter(distribute_tensor(torch.zeros(g.shape), mesh, pl))
            p.grad = distribute_tensor(g, mesh, pl)
            params.append(p)
        with simpg.trace() as t:
            total = torch.nn.utils.clip_grad_norm_(params, 1.0)
        scale = min(1.0, 1 / float(total.full_tensor()))
        for p, g in zip(params, grads):
            torch.testing.assert_close(p.grad.full_tensor(), g * scale)
        return float(total.full_tensor()), max(sum(r.bytes_received) for r in t.records)

    results = run_on_mesh((2, 2), body)
    want = float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])))
    for total, biggest in results:
        assert total == pytest.approx(want, rel=1e-6)
        assert biggest <= 64  # scalars only: no gradient is gathered
