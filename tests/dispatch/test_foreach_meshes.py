"""Foreach ops over DTensors of several meshes (Note [foreach over meshes] in
dtensor.dispatch): split by mesh, results in order, as torch's DTensor does; replicas on a
mesh of the same ranks join an op with no communication (clip_grad_norm_ over such meshes
works; torch's raises at the stack). Other ops mixing meshes keep raising."""

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


def test_clip_grad_norm_over_two_meshes_of_the_same_ranks_equals_one_device():
    # the per-parameter norms are replicas on meshes of the same ranks: stacked with no
    # communication (torch's DTensor raises at the stack)
    full = [torch.arange(8.0).reshape(4, 2), torch.arange(6.0).reshape(2, 3), torch.ones(3)]
    ref = [torch.nn.Parameter(f.clone()) for f in full]
    for p in ref:
        p.grad = p.detach() * 0 + 1
    want = torch.nn.utils.clip_grad_norm_(ref, 1.0, foreach=True)

    def body():
        a, b, ts = _params()
        params = [torch.nn.Parameter(t) for t in ts]
        for p in params:
            p.grad = p.detach() * 0 + 1
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        torch.testing.assert_close(norm.full_tensor(), want)
        for p, r in zip(params, ref):
            torch.testing.assert_close(p.grad.full_tensor(), r.grad)
    simpg.run(body, 2)


def test_ops_mixing_meshes_of_other_ranks_or_non_replicas_raise():
    def body():
        a, b, ts = _params()
        c = DeviceMesh("cpu", [0])
        with pytest.raises(ValueError, match=r"DTensors on different meshes in one op"):
            ts[0] + ts[1].redistribute(b, [Replicate(), Shard(0)])[:, :2].sum()  # b not all R
        r = dtensor.distribute_tensor(torch.ones(()), c, [Replicate()])
        with pytest.raises(ValueError, match=r"DTensors on different meshes in one op"):
            ts[2] * r  # a mesh of other ranks
    simpg.run(body, 2)


def test_clip_grad_norm_with_a_tensor_parallel_bias_under_fully_shard():
    # fully_shard stores every parameter on mesh ("tp", "dp") (Note [nested dp inside tp]), so
    # the norms of a tp-sharded bias and of the weights meet on one mesh
    from dtensor.parallel import (ColwiseParallel, RowwiseParallel, fully_shard,
                                  parallelize_module)

    def model_and_input():
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
        return m, torch.randn(3, 4)

    ref, x = model_and_input()
    ref(x).sum().backward()
    want = torch.nn.utils.clip_grad_norm_(ref.parameters(), 1.0)

    def body():
        mesh = dtensor.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        m, x = model_and_input()
        parallelize_module(m, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
        fully_shard(m, mesh["dp"])
        m(x).sum().backward()
        assert len({p.device_mesh for p in m.parameters()}) == 1
        torch.testing.assert_close(torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
                                   .full_tensor(), want)
    simpg.run(body, 4)
