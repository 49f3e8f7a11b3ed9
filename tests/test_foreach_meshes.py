"""Foreach ops over DTensors of several meshes (Note [foreach over meshes] in
dtensor.dispatch): split by mesh, results in order; torch's DTensor does the same for the
foreach step. Other ops mixing meshes keep raising."""

from __future__ import annotations

import pytest
import torch

import dtensor
import simpg
from dtensor import DeviceMesh, Replicate, Shard


def _params():
    a = DeviceMesh("cpu", [0, 1])
    b = DeviceMesh("cpu", [[0, 1]])
    x = dtensor.distribute_tensor(torch.arange(8.0).reshape(4, 2), a, [Shard(0)])
    y = dtensor.distribute_tensor(torch.arange(6.0).reshape(2, 3), b, [Replicate(), Shard(1)])
    z = dtensor.distribute_tensor(torch.ones(3), a, [Replicate()])
    return a, b, [x, y, z]


def test_foreach_ops_split_by_mesh_and_keep_the_order():
    def body():
        a, b, ts = _params()
        norms = torch._foreach_norm(ts)
        want = [t.full_tensor().norm() for t in ts]
        assert [n.device_mesh for n in norms] == [a, b, a]
        for n, w in zip(norms, want):
            torch.testing.assert_close(n.full_tensor(), w)
        torch._foreach_mul_(ts, 2.0)  # in place, returns None
        torch.testing.assert_close(ts[1].full_tensor(), 2 * torch.arange(6.0).reshape(2, 3))
        added = torch._foreach_add(ts, ts)
        torch.testing.assert_close(added[2].full_tensor(), 4 * torch.ones(3))
        assert added[1].placements == (Replicate(), Shard(1))
    simpg.run(body, 2)


def test_clip_grad_norm_foreach_step_runs_then_stack_raises_as_in_torch():
    def body():
        a, b, ts = _params()
        params = [torch.nn.Parameter(t) for t in ts]
        for p in params:
            p.grad = p.detach() * 0 + 1
        with pytest.raises(ValueError, match=r"aten.stack.default: DTensors on different meshes"):
            torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)  # stacks the norms
    simpg.run(body, 2)
