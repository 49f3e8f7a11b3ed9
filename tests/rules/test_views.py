"""View and shape ops: every strategy sound (harness), the view math, and runs on simpg."""

from __future__ import annotations

import pytest
import torch

import simpg
from tests.support.cases import soundness_test, strategies
from tests.support.mesh_world import run_on_mesh as _world
from dtensor import Partial, Replicate, Shard, distribute_tensor
from dtensor.ops.propagate import ShardingError
from dtensor.ops.views import view_groups, view_shards

aten = torch.ops.aten
BIG = 9223372036854775807  # what x[1:] passes as the end of a slice


def _r(*shape, dtype=torch.float64):
    g = torch.Generator().manual_seed(sum(shape) + len(shape))
    if dtype.is_floating_point:
        return torch.randn(*shape, generator=g, dtype=dtype)
    return torch.randint(-4, 5, shape, generator=g, dtype=dtype)


X = _r(5, 3, 4)
CASES = [
    ("transpose", aten.transpose.int, (X, 0, -1), {}),
    ("transpose-int", aten.transpose.int, (_r(5, 3, dtype=torch.int64), 1, 0), {}),
    ("t", aten.t.default, (_r(5, 3),), {}),
    ("t-1d", aten.t.default, (_r(5),), {}),
    ("permute", aten.permute.default, (X, [2, 0, -2]), {}),
    ("unsqueeze-last", aten.unsqueeze.default, (X, -1), {}),
    ("unsqueeze-mid", aten.unsqueeze.default, (X, 1), {}),
    ("squeeze-all", aten.squeeze.default, (_r(5, 1, 3, 1),), {}),
    ("squeeze-even", aten.squeeze.default, (_r(8, 1, 4),), {}),
    ("squeeze-dim", aten.squeeze.dim, (_r(1, 5, 1), 0), {}),
    ("squeeze-dims", aten.squeeze.dims, (_r(1, 5, 1), [0, 1, 2]), {}),
    ("flip", aten.flip.default, (X, [0, 2]), {}),
    ("roll-dim", aten.roll.default, (X, [1], [1]), {}),
    ("roll-flat", aten.roll.default, (X, [2]), {}),
    ("slice-part", aten.slice.Tensor, (X, 1, 1, 3), {}),
    ("slice-whole", aten.slice.Tensor, (X, 0, 0, BIG), {}),
    ("slice-step", aten.slice.Tensor, (X, 0, None, None, 2), {}),
    ("slice-kw", aten.slice.Tensor, (X,), {"dim": 2, "start": 1}),
    ("select", aten.select.int, (X, 1, -1), {}),
    ("split", aten.split.Tensor, (X, 2), {}),
    ("split-dim", aten.split.Tensor, (X, 3, 2), {}),
    ("split_with_sizes", aten.split_with_sizes.default, (X, [1, 2], 1), {}),
    ("unbind", aten.unbind.int, (X, 1), {}),
    ("unbind-default", aten.unbind.int, (_r(2, 3),), {}),
    ("repeat", aten.repeat.default, (X, [2, 1, 1, 2]), {}),
    ("cat", aten.cat.default, ([X, _r(5, 2, 4)], 1), {}),
    ("cat-legacy-empty", aten.cat.default, ([X, torch.zeros(0, dtype=torch.float64)],), {}),
    ("cat-int", aten.cat.default, ([_r(3, 2, dtype=torch.int64)] * 2, -1), {}),
    ("stack", aten.stack.default, ([X, X], -1), {}),
    ("stack-default", aten.stack.default, ([X, X],), {}),
    ("view-split-last", aten.view.default, (X, [5, -1]), {}),
    ("view-merge", aten.view.default, (X, [-1, 4]), {}),
    ("view-merge-even", aten.view.default, (_r(8, 3), [-1]), {}),
    ("view-merge-uneven", aten.view.default, (_r(6, 4), [-1]), {}),
    ("view-split", aten.view.default, (_r(24), [-1, 3]), {}),
    ("view-split-3", aten.view.default, (_r(12), [-1, 2, 2]), {}),
    ("view-regroup", aten.view.default, (_r(4, 6), [-1, 4]), {}),
    ("view-global-sizes", aten.view.default, (X, [60]), {}),
    ("view-size1", aten.view.default, (_r(3, 1, 4), [3, -1]), {}),
    ("view-lead1", aten.view.default, (_r(1, 8), [-1]), {}),
    ("view-empty", aten.view.default, (_r(0, 4), [-1, 2]), {}),
    ("unsafe_view", aten._unsafe_view.default, (_r(8, 3), [-1, 3, 1]), {}),
    ("expand-kept", aten.expand.default, (_r(5, 1), [-1, 3]), {}),
    ("expand-global", aten.expand.default, (_r(5, 1), [2, 5, 3]), {}),
    ("expand-lead", aten.expand.default, (_r(3), [4, -1]), {}),
    ("slice_backward", aten.slice_backward.default, (_r(5, 2, 4), [5, 3, 4], 1, 1, 3, 1), {}),
    ("select_backward", aten.select_backward.default, (_r(5, 4), [5, 3, 4], 1, 2), {}),
    ("as_strided-identity", aten.as_strided.default, (_r(5, 3), [5, 3], [3, 1]), {}),
    ("as_strided-identity-0", aten.as_strided.default, (_r(5, 3), [5, 3], [3, 1], 0), {}),
    ("as_strided-window", aten.as_strided.default, (_r(5, 3), [3, 3], [1, 3], 2), {}),
    ("as_strided_copy-identity", aten.as_strided_copy.default, (_r(7, 2), [7, 2], [2, 1]), {}),
    ("as_strided_copy-overlap", aten.as_strided_copy.default, (_r(6), [4, 3], [1, 1]), {}),
]


