"""Moving a DTensor to another mesh (Note [cross-mesh moves] in dtensor.redistribute.cross_mesh):
disjoint, overlapping and same-rank meshes, even and uneven, Partial on either side; every
target rank receives exactly the elements it lacks (checked element by element against brute
force, and in simpg's trace); the gradient makes the reverse move. torch's DTensor refuses the
move ("Cross device mesh comm not supported yet!")."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.distributed as dist

import dtensor
import simpg
from dtensor import DeviceMesh, Partial, Replicate, Shard
from dtensor.redistribute.cross_mesh import mesh_boxes, plan_move
from dtensor.layout import box_numel, local_slices

S0, S1, R = Shard(0), Shard(1), Replicate()
FULL = torch.arange(7 * 5, dtype=torch.float32).reshape(7, 5)  # uneven over 2, 3 and 4

# (source ranks, source mesh shape, source placements, target ranks, shape, placements)
CASES = [
    ([0, 1], (2,), [S0], [2, 3, 4, 5], (4,), [S1]),                      # disjoint
    ([0, 1, 2, 3], (2, 2), [S0, S1], [2, 3, 4, 5], (2, 2), [S1, S0]),    # overlapping
    ([0, 1, 2, 3], (4,), [S0], [0, 1, 2, 3], (2, 2), [R, S0]),           # same ranks, new shape
    ([0, 1, 2], (3,), [R], [3, 4, 5], (3,), [S0]),                       # replicas to shards
    ([4, 5], (2,), [S1], [0, 1, 2, 3, 4, 5], (3, 2), [S0, R]),           # a few to many
    ([0, 1, 2, 3, 4, 5], (6,), [S0], [5], (1,), [R]),                    # many to one
]


def _mesh(ranks, shape):
    return DeviceMesh("cpu", torch.tensor(ranks).reshape(shape))


def _brute_force_received(src, dst):
    """Per target rank: the elements of its box it does not hold as a source."""
    out = {}
    for rank, box in dst.items():
        own = src.get(rank)
        out[rank] = sum(
            1 for idx in itertools.product(*(range(a, b) for a, b in box))
            if own is None or not all(a <= i < b for i, (a, b) in zip(idx, own)))
    return out


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}{c[2]}->{c[3]}{c[5]}" for c in CASES])
def test_each_target_rank_receives_exactly_what_it_lacks(case):
    src_ranks, src_shape, src_pl, dst_ranks, dst_shape, dst_pl = case

    def body():
        a, b = _mesh(src_ranks, src_shape), _mesh(dst_ranks, dst_shape)
        x = dtensor.distribute_tensor(FULL, a, src_pl, src_data_rank=None)
        y = x.redistribute(b, dst_pl)
        assert y.placements == tuple(dst_pl) and y.device_mesh is b
        if dist.get_rank() in dst_ranks:  # each rank's piece is its part of the tensor
            piece = FULL[local_slices(FULL.shape, b.shape, dst_pl, b.get_coordinate())]
            torch.testing.assert_close(y.to_local(), piece, rtol=0, atol=0)
        else:
            assert y.to_local().numel() == 0
        return mesh_boxes(a, src_pl, FULL.shape), mesh_boxes(b, dst_pl, FULL.shape)

    with simpg.trace() as t:
        (src, dst), *_ = simpg.run(body, 6)
    received = dict.fromkeys(range(6), 0)
    for r in t.records:
        if r.op in ("send", "recv"):
            for rank, n in zip(r.ranks, r.bytes_received):
                received[rank] += n
    moved = {rank: sum(box_numel(m.box) for m in plan_move(src, dst) if m.dst == rank
                       and m.src != rank) for rank in dst}
    assert moved == _brute_force_received(src, dst)
    assert sum(received.values()) == 4 * sum(moved.values())


def test_replicated_holders_share_the_sends():
    a = {0: ((0, 8),), 1: ((0, 8),)}  # two replicas
    b = {2: ((0, 4),), 3: ((4, 8),)}
    senders = {m.dst: m.src for m in plan_move(a, b)}
    assert senders == {2: 0, 3: 1}


def test_partial_source_and_partial_target():
    def body():
        a, b = _mesh([0, 1], (2,)), _mesh([2, 3], (2,))
        x = dtensor.distribute_tensor(FULL, a, [R])
        p = dtensor.DTensor.from_local(x.to_local() / 2, a, [Partial()]) \
            if dist.get_rank() in (0, 1) else x.redistribute(a, [Partial()])
        y = p.redistribute(b, [Partial()])
        if dist.get_rank() in (2, 3):
            assert y.placements == (Partial(),)
            torch.testing.assert_close(y.full_tensor(), FULL)
    simpg.run(body, 4)


def test_gradient_makes_the_reverse_move():
    def body():
        a, b = _mesh([0, 1, 2, 3], (4,)), _mesh([0, 1, 2, 3], (2, 2))
        x = dtensor.distribute_tensor(FULL, a, [S0]).requires_grad_()
        y = x.redistribute(b, [S1, R])
        (y * y).sum().backward()
        assert x.grad.placements == (S0,) and x.grad.device_mesh is a
        torch.testing.assert_close(x.grad.full_tensor(), 2 * FULL)
    simpg.run(body, 4)


def test_mixing_meshes_in_an_op_says_how_to_move():
    def body():
        a, b = _mesh([0, 1], (2,)), _mesh([0, 1], (1, 2))
        x = dtensor.distribute_tensor(FULL, a, [S0])
        y = dtensor.distribute_tensor(FULL, b, [R, S0])
        with pytest.raises(ValueError, match=r"redistribute\(device_mesh="):
            x + y
        z = x + y.redistribute(a, [S0])  # the advice works
        torch.testing.assert_close(z.full_tensor(), 2 * FULL)
    simpg.run(body, 2)


def test_distribute_tensor_moves_a_dtensor_to_another_mesh():
    def body():
        a, b = _mesh([0, 1], (2,)), _mesh([1, 2, 3], (3,))
        x = dtensor.distribute_tensor(FULL, a, [S0])
        y = dtensor.distribute_tensor(x, b, [S1])
        assert y.device_mesh is b and y.placements == (S1,)
        if dist.get_rank() in (1, 2, 3):
            piece = FULL[local_slices(FULL.shape, b.shape, [S1], b.get_coordinate())]
            torch.testing.assert_close(y.to_local(), piece, rtol=0, atol=0)
    simpg.run(body, 4)


def test_two_partly_overlapping_2d_meshes_each_gather():
    # their groups over both dims were made lazily by members only and took names that
    # differed between ranks 2, 3 (members of both meshes) and 4, 5: a deadlock (hang on gloo)
    def body():
        a, b = _mesh([0, 1, 2, 3], (2, 2)), _mesh([2, 3, 4, 5], (2, 2))
        for mesh in (a, b):
            x = dtensor.distribute_tensor(FULL, mesh, [S0, S1])
            if dist.get_rank() in mesh.mesh.flatten().tolist():
                torch.testing.assert_close(x.full_tensor(), FULL, rtol=0, atol=0)
    simpg.run(body, 6)
