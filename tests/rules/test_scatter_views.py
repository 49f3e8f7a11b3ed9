"""Copying views and scatters (dtensor/ops/scatter_views.py): every strategy sound on even,
uneven, tiny and empty shapes over the meshes; the dims each op keeps are offered sharded (the
leading dims of _chunk_cat, every dim of an identity as_strided_scatter); end to end on
simpg."""

from __future__ import annotations

import torch
from tests.support.cases import soundness_test, strategies
from tests.support.mesh_world import run_on_mesh as _world

from dtensor import Shard, distribute_tensor, fallback_policy

aten = torch.ops.aten
g = torch.Generator().manual_seed(7)


def _r(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(shape, generator=g, dtype=dtype)


CASES = [
    (aten.view_copy.default, (_r(5, 3, 4), [15, 4])),
    (aten.view_copy.default, (_r(4, 6), [4, 2, 3])),
    (aten.view_copy.default, (_r(8, 3), [-1])),
    (aten.view_copy.default, (_r(0, 3), [3, 0])),
    (aten.view_copy.dtype, (_r(5, 4), torch.int32)),
    (aten.view_copy.dtype, (_r(5, 4), torch.float16)),
    (aten.narrow_copy.default, (_r(5, 3, 4), 1, 1, 2)),
    (aten.narrow_copy.default, (_r(5, 3), 0, 0, 5)),
    (aten.unfold.default, (_r(5, 7), 1, 3, 2)),
    (aten.unfold.default, (_r(6, 3, 4), 0, 2, 1)),
    (aten.unfold_copy.default, (_r(5, 3, 4), 2, 2, 2)),
    (aten.unfold_copy.default, (_r(), 0, 1, 1)),
    (aten.unfold_backward.default, (_r(5, 3, 3), [5, 7], 1, 3, 2)),
    (aten.unfold_backward.default, (_r(3, 3, 4, 2), [6, 3, 4], 0, 2, 2)),
    (aten.rot90.default, (_r(5, 3, 4),)),
    (aten.rot90.default, (_r(5, 3, 4), 2, [1, 2])),
    (aten.rot90.default, (_r(5, 3, 4), -1, [2, 0])),
    (aten.rot90.default, (_r(5, 3), 4)),
    (aten.select_scatter.default, (_r(5, 3, 4), _r(5, 4), 1, 2)),
    (aten.select_scatter.default, (_r(5, 3), _r(3), 0, -1)),
    (aten.slice_scatter.default, (_r(5, 6), _r(5, 2), 1, 1, 5, 2)),
    (aten.slice_scatter.default, (_r(5, 3, 2), _r(5, 3, 2), 0, None, None, 1)),
    (aten.slice_scatter.default, (_r(7, 3), _r(3, 3), 0, 2, 5, 1)),
    (aten.slice_scatter.default, (_r(0, 3), _r(0, 1), 1, 0, 1, 1)),
    (aten.narrow_copy.default, (torch.arange(20).view(5, 4), 1, 1, 2)),
    (aten.select_scatter.default, (torch.arange(15).view(5, 3), torch.arange(5), 1, 0)),
    (aten.block_diag.default, ([_r(2, 3), _r(1, 2), _r(3)],)),
    (aten.block_diag.default, ([_r(0, 2), _r(4, 1)],)),
]


test_every_strategy_is_sound = soundness_test(CASES)


def _f64(*shape: int) -> torch.Tensor:
    return _r(*shape, dtype=torch.float64)


# _chunk_cat (the FSDP gradient packer) and whole-view as_strided_scatter move elements (or pad
# zeros): in float64, every strategy gives the op's result to 1e-12
EXACT_CASES = [
    (aten._chunk_cat.default, ([_f64(3, 2, 3), _f64(3, 2, 5)], 2, 2)),
    (aten._chunk_cat.default, ([_f64(5, 2, 3), _f64(5, 1, 5)], 1, 3)),
    (aten._chunk_cat.default, ([_f64(4, 3, 2, 1), _f64(4, 3, 2, 2)], -1, 5)),
    (aten._chunk_cat.default, ([_f64(3, 3, 2, 1), _f64(1, 4, 2, 2)], 0, 2)),
    (aten._chunk_cat.default, ([_f64(1, 2, 7)], 2, 4)),
    (aten.as_strided_scatter.default, (_f64(5, 3), _f64(5, 3), [5, 3], [3, 1], 0)),
    (aten.as_strided_scatter.default, (_f64(4, 3, 2), _f64(4, 3, 2), [4, 3, 2], [6, 2, 1], None)),
    (aten.as_strided_scatter.default, (_f64(0, 3), _f64(0, 3), [0, 3], [3, 1], 0)),
    (aten.as_strided_scatter.default, (_f64(1), _f64(1), [1], [1], 0)),
    (aten.as_strided_scatter.default, (_f64(3, 3), _f64(2, 2), [2, 2], [1, 2], 1)),  # general: R
    (aten.as_strided_scatter.default, (_f64(1), _f64(), [], [], 0)),
]
test_every_strategy_is_exact = soundness_test(EXACT_CASES, rtol=1e-12, atol=1e-12)


def _sharded_dims(op, args, mesh_shape=(2,)) -> set[int]:
    return {s.inputs[0].dim for s in strategies(op, args, mesh_shape=mesh_shape)
            if isinstance(s.inputs[0], Shard)}


def test_only_the_dims_the_op_moves_along_stay_whole():
    assert _sharded_dims(aten.rot90.default, (_r(5, 3, 4), 1, [0, 2])) == {1}
    assert _sharded_dims(aten.rot90.default, (_r(5, 3, 4), 4, [0, 2])) == {0, 1, 2}
    assert _sharded_dims(aten.unfold.default, (_r(5, 3, 4), 1, 2, 1)) == {0, 2}
    assert _sharded_dims(aten.select_scatter.default, (_r(5, 3, 4), _r(5, 4), 1, 0)) == {0, 2}
    # a slice of all of the dim: each rank writes its own rows
    assert _sharded_dims(aten.slice_scatter.default, (_r(4, 3), _r(4, 3), 0)) == {0, 1}
    assert _sharded_dims(aten.slice_scatter.default, (_r(4, 3), _r(2, 3), 0, 1, 3)) == {1}
    assert _sharded_dims(aten.narrow_copy.default, (_r(4, 3), 0, 1, 2)) == {1}


def test_scatter_views_end_to_end_forward_and_backward_without_fallback():
    x, src = _r(5, 6, 3), _r(5, 3)

    def body(mesh):
        a = distribute_tensor(x, mesh, [Shard(0), Shard(2)]).requires_grad_()
        s = distribute_tensor(src, mesh, [Shard(0), Shard(1)]).requires_grad_()
        with fallback_policy("error"):
            y = torch.select_scatter(a, s, 1, 4)
            assert y.placements == (Shard(0), Shard(2))
            z = torch.rot90(y, 1, [1, 2])
            w = z.unfold(1, 2, 1)
            (w * w).sum().backward()
        return w.full_tensor(), a.grad.full_tensor(), s.grad.full_tensor()

    w, ga, gs = _world((2, 2), body)[0]
    ra, rs = x.clone().requires_grad_(), src.clone().requires_grad_()
    rw = torch.rot90(torch.select_scatter(ra, rs, 1, 4), 1, [1, 2]).unfold(1, 2, 1)
    (rw * rw).sum().backward()
    assert torch.allclose(w, rw) and torch.allclose(ga, ra.grad) and torch.allclose(gs, rs.grad)


def test_leading_dims_and_identity_views_shard():
    assert _sharded_dims(aten._chunk_cat.default, ([_f64(3, 2, 3), _f64(3, 2, 5)], 2, 2)) == {0, 1}
    assert _sharded_dims(aten._chunk_cat.default, ([_f64(3, 2, 3), _f64(3, 2, 5)], -2, 2)) == {0}
    # a piece of 1 row on 2 ranks would be empty: the kernel rejects it
    assert _sharded_dims(aten._chunk_cat.default, ([_f64(1, 2, 3)], 2, 2)) == {1}
    whole = (_f64(4, 3), _f64(4, 3), [4, 3], [3, 1], 0)
    assert _sharded_dims(aten.as_strided_scatter.default, whole) == {0, 1}
    shifted = (_f64(4, 3), _f64(4, 3), [4, 3], [3, 1], 1)
    assert _sharded_dims(aten.as_strided_scatter.default, shifted) == set()
    transposed = (_f64(3, 3), _f64(3, 3), [3, 3], [1, 3], 0)
    assert _sharded_dims(aten.as_strided_scatter.default, transposed) == set()


def test_chunk_cat_and_as_strided_scatter_end_to_end_without_fallback():
    a, b, x = _f64(5, 2, 3), _f64(5, 3, 2), _f64(5, 4)

    def body(mesh):
        da = distribute_tensor(a, mesh, [Shard(0)])
        db = distribute_tensor(b, mesh, [Shard(0)])
        dx = distribute_tensor(x, mesh, [Shard(1)])
        with fallback_policy("error"):
            c = torch._chunk_cat([da, db], 1, 2)
            assert c.placements == (Shard(0),)
            y = torch.as_strided_scatter(dx, dx * 2, (5, 4), (4, 1))
            assert y.placements == (Shard(1),)
        return c.full_tensor(), y.full_tensor()

    c, y = _world((3,), body)[0]
    assert torch.equal(c, torch._chunk_cat([a, b], 1, 2))
    assert torch.equal(y, torch.as_strided_scatter(x, x * 2, (5, 4), (4, 1)))
