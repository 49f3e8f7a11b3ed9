"""Group norm over the batch and whole groups, _batch_norm_with_update
(dtensor/ops/norms_more.py): every strategy sound on even, uneven and empty shapes over the
meshes; batch and group sharding offered where the math allows; end to end on simpg."""

from __future__ import annotations

import pytest
import torch
from tests.support.mesh_world import run_on_mesh

from dtensor import Replicate, Shard, distribute_tensor, fallback_policy
from dtensor.ops.propagate import per_dim_strategies
from dtensor.ops.soundness import check_op, op_spec

aten = torch.ops.aten
MESHES = [(2,), (3,), (2, 2), (4,)]
g = torch.Generator().manual_seed(11)


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=g)


def _gn(n: int, c: int, *spatial: int, group: int, affine: bool = True):
    hxw = 1
    for s in spatial:
        hxw *= s
    w, b = (_r(c), _r(c)) if affine else (None, None)
    return (_r(n, c, *spatial), w, b, n, c, hxw, group, 1e-5)


def _gn_backward(n: int, c: int, *spatial: int, group: int, mask=(True, True, True),
                 affine: bool = True):
    x, w, b, *sizes, eps = _gn(n, c, *spatial, group=group, affine=affine)
    _, mean, rstd = aten.native_group_norm(x, w, b, *sizes, eps)
    return (_r(*x.shape), x, mean, rstd, w, *sizes, list(mask))


CASES = [
    (aten.native_group_norm.default, _gn(5, 4, 3, group=2)),
    (aten.native_group_norm.default, _gn(3, 8, 2, 3, group=4)),  # groups divide every mesh
    (aten.native_group_norm.default, _gn(1, 6, 3, group=3, affine=False)),
    (aten.native_group_norm.default, _gn(2, 4, group=4)),  # no spatial dims
    (aten.native_group_norm.default, _gn(0, 4, 3, group=2)),
    (aten.native_group_norm_backward.default, _gn_backward(5, 4, 3, group=2)),
    (aten.native_group_norm_backward.default, _gn_backward(3, 8, 2, group=4)),
    (aten.native_group_norm_backward.default,
     _gn_backward(2, 4, 3, group=4, mask=(True, False, True))),
    (aten.native_group_norm_backward.default,
     _gn_backward(3, 4, 3, group=2, mask=(True, False, False), affine=False)),
    (aten._batch_norm_with_update.default, (_r(3, 4, 2), _r(4), _r(4), _r(4), _r(4).abs(),
                                            0.1, 1e-5)),
    (aten._batch_norm_with_update.default, (_r(5, 3), None, None, _r(3), _r(3).abs(),
                                            0.5, 1e-5)),
    (aten._batch_norm_with_update.default, (_r(2, 5, 3, 2), _r(5), _r(5), _r(5),
                                            _r(5).abs(), -1.0, 0.5)),
]


def _id(case) -> str:
    op, args = case
    shapes = ",".join(str(tuple(a.shape)) for a in args if isinstance(a, torch.Tensor))
    return f"{op}{shapes}"


@pytest.mark.parametrize("mesh_shape", MESHES, ids=str)
@pytest.mark.parametrize("op,args", CASES, ids=[_id(c) for c in CASES])
def test_every_strategy_of_the_rule_is_sound(op, args, mesh_shape):
    assert check_op(op, args, {}, mesh_shape) == []


def _input_dims(op, args, pos: int = 0, mesh_shape=(2,)) -> set[int]:
    spec = op_spec(op, args, {}, mesh_shape)
    return {s.inputs[pos].dim for s in per_dim_strategies(spec)[0]
            if isinstance(s.inputs[pos], Shard)}


def test_group_norm_shards_the_batch_and_whole_groups_only():
    assert _input_dims(aten.native_group_norm.default, _gn(5, 4, 3, group=2)) == {0, 1}
    # 3 groups cannot be split evenly over 2 ranks: the channel dim stays whole
    assert _input_dims(aten.native_group_norm.default, _gn(5, 6, 3, group=3)) == {0}
    # on a (2, 2) mesh the groups must split over all 4 ranks
    assert _input_dims(aten.native_group_norm.default, _gn(5, 4, 3, group=2), 0,
                       (2, 2)) == {0}
    assert _input_dims(aten.native_group_norm_backward.default,
                       _gn_backward(5, 8, 3, group=4), 1) == {0, 1}


def test_batch_norm_with_update_offers_channels_and_averaged_running_stats():
    args = (_r(3, 4, 2), _r(4), _r(4), _r(4), _r(4).abs(), 0.1, 1e-5)
    spec = op_spec(aten._batch_norm_with_update.default, args, {}, (2,))
    found = {repr(s) for s in per_dim_strategies(spec)[0]}
    assert "Strategy(S(1),S(0),S(0),S(0),S(0)->S(1),S(0),S(0),R)" in found
    assert "Strategy(R,R,R,P(avg),P(avg)->R,R,R,R)" in found


def test_group_norm_end_to_end_batch_sharded_forward_and_backward_without_fallback():
    x, w, b = _r(5, 4, 3, 2), _r(4), _r(4)

    def body(mesh):
        dx = distribute_tensor(x, mesh, [Shard(0)]).requires_grad_()
        dw = distribute_tensor(w, mesh, [Replicate()]).requires_grad_()
        db = distribute_tensor(b, mesh, [Replicate()]).requires_grad_()
        with fallback_policy("error"):
            y = torch.nn.functional.group_norm(dx, 2, dw, db)
            assert y.placements == (Shard(0),)
            (y * y).sum().backward()
        return y.full_tensor(), dx.grad.full_tensor(), dw.grad.full_tensor()

    y, gx, gw = run_on_mesh((2,), body)[0]
    rx, rw = x.clone().requires_grad_(), w.clone().requires_grad_()
    ry = torch.nn.functional.group_norm(rx, 2, rw, b)
    (ry * ry).sum().backward()
    assert torch.allclose(y, ry, atol=1e-5) and torch.allclose(gx, rx.grad, atol=1e-4)
    assert torch.allclose(gw, rw.grad, atol=1e-4)