test_every_strategy_is_sound = soundness_test(CASES)


def _shard_pairs(op, args, mesh_shape=(2,), mesh_dim=0):
    return {(s.inputs[0].dim, s.outputs[0].dim)
            for s in strategies(op, args, mesh_shape=mesh_shape, mesh_dim=mesh_dim)
            if isinstance(s.inputs[0], Shard)}


def test_dims_that_move_elements_across_chunks_are_never_sharded():
    assert _shard_pairs(aten.flip.default, (X, [0, 2])) == {(1, 1)}
    assert _shard_pairs(aten.roll.default, (X, [2])) == set()
    assert _shard_pairs(aten.slice.Tensor, (X, 1, 1, 3)) == {(0, 0), (2, 2)}
    assert _shard_pairs(aten.slice.Tensor, (X, 1, 0, BIG)) == {(0, 0), (1, 1), (2, 2)}
    assert _shard_pairs(aten.repeat.default, (X, [2, 1, 1, 2])) == {(0, 1), (1, 2)}
    assert _shard_pairs(aten.select.int, (X, 1, 0)) == {(0, 0), (2, 1)}


def test_view_groups_and_shards_follow_the_outermost_dim():
    assert view_groups((2, 6, 4), (12, 4)) == [([0, 1], [0]), ([2], [1])]
    assert view_groups((3, 1, 4), (3, 4)) == [([0], [0]), ([1, 2], [1])]
    assert view_groups((6,), (6, 1)) == [([0], [0]), ([], [1])]
    assert view_shards((8, 3), (24,), 4) == [(0, 0)]  # 8 rows chunk 2 each = 6 elements each
    assert view_shards((6, 4), (24,), 4) == []  # rows 2, 2, 2, 0 but elements 6, 6, 6, 6
    assert view_shards((24,), (6, 4), 3) == [(0, 0)]
    assert view_shards((4, 6), (6, 4), 2) == [(0, 0)]  # both outer sizes split evenly
    assert view_shards((4, 6), (6, 4), 4) == []
    assert view_shards((5, 1), (5,), 4) == [(0, 0)]  # nothing inside the outer dim
    assert view_shards((0, 4), (2, 0), 2) == []


def test_view_shards_nested_mesh_dims_by_the_product_of_their_sizes():
    # (4, 3) -> (12,) splits rows evenly by 2, but by 2 then 3 (mesh (2, 3)) it needs 4 % 6
    assert _shard_pairs(aten.view.default, (_r(4, 3), [-1]), (2, 3), 0) == {(0, 0)}
    assert _shard_pairs(aten.view.default, (_r(4, 3), [-1]), (2, 3), 1) == set()


def test_size_arguments_get_local_shapes_so_shards_pass_either_way():
    # Note [global size arguments]: each rank is handed its own piece's shape
    assert _shard_pairs(aten.view.default, (_r(8, 3), [24])) == {(0, 0)}
    assert _shard_pairs(aten.view.default, (_r(8, 3), [-1])) == {(0, 0)}
    assert _shard_pairs(aten.expand.default, (_r(5, 1), [5, 3])) == {(0, 0)}
    assert _shard_pairs(aten.expand.default, (_r(5, 1), [-1, 3])) == {(0, 0)}


