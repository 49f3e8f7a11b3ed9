"""DTensor on simulated ranks: construction, redistribute, factories, RNG, autograd, errors."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st

import simpg
from tests.support.cases import soundness_test
from tests.support.mesh_world import run_on_mesh as _in_world
from dtensor import DTensor, Partial, Replicate, Shard, distribute_tensor, init_device_mesh
from dtensor import api, fallback_policy
from dtensor.layout import local_slices

MESHES = [(4,), (2, 2), (2, 4)]


def _coord(mesh):
    return tuple(mesh.get_coordinate())




@pytest.mark.parametrize("mesh_shape,placements", [
    ((4,), [Shard(0)]), ((4,), [Shard(1)]), ((4,), [Replicate()]),
    ((2, 2), [Shard(0), Shard(1)]), ((2, 2), [Shard(0), Shard(0)]),
    ((2, 4), [Replicate(), Shard(1)]), ((2, 4), [Shard(1), Shard(0)]),
], ids=str)
@pytest.mark.parametrize("shape", [(8, 4), (7, 5), (3, 1), (0, 3)], ids=str)
def test_distribute_tensor_gives_each_rank_its_layout_piece(mesh_shape, placements, shape):
    full = torch.arange(torch.Size(shape).numel(), dtype=torch.float32).reshape(shape)

    def body(mesh):
        src = full if dist.get_rank() == 0 else torch.zeros(shape)  # only rank 0's data counts
        d = distribute_tensor(src, mesh, placements)
        piece = full[local_slices(shape, mesh.shape, d.placements, _coord(mesh))]
        assert isinstance(d, DTensor) and d.shape == full.shape and d.dtype == full.dtype
        assert torch.equal(d.to_local(), piece)
        assert torch.equal(d.full_tensor(), full)

    _in_world(mesh_shape, body)


def test_partial_distribute_reduces_back_to_the_value():
    full = torch.arange(12.0).reshape(3, 4)

    def body(mesh):
        for op in ("sum", "avg", "max", "min"):
            d = distribute_tensor(full, mesh, [Partial(op), Shard(1)])
            assert torch.equal(d.full_tensor(), full), op

    _in_world((2, 2), body)


def test_from_local_uneven_with_run_check_and_shape():
    def body(mesh):
        r = dist.get_rank()
        local = torch.full((2 if r < 2 else 1, 3), float(r))  # 7 rows over 4 ranks: 2,2,2,1?
        local = torch.full(((2, 2, 2, 1)[r], 3), float(r))
        d = DTensor.from_local(local, mesh, [Shard(0)], run_check=True)
        assert d.shape == (7, 3)
        e = DTensor.from_local(local, mesh, [Shard(0)], shape=(7, 3))
        assert torch.equal(d.full_tensor(), e.full_tensor())
        return d.full_tensor()[:, 0].tolist()

    assert _in_world((4,), body)[0] == [0, 0, 1, 1, 2, 2, 3]


def test_from_local_run_check_names_the_inconsistent_ranks():
    def body(mesh):
        r = dist.get_rank()
        DTensor.from_local(torch.ones(3 if r == 2 else 2, 2), mesh, [Shard(0)], run_check=True)

    with pytest.raises(ValueError, match=r"mesh coordinate \(3,\): local shape \(2, 2\), expected"):
        _in_world((4,), body)


@pytest.mark.parametrize("mesh_shape", MESHES, ids=str)
def test_redistribute_round_trips_and_matches_layout(mesh_shape):
    full = torch.arange(7 * 5, dtype=torch.int64).reshape(7, 5)
    options = [Shard(0), Shard(1), Replicate(), Partial("sum"), Partial("max")]

    def body(mesh):
        import itertools

        for src in itertools.product(options, repeat=len(mesh_shape)):
            if {"sum", "max"} <= {p.reduce_op for p in src if isinstance(p, Partial)}:
                continue  # mixed reduce ops are not a valid layout
            d = distribute_tensor(full, mesh, list(src))
            for dst in [(Replicate(),) * len(mesh_shape), (Shard(1),) + src[1:]]:
                if {"sum", "max"} <= {p.reduce_op for p in dst if isinstance(p, Partial)}:
                    continue
                moved = d.redistribute(mesh, list(dst))
                assert moved.placements == dst
                if not any(isinstance(p, Partial) for p in dst):
                    piece = full[local_slices(full.shape, mesh.shape, dst, _coord(mesh))]
                    assert torch.equal(moved.to_local(), piece), (src, dst)
                back = moved.redistribute(mesh, list(src))
                assert torch.equal(back.full_tensor(), full), (src, dst)

    _in_world(mesh_shape, body)


@given(
    mesh_shape=st.sampled_from([(2,), (3,), (2, 2), (2, 2, 2), (1, 4), (2, 3)]),
    shape=st.lists(st.integers(0, 5), min_size=1, max_size=3).map(tuple),
    dtype=st.sampled_from([torch.float32, torch.int64, torch.bfloat16]),
    data=st.data(),
)
@settings(max_examples=25)
def test_hypothesis_a_to_b_to_a_is_bit_exact(mesh_shape, shape, dtype, data):
    def placement():
        return st.one_of(st.builds(Shard, st.integers(0, len(shape) - 1)), st.just(Replicate()))

    a = data.draw(st.lists(placement(), min_size=len(mesh_shape), max_size=len(mesh_shape)))
    b = data.draw(st.lists(placement(), min_size=len(mesh_shape), max_size=len(mesh_shape)))
    full = torch.arange(torch.Size(shape).numel()).reshape(shape).to(dtype)

    def body(mesh):
        d = distribute_tensor(full, mesh, a)
        back = d.redistribute(mesh, b).redistribute(mesh, a)
        assert torch.equal(back.to_local(), d.to_local())
        assert torch.equal(back.full_tensor(), full)

    _in_world(mesh_shape, body)


def test_factories_build_pieces_directly():
    def body(mesh):
        z = api.zeros(7, 3, device_mesh=mesh, placements=[Shard(0), Replicate()])
        o = api.ones((5, 2), device_mesh=mesh, placements=[Replicate(), Shard(1)],
                     dtype=torch.int32)
        f = api.full((3, 3), 2.5, device_mesh=mesh, placements=[Shard(1), Shard(0)])
        e = api.empty(4, device_mesh=mesh, placements=[Shard(0), Shard(0)])
        assert z.shape == (7, 3) and torch.equal(z.full_tensor(), torch.zeros(7, 3))
        assert torch.equal(o.full_tensor(), torch.ones(5, 2, dtype=torch.int32))
        assert torch.equal(f.full_tensor(), torch.full((3, 3), 2.5))
        assert e.to_local().shape == (1,)

    _in_world((2, 2), body)


@pytest.mark.parametrize("mesh_shape,placements", [
    ((4,), [Shard(0)]), ((2, 2), [Shard(1), Shard(0)]), ((2, 4), [Replicate(), Shard(0)]),
    ((2, 2), [Partial(), Shard(0)]),
], ids=str)
def test_sharded_rand_equals_single_device_rand_for_the_same_seed(mesh_shape, placements):
    torch.manual_seed(5)
    expected = torch.rand(7, 3), torch.randn(2, 5), torch.rand(1)

    def body(mesh):
        torch.manual_seed(5)
        got = (api.rand(7, 3, device_mesh=mesh, placements=placements),
               api.randn(2, 5, device_mesh=mesh, placements=placements),
               api.rand(1, device_mesh=mesh, placements=[Replicate()] * len(mesh_shape)))
        for g, e in zip(got, expected):
            assert torch.equal(g.full_tensor(), e)

    _in_world(mesh_shape, body)


def test_autograd_shard_to_replicate_backward_reduces_back_to_shard():
    full = torch.arange(8.0).reshape(4, 2)

    def body(mesh):
        x = distribute_tensor(full.clone().requires_grad_(), mesh, [Shard(0)])
        assert x.is_leaf and x.requires_grad
        y = x.redistribute(mesh, [Replicate()])
        # each rank's loss term is its own; declaring the gradient Partial sums them
        (y.to_local(grad_placements=[Partial()]) ** 2).sum().backward()
        assert isinstance(x.grad, DTensor) and x.grad.placements == (Shard(0),)
        return x.grad.full_tensor()

    with simpg.trace() as t:
        grads = _in_world((4,), body)
    assert torch.equal(grads[0], 4 * 2 * full)  # 4 ranks' terms, each 2 * x
    # the list form or, pieces even, the single-buffer one (Note [one buffer per collective])
    assert {"reduce_scatter", "reduce_scatter_tensor"} & {r.op for r in t.records}


def test_autograd_through_from_local_and_full_tensor():
    def body(mesh):
        local = torch.full((2, 3), float(dist.get_rank() + 1), requires_grad=True)
        d = DTensor.from_local(local, mesh, [Shard(0)])
        (d.full_tensor() * torch.arange(8.0).reshape(8, 1)).sum().backward()
        return local.grad

    grads = _in_world((4,), body)
    for r, g in enumerate(grads):  # the replicated gradient sliced back to each rank's rows
        assert torch.equal(g, torch.arange(8.0).reshape(8, 1)[2 * r:2 * r + 2].expand(2, 3))


def test_bad_placements_and_meshes_get_clear_errors():
    def body(mesh):
        with pytest.raises(ValueError, match=r"Shard\(2\) is out of range for a 2-d tensor"):
            distribute_tensor(torch.ones(2, 2), mesh, [Shard(2), Replicate()])
        with pytest.raises(ValueError, match="expected one placement per mesh dim"):
            distribute_tensor(torch.ones(2, 2), mesh, [Shard(0)])
        other = init_device_mesh("cpu", (4,))
        a = distribute_tensor(torch.ones(4), mesh, [Shard(0), Replicate()])
        b = distribute_tensor(torch.ones(4), other, [Shard(0)])
        with pytest.raises(ValueError, match="DTensors on different meshes in one op"):
            a + b

    _in_world((2, 2), body)


def test_pointwise_on_same_spec_runs_locally_without_communication():
    def body(mesh):
        a = distribute_tensor(torch.arange(6.0), mesh, [Shard(0)])
        with simpg.trace() as t:
            c = (a * 2 + a).detach()
        assert c.placements == (Shard(0),) and not t.records
        return c.full_tensor()

    assert torch.equal(_in_world((4,), body)[0], torch.arange(6.0) * 3)


def test_item_reads_the_whole_value_without_the_fallback():
    # _local_scalar_dense has a rule: Replicate in, a Python number out (no placement)
    def body(mesh):
        a = distribute_tensor(torch.arange(4.0), mesh, [Shard(0)])
        with fallback_policy("error"):
            return (a.sum().item(), a[3].item(), (a > 1).any().item(),
                    DTensor.from_local(torch.tensor(1.5), mesh, [Partial()]).item())

    assert _in_world((2,), body) == [(6.0, 3.0, True, 3.0)] * 2


test_fill_and_zero_rules_are_sound = soundness_test(
    [(torch.ops.aten.fill_.Scalar, (torch.ones(5, 3), 2.5)),
     (torch.ops.aten.zero_.default, (torch.ones(5, 3),))], meshes=[(2,), (3,), (2, 2)])


@pytest.mark.parametrize("placements", [[Shard(0)], [Replicate()], [Partial("max")],
                                        [Partial()]], ids=str)
def test_fill_and_zero_keep_placements_where_the_value_allows(placements):
    def body(mesh):
        x = DTensor.from_local(torch.ones(3, 2), mesh, placements).clone()
        with fallback_policy("error"):
            x.fill_(2.5)
            filled = (x.placements, x.full_tensor().clone())
            x.zero_()
        return filled, x.placements, x.full_tensor()

    for (fp, fv), zp, zv in _in_world((2,), body):
        assert torch.equal(fv, torch.full(tuple(fv.shape), 2.5)) and not zv.any()
        # fill_ keeps every placement (a P(sum) holds the value as one addend:
        # dtensor.decompositions.random), and so does zero_
        assert fp == zp == tuple(placements)
