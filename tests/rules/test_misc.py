"""Convolution, sort/topk/scans, dropout, copies and conversions: every strategy sound, and
end-to-end runs on simpg."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import simpg
from tests.support.cases import MESHES, soundness_test
from tests.support.mesh_world import run_on_mesh as _world
from dtensor import (DTensor, Partial, Replicate, Shard, distribute_tensor, fallback_policy)
from dtensor.ops.misc import native_dropout
from dtensor.ops.registry import Registry
from dtensor.ops.soundness import check_op

aten = torch.ops.aten
g = torch.Generator().manual_seed(0)


def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=g).to(dtype)


def _conv(x, w, b, stride=(1, 1), padding=(0, 0), dilation=(1, 1), transposed=False,
          output_padding=(0, 0), groups=1):
    return (x, w, b, list(stride), list(padding), list(dilation), transposed,
            list(output_padding), groups)


def _conv_bwd(args, mask):
    x, w, b = args[:3]
    out = aten.convolution(*args)
    return (randn(*out.shape), x, w, None if b is None else [b.shape[0]], *args[3:], mask)


CONV = [
    ("conv2d", _conv(randn(5, 3, 6, 5), randn(4, 3, 3, 3), randn(4), padding=(1, 0))),
    ("conv2d-nobias", _conv(randn(3, 5, 4, 4), randn(3, 5, 2, 2), None, stride=(2, 1))),
    ("conv1d", _conv(randn(1, 2, 7), randn(5, 2, 3), randn(5), dilation=(2,), stride=(1,),
                     padding=(0,), output_padding=(0,))),
    ("conv2d-groups", _conv(randn(4, 4, 5, 5), randn(6, 2, 3, 3), randn(6), groups=2)),
    ("convT", _conv(randn(3, 4, 3, 3), randn(4, 5, 2, 2), randn(5), stride=(2, 2),
                    transposed=True, output_padding=(1, 0))),
    ("conv-empty", _conv(randn(0, 3, 4, 4), randn(2, 3, 3, 3), randn(2))),
]
# dtensor/ops/local_args.py (Note [global size arguments]) takes every SymInt[] argument
# named "stride" for the output's strides and overwrites convolution's kernel stride with it,
# in the harness and in dispatch alike: every convolution call fails until that is fixed
CONV_CASES = [(n, aten.convolution.default, a) for n, a in CONV]
for _n, _a in CONV[:5]:
    for _m in ([True, True, True], [False, True, True], [True, True, False]):
        if _a[2] is None and _m[2]:
            continue
        _flags = "".join("1" if b else "0" for b in _m)
        CONV_CASES.append((f"{_n}-bwd{_flags}", aten.convolution_backward.default,
                           _conv_bwd(_a, _m)))
# Partial inputs are split into large integer addends: a conv's sums of products of them
# cancel to the result with float32 rounding well above the default atol
test_every_convolution_strategy_is_sound = soundness_test(CONV_CASES, atol=1e-3, rtol=1e-4)

x54 = randn(5, 4)
CASES = [
    ("sort", aten.sort.default, (x54,)),
    ("sort-d0-desc", aten.sort.default, (x54, 0, True)),
    ("sort-int", aten.sort.default, (torch.randint(0, 5, (3, 6), generator=g), 1)),
    ("argsort", aten.argsort.default, (randn(2, 3, 5), 1)),
    ("topk", aten.topk.default, (x54, 2)),
    ("topk-d0", aten.topk.default, (x54, 3, 0, False)),
    ("cumsum", aten.cumsum.default, (x54, 1)),
    ("cumsum-d0", aten.cumsum.default, (randn(3, 1, 2), 0)),
    ("cumsum-int", aten.cumsum.default, (torch.randint(-9, 9, (5, 3), generator=g), 0)),
    ("cumprod", aten.cumprod.default, (x54, -1)),
    ("cummax", aten.cummax.default, (x54, 0)),
    ("cummin", aten.cummin.default, (randn(1, 6), 1)),
    ("logcumsumexp", aten.logcumsumexp.default, (randn(4, 3, 2), 2)),
    ("sort-0d", aten.sort.default, (torch.randn((), generator=g),)),
    ("sort-empty", aten.sort.default, (randn(0, 3), 1)),
    ("dropout-eval", aten.native_dropout.default, (x54, 0.3, False)),
    ("dropout_bwd", aten.native_dropout_backward.default,
     (x54, randn(5, 4) > 0, 2.0)),
    ("to_copy-f64", aten._to_copy.default, (x54,)),
    ("copy", aten.copy.default, (x54, randn(4))),
    ("copy-same", aten.copy.default, (randn(3, 2), randn(3, 2, dtype=torch.float64))),
    # keyword arguments
    ("sort-stable", aten.sort.stable, (x54,), {"stable": True, "dim": 0}),
    ("argsort-stable", aten.argsort.stable, (x54,), {"stable": True, "dim": 0,
                                                     "descending": True}),
    ("cumsum-dtype", aten.cumsum.default, (x54, 1), {"dtype": torch.float64}),
    ("topk-smallest", aten.topk.default, (x54, 2), {"dim": 0, "largest": False}),
]
TO_DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64,
             torch.int32, torch.bool]
for _src in (torch.float32, torch.float16, torch.int32, torch.int16):
    for _dst in TO_DTYPES:
        CASES.append((f"to-{_src}-{_dst}".replace("torch.", ""), aten._to_copy.default,
                      ((randn(5, 3) * 40).round().to(_src),), {"dtype": _dst}))
test_every_strategy_is_sound = soundness_test(CASES)



def test_train_dropout_replicate_is_the_single_device_mask():
    """Note [dropout and the RNG]: every rank draws from a generator in the same state; the
    harness runs ranks on one generator, so the op is wrapped to reseed before each call."""

    def seeded(*args, **kwargs):
        torch.manual_seed(1234)
        return aten.native_dropout.default(*args, **kwargs)

    seeded._schema = aten.native_dropout.default._schema  # type: ignore[attr-defined]
    reg = Registry()
    reg.register([seeded], native_dropout)
    with torch.random.fork_rng():
        for mesh_shape in MESHES:
            assert check_op(seeded, (x54, 0.4, True), {}, mesh_shape, registry=reg) == []


# -- end to end on simpg --------------------------------------------------------------------


def test_conv2d_batch_and_channel_sharded_forward_backward():
    torch.manual_seed(0)
    x, w, b = torch.randn(5, 3, 6, 6), torch.randn(4, 3, 3, 3), torch.randn(4)
    refs = [t.clone().requires_grad_() for t in (x, w, b)]
    F.conv2d(*refs, padding=1).pow(2).sum().backward()

    def body(mesh):
        dx = distribute_tensor(x, mesh, [Shard(0), Replicate()]).requires_grad_()
        dw = distribute_tensor(w, mesh, [Replicate(), Shard(0)]).requires_grad_()
        db = distribute_tensor(b, mesh, [Replicate(), Shard(0)]).requires_grad_()
        with simpg.trace() as t:
            out = F.conv2d(dx, dw, db, padding=1)
        assert out.placements == (Shard(0), Shard(1)) and not t.records
        assert torch.allclose(out.full_tensor(), F.conv2d(x, w, b, padding=1), atol=1e-5)
        with fallback_policy("silent"):
            out.pow(2).sum().backward()
        for got, ref in zip((dx, dw, db), refs):
            assert torch.allclose(got.grad.full_tensor(), ref.grad, atol=1e-4)

    _world((2, 2), body)


def test_sort_topk_cumsum_keep_other_dims_sharded():
    torch.manual_seed(1)
    x = torch.randn(7, 5)

    def body(mesh):
        dx = distribute_tensor(x, mesh, [Shard(0)])
        with simpg.trace() as t:
            values, idx = dx.sort(1)
            top = dx.topk(2, dim=1).values
            c = dx.cumsum(1)
        assert {values.placements, idx.placements, top.placements, c.placements} == {
            (Shard(0),)} and not t.records
        assert torch.equal(values.full_tensor(), x.sort(1).values)
        assert torch.equal(idx.full_tensor(), x.sort(1).indices)
        assert torch.equal(top.full_tensor(), x.topk(2, dim=1).values)
        assert torch.allclose(c.full_tensor(), x.cumsum(1))
        with simpg.trace() as t:
            along = dx.cumsum(0)  # the scanned dim is sharded: moved first
        assert along.placements != (Shard(0),) and len(t.records) == 1
        assert torch.allclose(along.full_tensor(), x.cumsum(0))

    _world((3,), body)


def test_to_copy_and_copy_keep_placements():
    def body(mesh):
        import torch.distributed as dist

        p = DTensor.from_local(torch.full((3, 2), float(dist.get_rank() + 1)), mesh, [Partial()])
        with simpg.trace() as t:
            wide = p.to(torch.float64)
        assert wide.placements == (Partial(),) and not t.records
        assert torch.equal(wide.full_tensor(), torch.full((3, 2), 3.0, dtype=torch.float64))
        half = p.to(torch.float16)  # rounding addends is not exact: reduced first
        assert not isinstance(half.placements[0], Partial)
        assert torch.equal(half.full_tensor(), torch.full((3, 2), 3.0, dtype=torch.float16))
        s = distribute_tensor(torch.arange(6.0).reshape(3, 2), mesh, [Shard(0)])
        dst = distribute_tensor(torch.zeros(3, 2, dtype=torch.float64), mesh, [Shard(0)])
        with simpg.trace() as t:
            dst.copy_(s)
        assert dst.placements == (Shard(0),) and not t.records
        assert torch.equal(dst.full_tensor(), torch.arange(6.0).reshape(3, 2).double())

    _world((2,), body)


def test_dropout_on_sharded_input_matches_single_device():
    """CPU F.dropout runs bernoulli_ (no rule: Note [dropout and the RNG]); the fallback
    draws the whole mask on every rank, so the result is the single-device one."""
    x = torch.randn(6, 4)

    def body(mesh):
        dx = distribute_tensor(x, mesh, [Shard(0), Shard(1)]).requires_grad_()
        torch.manual_seed(7)
        with fallback_policy("silent"):
            out = F.dropout(dx, 0.5)
            out.sum().backward()
        torch.manual_seed(7)
        ref_x = x.clone().requires_grad_()
        ref = F.dropout(ref_x, 0.5)
        ref.sum().backward()
        assert out.placements == (Shard(0), Shard(1))
        assert torch.equal(out.full_tensor(), ref)
        assert torch.equal(dx.grad.full_tensor(), ref_x.grad)
        torch.manual_seed(3)
        with fallback_policy("error"):
            d, mask = aten.native_dropout(dx.detach(), 0.5, True)  # keeps the layout
        torch.manual_seed(3)
        ref_d, ref_mask = aten.native_dropout(x, 0.5, True)
        # Note [sharded random ops]: the whole mask drawn on every rank, each keeps its piece
        assert d.placements == mask.placements == (Shard(0), Shard(1))
        assert torch.equal(d.full_tensor(), ref_d) and torch.equal(mask.full_tensor(), ref_mask)

    _world((2, 2), body)
