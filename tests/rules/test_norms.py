"""Normalization and activation rules (dtensor/ops/norms.py): every strategy sound (forward
and backward ops, even, uneven and empty shapes); group norm over the batch and whole groups,
and _batch_norm_with_update over channels and averaged running stats, offered where the math
allows; end-to-end forward/backward on simpg against single-device."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import simpg
from tests.support.cases import offered, soundness_test, strategies
from tests.support.mesh_world import run_on_mesh as _world
from dtensor import Replicate, Shard, distribute_tensor, fallback_policy

aten = torch.ops.aten
_gen = torch.Generator().manual_seed(3)


def _r(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(shape, generator=_gen).to(dtype)


def _layer_norm_bwd(x, shape, w, b, mask):
    _, mean, rstd = aten.native_layer_norm(x, shape, w, b, 1e-5)
    return (aten.native_layer_norm_backward.default,
            (_r(*x.shape), x, shape, mean, rstd, w, b, mask), {})


def _rms_bwd(x, shape, w, mask):
    _, rstd = aten._fused_rms_norm(x, shape, w, 1e-6)
    return aten._fused_rms_norm_backward.default, (_r(*x.shape), x, shape, rstd, w, mask), {}


def _group_norm_bwd(x, w, groups, mask):
    n, c = x.shape[:2]
    hw = x[0, 0].numel()
    _, mean, rstd = aten.native_group_norm(x, w, w, n, c, hw, groups, 1e-5)
    return (aten.native_group_norm_backward.default,
            (_r(*x.shape), x, mean, rstd, w, n, c, hw, groups, mask), {})


def _batch_norm_bwd(x, train, mask):
    c = x.shape[1]
    w, rm, rv = _r(c), torch.zeros(c), torch.ones(c)
    _, sm, si = aten.native_batch_norm(x, w, None, rm.clone(), rv.clone(), train, 0.1, 1e-5)
    return (aten.native_batch_norm_backward.default,
            (_r(*x.shape), x, w, rm, rv, sm, si, train, 1e-5, mask), {})


def _bn_args(c: int) -> tuple:
    return _r(c), _r(c), torch.zeros(c), torch.ones(c)


X, U = _r(4, 6), _r(5, 3, 2)
CASES = [
    (aten._softmax.default, (X, 1, False), {}),
    (aten._softmax.default, (U, 0, False), {}),
    (aten._softmax.default, (U.double(), -1, False), {}),
    (aten._log_softmax.default, (U, 1, False), {}),
    (aten._log_softmax.default, (_r(0, 3), 1, False), {}),
    (aten._softmax_backward_data.default, (X, X.softmax(1), 1, torch.float32), {}),
    (aten._softmax_backward_data.default, (U, U.softmax(0), 0, torch.float32), {}),
    (aten._log_softmax_backward_data.default, (U, U.log_softmax(2), -1, torch.float32), {}),
    (aten.native_layer_norm.default, (U, [2], _r(2), _r(2), 1e-5), {}),
    (aten.native_layer_norm.default, (U, [3, 2], None, None, 1e-5), {}),
    (aten.native_layer_norm.default, (_r(1, 3, 4), [4], _r(4), None, 1e-5), {}),
    _layer_norm_bwd(U, [2], _r(2), _r(2), [True, True, True]),
    _layer_norm_bwd(U, [3, 2], _r(3, 2), None, [True, True, False]),
    _layer_norm_bwd(_r(7, 4), [4], None, None, [True, False, False]),
    (aten._fused_rms_norm.default, (U, [2], _r(2), 1e-6), {}),
    (aten._fused_rms_norm.default, (U, [3, 2], None, None), {}),
    (aten.native_group_norm.default, (_r(4, 6, 3), _r(6), _r(6), 4, 6, 3, 2, 1e-5), {}),
    _group_norm_bwd(_r(4, 6, 3), _r(6), 3, [True, True, True]),
    (aten.native_batch_norm.default, (_r(5, 3, 2), *_bn_args(3), False, 0.1, 1e-5), {}),
    (aten.native_batch_norm.default, (_r(5, 3, 2), *_bn_args(3), True, 0.1, 1e-5), {}),
    (aten.native_batch_norm.default, (_r(4, 5), *_bn_args(5), True, 0.1, 1e-5), {}),
    (aten.native_batch_norm.default, (_r(4, 5), _r(5), None, None, None, True, 0.1, 1e-5), {}),
    (aten._native_batch_norm_legit.default, (_r(5, 3, 2), *_bn_args(3), True, 0.1, 1e-5), {}),
    (aten._native_batch_norm_legit.default, (_r(5, 3, 2), *_bn_args(3), False, 0.1, 1e-5), {}),
    (aten._native_batch_norm_legit.no_stats, (_r(6, 4, 3), _r(4), _r(4), True, 0.1, 1e-5), {}),
    (aten._native_batch_norm_legit_no_training.default, (_r(5, 3, 2), *_bn_args(3), 0.1, 1e-5),
     {}),
    _batch_norm_bwd(_r(5, 3, 2), False, [True, True, True]),
    _batch_norm_bwd(_r(5, 3, 2), True, [True, True, True]),
    _batch_norm_bwd(_r(6, 4), True, [True, False, True]),
    # activations' backward ops take the generic pointwise rule
    (aten.threshold_backward.default, (U, U.relu(), 0.0), {}),
    (aten.gelu_backward.default, (U, _r(3, 2)), {"approximate": "tanh"}),
    (aten.gelu_backward.default, (X, X), {}),
    (aten.silu_backward.default, (U, U), {}),
    (aten.tanh_backward.default, (X, X.tanh()), {}),
    (aten.sigmoid_backward.default, (U, U.sigmoid()), {}),
    (aten.hardtanh_backward.default, (X, X, -1.0, 1.0), {}),
    (aten.leaky_relu_backward.default, (X, X, 0.01, False), {}),
    (aten.elu_backward.default, (U, 1.0, 1.0, 1.0, False, U), {}),
    (aten.softplus_backward.default, (U, U, 1.0, 20.0), {}),
    (aten.hardsigmoid_backward.default, (X, X), {}),
    (aten.hardswish_backward.default, (U, U), {}),
    (aten.mish_backward.default, (U, U), {}),
    (aten.softshrink_backward.default, (X, X, 0.5), {}),
    (aten.hardshrink_backward.default, (X, X, 0.5), {}),
    (aten.log_sigmoid_backward.default, (U, U, aten.log_sigmoid_forward(U)[1]), {}),
    (aten.hardswish.default, (U,), {}),
    (aten.log_sigmoid_forward.default, (U,), {}),
    (aten.native_batch_norm.default, (_r(1, 2, 1), *_bn_args(2), False, 0.1, 1e-5), {}),
]


test_every_strategy_is_sound = soundness_test(CASES, atol=1e-4, rtol=1e-4)


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


# checked at check_op's own tolerance, tighter than the cases above
GROUP_NORM_CASES = [
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
test_every_group_norm_strategy_is_sound = soundness_test(GROUP_NORM_CASES)




def _single(fn, *tensors):
    leaves = [t.clone().requires_grad_() for t in tensors]
    out = fn(*leaves)
    out.backward(torch.ones_like(out))
    return out.detach(), [t.grad for t in leaves]


def _distributed(fn, mesh_shape, placements, *tensors, expect=None, quiet_fwd=True):
    def body(mesh):
        leaves = [distribute_tensor(t, mesh, p).requires_grad_()
                  for t, p in zip(tensors, placements)]
        with simpg.trace() as t:
            out = fn(*leaves)
        if quiet_fwd:
            assert not t.records, [r.op for r in t.records]
        if expect is not None:
            assert out.placements == expect
        out.backward(torch.ones_like(out))
        return out.full_tensor(), [x.grad.full_tensor() for x in leaves]

    return _world(mesh_shape, body)[0]


def _check_same(fn, mesh_shape, placements, *tensors, expect=None, quiet_fwd=True):
    out, grads = _distributed(fn, mesh_shape, placements, *tensors, expect=expect,
                              quiet_fwd=quiet_fwd)
    ref, ref_grads = _single(fn, *tensors)
    assert torch.allclose(out, ref, atol=1e-5)
    for g, rg in zip(grads, ref_grads):
        assert torch.allclose(g, rg, atol=1e-5)


def test_softmax_and_activations_keep_row_shards_forward_and_backward():
    x = _r(5, 7)
    fn = lambda a: F.gelu(F.silu(a.softmax(-1)).relu()).tanh() + a.log_softmax(1)  # noqa: E731
    _check_same(fn, (2, 2), [[Shard(0), Replicate()]], x, expect=(Shard(0), Replicate()))


def test_layer_norm_shards_the_batch_and_weight_grads_come_back_right():
    x, w, b = _r(3, 5, 4), _r(4), _r(4)
    fn = lambda a, w, b: F.layer_norm(a, (4,), w, b)  # noqa: E731
    _check_same(fn, (2, 2), [[Shard(0), Shard(1)], [Replicate()] * 2, [Replicate()] * 2],
                x, w, b, expect=(Shard(0), Shard(1)))


def test_rms_norm_decomposition_on_row_shards():
    x, w = _r(5, 6), _r(6)
    fn = lambda a, w: F.rms_norm(a, (6,), w, eps=1e-6)  # noqa: E731
    _check_same(fn, (2,), [[Shard(0)], [Replicate()]], x, w, expect=(Shard(0),))


def test_group_norm_runs_replicated_and_matches():
    x, w, b = _r(4, 6, 3), _r(6), _r(6)
    fn = lambda a, w, b: F.group_norm(a, 3, w, b)  # noqa: E731
    _check_same(fn, (2,), [[Shard(0)], [Replicate()], [Replicate()]], x, w, b, quiet_fwd=False)


def test_batch_norm_shards_channels_in_training_and_updates_running_stats():
    x, w, b = _r(4, 6, 3), _r(6), _r(6)

    def body(mesh):
        a = distribute_tensor(x, mesh, [Shard(1)]).requires_grad_()
        rm = distribute_tensor(torch.zeros(6), mesh, [Shard(0)])
        rv = distribute_tensor(torch.ones(6), mesh, [Shard(0)])
        dw, db = (distribute_tensor(v, mesh, [Shard(0)]) for v in (w, b))
        with simpg.trace() as t:
            out = F.batch_norm(a, rm, rv, dw, db, training=True)
        assert not t.records and out.placements == (Shard(1),)
        out.sum().backward()
        return out.full_tensor(), rm.full_tensor(), rv.full_tensor(), a.grad.full_tensor()

    out, rm, rv, grad = _world((2,), body)[0]
    ref_x = x.clone().requires_grad_()
    ref_rm, ref_rv = torch.zeros(6), torch.ones(6)
    ref = F.batch_norm(ref_x, ref_rm, ref_rv, w, b, training=True)
    ref.sum().backward()
    assert torch.allclose(out, ref, atol=1e-5) and torch.allclose(grad, ref_x.grad, atol=1e-5)
    assert torch.allclose(rm, ref_rm) and torch.allclose(rv, ref_rv)


def test_batch_norm_eval_shards_the_batch():
    x, w, b = _r(4, 6, 3), _r(6), _r(6)
    rm, rv = _r(6), torch.rand(6, generator=_gen) + 0.5
    fn = lambda a, w, b: F.batch_norm(a, rm, rv, w, b, training=False)  # noqa: E731
    _check_same(fn, (2,), [[Shard(0)], [Replicate()], [Replicate()]], x, w, b,
                expect=(Shard(0),))


_STAT_OPS = {  # (x, w, b, running_mean, running_var) -> the op, training
    "native_batch_norm": lambda *t: aten.native_batch_norm(*t, True, 0.1, 1e-5),
    "_native_batch_norm_legit": lambda *t: aten._native_batch_norm_legit(*t, True, 0.1, 1e-5),
    "_batch_norm_with_update": lambda *t: aten._batch_norm_with_update(*t, 0.1, 1e-5),
}
_STAT_LAYOUTS = [("S0", "S0"), ("S0", "R"), ("R", "S0")]


@pytest.mark.parametrize("mesh_shape,channels", [((2,), 3), ((4,), 2), ((2, 2), 6)], ids=str)
@pytest.mark.parametrize("stats", _STAT_LAYOUTS, ids="-".join)
@pytest.mark.parametrize("name", list(_STAT_OPS))
def test_running_statistics_keep_every_placement_they_are_updated_in(name, stats, mesh_shape,
                                                                     channels):
    # Note [running statistics in pieces]: pinned, they cannot move, so a strategy must keep
    # them (as torch's op-database pattern needs when a reference still holds the pieces);
    # uneven and empty channel pieces included; on a 2-d mesh on the last mesh dim (the only
    # one where the rule offers it while the channels shard evenly)
    x, w, b = _r(5, channels, 3), _r(channels), _r(channels)
    rm0, rv0 = _r(channels), torch.rand(channels, generator=_gen) + 0.5
    ndim = len(mesh_shape)

    def body(mesh):
        def place(kind):
            return [Replicate()] * (ndim - 1) + [Shard(0) if kind == "S0" else Replicate()]

        rm = distribute_tensor(rm0.clone(), mesh, place(stats[0])).pin()
        rv = distribute_tensor(rv0.clone(), mesh, place(stats[1])).pin()
        out = _STAT_OPS[name](distribute_tensor(x, mesh, [Shard(1)] * ndim), w, b, rm, rv)
        return [o.full_tensor() for o in out[:3]], rm.full_tensor(), rv.full_tensor()

    got, rm, rv = _world(mesh_shape, body)[0]
    ref_rm, ref_rv = rm0.clone(), rv0.clone()
    want = _STAT_OPS[name](x, w, b, ref_rm, ref_rv)
    for g, r in zip(got, want[:3]):
        assert torch.allclose(g, r, atol=1e-5)
    assert torch.allclose(rm, ref_rm, atol=1e-6) and torch.allclose(rv, ref_rv, atol=1e-6)


def _input_dims(op, args, pos: int = 0, mesh_shape=(2,)) -> set[int]:
    return {s.inputs[pos].dim for s in strategies(op, args, mesh_shape=mesh_shape)
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
    found = offered(aten._batch_norm_with_update.default, args)
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

    y, gx, gw = _world((2,), body)[0]
    rx, rw = x.clone().requires_grad_(), w.clone().requires_grad_()
    ry = torch.nn.functional.group_norm(rx, 2, rw, b)
    (ry * ry).sum().backward()
    assert torch.allclose(y, ry, atol=1e-5) and torch.allclose(gx, rx.grad, atol=1e-4)
    assert torch.allclose(gw, rw.grad, atol=1e-4)
