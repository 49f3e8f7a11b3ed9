"""Every op that runs with grad runs under torch.no_grad() and torch.inference_mode() with the
same placements, no extra communication and one device's values (Note [inference mode] in
dtensor.dispatch). Before, composite ops (linear, softmax, sdpa...) reached dispatch whole
under inference mode and gathered, and views of normal tensors raised "Cannot set
version_counter for inference tensor"; torch's DTensor raises on matmul, bmm, chunk and
.transpose().contiguous() there."""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F

import dtensor
from dtensor import Replicate, Shard
from dtensor.comm.debug_mode import CommDebugMode

_g = torch.Generator().manual_seed(0)
X = torch.randn(8, 6, 16, generator=_g)        # batch, sequence, features
W = torch.randn(12, 16, generator=_g)          # a linear's weight
Q = torch.randn(8, 2, 6, 8, generator=_g)      # batch, heads, sequence, head dim
IMG = torch.randn(4, 3, 6, 6, generator=_g)
K = torch.randn(5, 3, 3, 3, generator=_g)

OPS = {
    "linear": lambda x, w: F.linear(x, w),
    "linear_rowwise_weight": lambda x, w: F.linear(x, w.t().contiguous().t()),
    "matmul": lambda x, w: torch.matmul(x, w.t()),
    "bmm": lambda x, w: torch.bmm(x, x.transpose(1, 2)),
    "einsum": lambda x, w: torch.einsum("bsd,ed->bse", x, w),
    "softmax": lambda x, w: F.softmax(x, -1),
    "log_softmax": lambda x, w: F.log_softmax(x, -1),
    "layer_norm": lambda x, w: F.layer_norm(x, (16,)),
    "rms_norm": lambda x, w: F.rms_norm(x, (16,)),
    "gelu": lambda x, w: F.gelu(x),
    "silu_mul": lambda x, w: F.silu(x) * x,
    "reshape": lambda x, w: x.reshape(8, 96),
    "flatten": lambda x, w: x.flatten(1),
    "view": lambda x, w: x.view(8, 6, 4, 4),
    "chunk": lambda x, w: x.chunk(2, -1)[1],
    "split": lambda x, w: x.split([6, 10], -1)[0],
    "transpose_contiguous": lambda x, w: x.transpose(1, 2).contiguous(),
    "permute": lambda x, w: x.permute(0, 2, 1),
    "pad": lambda x, w: F.pad(x, (1, 2)),
    "where": lambda x, w: torch.where(x > 0, x, torch.zeros(())),
    "sum": lambda x, w: x.sum(-1),
    "mean": lambda x, w: x.mean(1),
    "dropout_eval": lambda x, w: F.dropout(x, 0.5, training=False),
    "sdpa": lambda x, w: F.scaled_dot_product_attention(
        x.unflatten(-1, (2, 8)).transpose(1, 2), x.unflatten(-1, (2, 8)).transpose(1, 2),
        x.unflatten(-1, (2, 8)).transpose(1, 2)),
}
MODES = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode}


def _run(mesh, fn, mode):
    x = dtensor.distribute_tensor(X, mesh, [Shard(0)])
    w = dtensor.distribute_tensor(W, mesh, [Shard(0)])
    ctx = MODES[mode]() if mode else contextlib.nullcontext()
    with ctx, CommDebugMode() as comm:
        out = fn(x, w)
    return out, comm.get_total_counts()


@pytest.mark.world(4)
def test_ops_keep_placements_and_move_nothing_more_without_grad():
    mesh = dtensor.init_device_mesh("cpu", (4,))
    for name, fn in OPS.items():
        with_grad, moves = _run(mesh, fn, None)
        want = fn(X, W)
        for mode in MODES:
            out, n = _run(mesh, fn, mode)
            assert out.placements == with_grad.placements, (name, mode, out.placements)
            assert n <= moves, f"{name} under {mode}: {n} collectives, {moves} with grad"
            torch.testing.assert_close(out.full_tensor(), want, msg=f"{name} under {mode}")


@pytest.mark.world(4)
def test_inference_mode_outputs_are_inference_tensors_and_views_of_normal_ones_are_not():
    mesh = dtensor.init_device_mesh("cpu", (4,))
    x = dtensor.distribute_tensor(X, mesh, [Shard(0)])
    with torch.inference_mode():
        y = x * 2              # a new tensor: an inference tensor, as torch makes it
        v = x.transpose(1, 2)  # a view of a normal tensor: normal, sharing x's version
        assert y.is_inference() and not v.is_inference()
        z = y.transpose(1, 2)  # a view of an inference tensor is one
        assert z.is_inference()
    x.add_(1)
    assert v._version == x._version  # the view still tracks its base's writes


@pytest.mark.world(4)
def test_a_model_evaluates_under_inference_mode_like_one_device():
    from dtensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    mesh = dtensor.init_device_mesh("cpu", (4,))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                torch.nn.Linear(32, 16), torch.nn.LayerNorm(16))
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                              torch.nn.Linear(32, 16), torch.nn.LayerNorm(16))
    parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    with torch.inference_mode(), CommDebugMode() as comm:
        out = model(X)
    assert comm.get_total_counts() == 1  # the row-wise layer's one all-reduce
    with torch.inference_mode():
        torch.testing.assert_close(out, ref(X))


@pytest.mark.world(2)
def test_composite_ops_decompose_only_without_a_rule():
    # a composite op with a rule of ours keeps it (no decomposition), and an op with neither a
    # rule nor a composite kernel still falls back with the policy's warning or error
    mesh = dtensor.init_device_mesh("cpu", (2,))
    x = dtensor.distribute_tensor(torch.arange(8.0), mesh, [Shard(0)])
    with torch.inference_mode(), dtensor.fallback_policy("error"):
        assert x.reshape(4, 2).placements == (Shard(0),)  # whole rows per rank
        with pytest.raises(dtensor.NoShardingRuleError, match="nonzero"):
            torch.nonzero(x)
    r = dtensor.distribute_tensor(torch.arange(6.0), mesh, [Replicate()])
    with torch.inference_mode():
        assert r.reshape(3, 2).placements == (Replicate(),)
