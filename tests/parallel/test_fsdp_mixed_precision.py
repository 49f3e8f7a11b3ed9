"""fully_shard's ``mp_policy`` (Note [mixed precision in fully_shard]): stored parameters,
gradients and optimizer state keep their dtype; the forward computes in ``param_dtype``;
training matches torch's FSDP2 with the same policy (both on simpg) and one device."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import simpg
from dtensor import init_device_mesh
from dtensor.parallel import FullyShardError, MixedPrecisionPolicy, fully_shard
from tests.support.dropin_world import fresh_torch_caches
from tests.support.fsdp_net import Net

BF16, F32 = torch.bfloat16, torch.float32
X = torch.randn(8, 5, 8, generator=torch.Generator().manual_seed(0))
STEPS = 3


def _train(lib: str, dp: int, policy: dict[str, Any], micro: int = 1) -> dict[str, Any]:
    """One rank: ``Net`` fully sharded per block and root by ``lib`` under ``policy`` (the
    blocks without its ``output_dtype``: the root's head computes in ``param_dtype``), each
    step in ``micro`` micro-batches, gradients synced on the last."""
    if lib == "torch":
        from torch.distributed.device_mesh import init_device_mesh as torch_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy as TorchPolicy
        from torch.distributed.fsdp import fully_shard as torch_fully_shard
        fresh_torch_caches()
        mesh, shard, make = torch_mesh("cpu", (dp,)), torch_fully_shard, TorchPolicy
    else:
        mesh, shard, make = init_device_mesh("cpu", (dp,)), fully_shard, MixedPrecisionPolicy
    torch.manual_seed(0)
    model = Net()
    inner = {k: v for k, v in policy.items() if k != "output_dtype"}
    for block in model.blocks:
        shard(block, mesh=mesh, mp_policy=make(**inner))
    shard(model, mesh=mesh, mp_policy=make(**policy))
    seen: dict[str, torch.dtype] = {}
    model.blocks[0].w1.register_forward_hook(
        lambda m, args, out: seen.update(weight=m.weight.dtype, input=args[0].dtype,
                                         output=out.dtype))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
    rank = mesh.get_local_rank()
    losses = []
    for _ in range(STEPS):
        total = 0.0
        for i, x in enumerate(X.chunk(dp)[rank].chunk(micro)):
            model.set_requires_gradient_sync(i == micro - 1)
            out = model(x)
            seen["model_output"] = out.dtype
            loss = out.float().pow(2).mean() / micro
            loss.backward()
            total += float(loss.detach())
        grad_dtypes = {p.grad.dtype for p in model.parameters() if p.grad is not None}
        opt.step()
        opt.zero_grad()
        losses.append(total)
    state_dtypes = {v.dtype for s in opt.state.values() for v in s.values() if v.dim() > 0}
    if lib == "torch":
        fresh_torch_caches()
    return {"losses": losses, "params": {n: p.full_tensor() for n, p in model.named_parameters()},
            "seen": seen, "stored": {p.dtype for p in model.parameters()},
            "grads": grad_dtypes, "optimizer": state_dtypes}


# torch warns that Net's output (its head's, over 3-d activations) is a view: no in-place op
# follows here
@pytest.mark.filterwarnings("ignore:FSDP2-wrapped module")
@pytest.mark.parametrize("policy", [
    {"param_dtype": BF16, "reduce_dtype": F32},
    {"param_dtype": BF16},
    {"param_dtype": BF16, "reduce_dtype": F32, "output_dtype": F32},
], ids=["bf16-reduce-f32", "bf16", "bf16-output-f32"])
@pytest.mark.parametrize("dp, micro", [(2, 1), (4, 2)], ids=["dp2", "dp4-uneven-accumulate2"])
def test_mixed_precision_matches_torch_fsdp2(policy, dp, micro):
    theirs = simpg.run(_train, dp, "torch", dp, policy, micro)
    ours = simpg.run(_train, dp, "ours", dp, policy, micro)
    for o, t in zip(ours, theirs):
        assert o["seen"] == t["seen"] == {
            "weight": BF16, "input": BF16, "output": BF16,
            "model_output": policy.get("output_dtype", BF16)}
        assert o["stored"] == o["grads"] == o["optimizer"] == {F32}
        assert t["stored"] == t["grads"] == t["optimizer"] == {F32}
        assert o["losses"] == pytest.approx(t["losses"], rel=1e-6)
        for name, p in t["params"].items():
            torch.testing.assert_close(o["params"][name], p, rtol=1e-5, atol=1e-6, msg=name)


def test_mixed_precision_stays_near_one_device_in_float32():
    torch.manual_seed(0)
    ref = Net()
    with torch.no_grad():
        ref_loss = ref(X).pow(2).mean()
    ours = simpg.run(_train, 2, "ours", 2, {"param_dtype": BF16, "reduce_dtype": F32})
    first = sum(r["losses"][0] for r in ours) / 2
    assert first == pytest.approx(float(ref_loss), rel=2e-2)  # bf16 compute: 8 bits of mantissa


@pytest.mark.parametrize("kwargs, message", [
    ({"param_dtype": "bf16"}, r"param_dtype must be a floating-point torch.dtype or None, "
                              r"got 'bf16'"),
    ({"reduce_dtype": torch.int32}, r"reduce_dtype must be a floating-point"),
    ({"cast_forward_inputs": 1}, r"cast_forward_inputs must be a bool, got 1"),
])
def test_a_bad_policy_gets_a_clear_error(kwargs, message):
    with pytest.raises(FullyShardError, match=message):
        MixedPrecisionPolicy(**kwargs)


def test_mp_policy_must_be_a_policy():
    def body() -> None:
        with pytest.raises(FullyShardError, match=r"mp_policy must be a MixedPrecisionPolicy, "
                                                  r"got dict"):
            fully_shard(nn.Linear(4, 4), init_device_mesh("cpu", (2,)),
                        mp_policy={"param_dtype": BF16})

    simpg.run(body, 2)


@pytest.mark.parametrize("reduce_dtype", [F32, None], ids=["reduce-f32", "reduce-unset"])
def test_gathers_move_param_dtype_and_reductions_reduce_dtype(reduce_dtype):
    def body() -> set[tuple[str, torch.dtype]]:
        mesh = init_device_mesh("cpu", (2,))
        model = Net()
        for module in (*model.blocks, model):
            fully_shard(module, mesh, mp_policy=MixedPrecisionPolicy(BF16, reduce_dtype))
        with simpg.trace() as t:
            model(X).float().sum().backward()
        return {(r.op.removesuffix("_into_tensor").removesuffix("_tensor"), r.dtype)
                for r in t.records}

    assert simpg.run(body, 2)[0] == {("all_gather", BF16),
                                     ("reduce_scatter", reduce_dtype or BF16)}