def test_view_and_size_taking_backward_ops_stay_sharded_end_to_end():
    x = torch.randn(8, 6)

    def body(mesh):
        d = distribute_tensor(x.clone().requires_grad_(), mesh, [Shard(0)])
        with simpg.trace() as t:
            v = d.view(8, 2, 3)[:, 1:, :]  # view with explicit sizes, then a slice
            v.sum().backward()  # slice_backward and expand take input sizes
        assert v.placements == (Shard(0),)
        assert [r.op for r in t.records] == []  # the replicated seed needs no gathering
        return d.grad.full_tensor()

    grads = _world((4,), body)
    expected = torch.zeros(8, 2, 3)
    expected[:, 1:, :] = 1
    assert torch.equal(grads[0], expected.view(8, 6))


# -- end to end on simpg -------------------------------------------------------------------------


def test_shape_ops_keep_shards_without_communication_on_a_2d_mesh():
    x = torch.randn(5, 6, 3)

    def body(mesh):
        d = distribute_tensor(x, mesh, [Shard(0), Shard(1)])
        with simpg.trace() as t:
            y = d.transpose(0, 2).unsqueeze(0).flip(0)   # S(0),S(1) -> S(3),S(2)
            z = torch.cat([y, y[:, :2]], dim=1)
            w = z.squeeze(0).permute(2, 1, 0)[:, :, 1:]
        assert y.placements == (Shard(3), Shard(2)) and w.placements == (Shard(0), Shard(1))
        assert not t.records
        return w.full_tensor()

    want = torch.cat([x.transpose(0, 2), x.transpose(0, 2)[:2]], 0).permute(2, 1, 0)[:, :, 1:]
    for got in _world((2, 2), body):
        assert torch.equal(got, want)


def test_partial_passes_through_views_stack_and_cat():
    def body(mesh):
        import torch.distributed as dist

        local = torch.arange(12.0).reshape(3, 4) * (dist.get_rank() + 1)
        p = distribute_tensor(torch.zeros(3, 4), mesh, [Replicate()])
        p = type(p).from_local(local, mesh, [Partial()])
        with simpg.trace() as t:
            out = torch.cat([torch.stack([p.view(4, 3), p.t()], 0).flip(2)[0], p.t()[1:]])
        assert out.placements == (Partial(),) and not t.records
        return out.full_tensor()

    full = torch.arange(12.0).reshape(3, 4) * 3  # ranks hold 1x and 2x
    want = torch.cat([torch.stack([full.view(4, 3), full.t()], 0).flip(2)[0], full.t()[1:]])
    for got in _world((2,), body):
        assert torch.equal(got, want)


def test_slicing_a_sharded_dim_gathers_it_and_the_backward_matches():
    x = torch.randn(6, 5)

    def f(t):
        parts = t.split(2, dim=1)
        return torch.cat([parts[0] * 2, t[:, 1:].select(1, 0).unsqueeze(1), parts[-1]], 1)

    leaf = x.clone().requires_grad_()
    want = f(leaf)
    want.sum().backward()

    def body(mesh):
        d = distribute_tensor(x.clone().requires_grad_(), mesh, [Shard(1)])
        out = f(d)  # splitting the sharded dim needs it whole: gathered first, correct
        out.sum().backward()
        return out.full_tensor(), d.grad.full_tensor()

    for got, grad in _world((3,), body):
        assert torch.allclose(got, want) and torch.allclose(grad, leaf.grad)


def test_reshape_then_unflatten_backward_matches_single_device():
    x = torch.randn(4, 3, 2)

    def f(t):
        return t.reshape(12, 2).unflatten(0, (2, 6)).movedim(0, -1).expand(3, 6, 2, 2)

    leaf = x.clone().requires_grad_()
    f(leaf).pow(2).sum().backward()

    def body(mesh):
        d = distribute_tensor(x.clone().requires_grad_(), mesh, [Shard(0)])
        out = f(d)
        out.pow(2).sum().backward()
        return out.full_tensor(), d.grad.full_tensor()

    for got, grad in _world((2,), body):
        assert torch.allclose(got, f(x)) and torch.allclose(grad, leaf.grad)


def test_as_strided_keeps_pieces_only_for_the_identity_and_refuses_a_transposed_storage():
    full = torch.arange(35.0).reshape(7, 5)

    def body(mesh):
        x = distribute_tensor(full, mesh, [Shard(1)])
        with simpg.trace() as t:
            same = torch.as_strided(x, x.shape, x.stride())
        window = torch.as_strided(x, (3, 3), (1, 5), 2)  # offsets count from the DTensor's 0
        with pytest.raises(ShardingError, match=r"offers no strategy .* stride \(1, 5\)"):
            torch.as_strided(x.t(), (3, 3), (1, 5), 2)
        return (same.placements, len(t.records), torch.equal(same.full_tensor(), full),
                window.placements, torch.equal(window.full_tensor(),
                                               torch.as_strided(full, (3, 3), (1, 5), 2)))

    assert _world((4,), body) == [((Shard(1),), 0, True, (Replicate(),), True)] * 4
