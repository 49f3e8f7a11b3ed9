"""Gradient accumulation with ``set_requires_gradient_sync`` (torch's FSDPModule method): no
reduce-scatter on the micro-batches without sync, one per module on the last, and the
gradients equal one device's over the whole batch (Note [gradient accumulation] in
dtensor/parallel/fsdp_hooks.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import simpg
from dtensor import DTensor, init_device_mesh
from dtensor.parallel import (ColwiseParallel, FSDPModule, FullyShardError, RowwiseParallel,
                              fully_shard, parallelize_module, replicate)
from dtensor.parallel.fsdp import data_parallel_state
from tests.support.fsdp_net import Net, data_parallel_blocks, tensor_parallel_blocks

BATCH = torch.randn(8, 5, 8, generator=torch.Generator().manual_seed(0))
MICRO = 2


def _reference_grads() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = Net()
    model(BATCH).pow(2).mean().backward()
    return {n: p.grad for n, p in model.named_parameters()}


def _accumulate(mesh_shape: tuple[int, int], mode: str, recurse: bool = True) -> tuple:
    """Each dp rank: its rows in MICRO micro-batches, sync only on the last; per backward,
    the collectives traced; the full gradients at the end."""
    dp, tp = mesh_shape
    mesh = init_device_mesh("cpu", mesh_shape, mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    model = Net()
    wrap = fully_shard if mode == "shard" else replicate
    if tp > 1:
        tensor_parallel_blocks(model, mesh["tp"])
    data_parallel_blocks(model, mesh["dp"], wrap)
    mine = BATCH.chunk(dp)[mesh.get_local_rank("dp")]
    ops_per_backward, grads_seen = [], []
    for i, micro in enumerate(mine.chunk(MICRO)):
        last = i == MICRO - 1
        model.set_requires_gradient_sync(last, recurse=recurse)
        loss = model(micro).pow(2).mean() / MICRO
        with simpg.trace() as t:
            loss.backward()
        kinds = [r.op.removesuffix("_into_tensor").removesuffix("_tensor") for r in t.records]
        ops_per_backward.append([k for k in kinds if k != "all_gather"])
        grads_seen.append(sum(p.grad is not None for p in model.parameters()))
    full = {n: p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
            for n, p in model.named_parameters()}
    return ops_per_backward, grads_seen, full


@pytest.mark.parametrize("mode, mesh_shape, reduction", [
    ("shard", (2, 1), "reduce_scatter"), ("shard", (2, 2), "reduce_scatter"),
    ("replicate", (2, 1), "all_reduce")], ids=["fsdp-dp2", "fsdp-dp2xtp2", "replicate-dp2"])
def test_accumulated_gradients_equal_one_device_and_sync_only_once(mode, mesh_shape, reduction):
    expected = _reference_grads()
    results = simpg.run(_accumulate, mesh_shape[0] * mesh_shape[1], mesh_shape, mode)
    for ops, grads_seen, full in results:
        # no reduction while accumulating; then one per module (two blocks and the root's
        # head); tp's own collectives in the backward, if any, are all-reduces of activations
        assert reduction not in ops[0]
        assert ops[1].count(reduction) >= 3 and grads_seen == [0, len(expected)]
        for name, g in expected.items():
            torch.testing.assert_close(full[name], g, msg=name)


def test_without_recurse_only_the_root_stops_syncing():
    ops, _, _ = simpg.run(_accumulate, 2, (2, 1), "shard", False)[0]
    assert ops[0] == ["reduce_scatter", "reduce_scatter"]  # the two blocks; not the root


def test_set_requires_gradient_sync_is_torchs_method_and_checks_its_argument():
    def body() -> None:
        model = fully_shard(nn.Linear(4, 4), init_device_mesh("cpu", (2,)))
        assert isinstance(model, FSDPModule) and isinstance(model, nn.Linear)
        assert type(model).__name__ == "Linear"  # reprs and module paths read as before
        with pytest.raises(FullyShardError, match=r"expected a bool, got 'no'"):
            model.set_requires_gradient_sync("no")

    simpg.run(body, 2)


@pytest.mark.parametrize("mesh_shape", [(2, 1), (2, 2)], ids=["fsdp-dp2", "fsdp-dp2xtp2"])
def test_a_gradient_joins_its_sum_as_soon_as_autograd_has_it(mesh_shape):
    """Note [gradient accumulation]: the head's gradient, the first computed, is in its sum
    before the first block's backward starts, not held until the root's backward at the end
    (beside the sum: the memory torch's FSDP2 does not hold). Checked on both micro-batches,
    the gradients still equal one device's."""
    dp, tp = mesh_shape

    def body() -> tuple:
        mesh = init_device_mesh("cpu", mesh_shape, mesh_dim_names=("dp", "tp"))
        torch.manual_seed(0)
        model = Net()
        for block in model.blocks:
            if tp > 1:
                parallelize_module(block, mesh["tp"], {"w1": ColwiseParallel(),
                                                       "w2": RowwiseParallel()})
            fully_shard(block, mesh["dp"])
        fully_shard(model, mesh["dp"])
        head = next(m for m in data_parallel_state(model).params
                    if m.owner is model.head and m.name == "weight")
        seen: list = []

        def at_first_block(grad: torch.Tensor) -> None:  # block 0's backward, under way
            seen.append(None if head.accumulated is None else head.accumulated[0].clone())

        def watch(_m: nn.Module, _i: tuple, out: torch.Tensor) -> None:
            out.register_hook(at_first_block)

        model.blocks[0].w1.register_forward_hook(watch)
        sums = []
        for i, micro in enumerate(BATCH.chunk(dp)[mesh.get_local_rank("dp")].chunk(MICRO)):
            model.set_requires_gradient_sync(i == MICRO - 1)
            (model(micro).pow(2).mean() / MICRO).backward()
            sums.append(None if head.accumulated is None else head.accumulated[0].clone())
        full = {n: p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
                for n, p in model.named_parameters()}
        return seen, sums, full

    expected = _reference_grads()
    for seen, sums, full in simpg.run(body, dp * tp):
        # micro-batch 1: the sum is its gradient already; micro-batch 2: already added to
        assert seen[0] is not None and torch.equal(seen[0], sums[0])
        assert seen[1] is not None and not torch.equal(seen[1], sums[0])
        assert sums[1] is None  # reduce-scattered into .grad on the last
        for name, g in expected.items():
            torch.testing.assert_close(full[name], g, msg=name)


def test_a_module_output_modified_in_place_while_accumulating():
    """The accumulating path joins the module's outputs to the graph (Note [gradient
    accumulation]); an in-place op on one afterwards works and the gradients are one
    device's."""
    torch.manual_seed(0)
    a, b = nn.Linear(4, 4), nn.Linear(4, 4)
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(1))
    for _ in range(MICRO):
        h = a(x)
        h.mul_(2)
        b(h).sum().backward()

    def body() -> torch.Tensor:
        mesh = init_device_mesh("cpu", (2,))
        torch.manual_seed(0)
        first, second = fully_shard(nn.Linear(4, 4), mesh), fully_shard(nn.Linear(4, 4), mesh)
        root = fully_shard(nn.Sequential(first, second), mesh)
        for i in range(MICRO):
            root.set_requires_gradient_sync(i == MICRO - 1)
            h = first(x)
            h.mul_(2)
            second(h).sum().backward()
        return first.weight.grad.full_tensor()

    for grad in simpg.run(body, 2):
        torch.testing.assert_close(grad, a.weight.grad)
