"""Activation checkpointing (``torch.utils.checkpoint``, non-reentrant) over fully sharded
blocks, alone and over tensor-parallel blocks: training equals one device, and the
recomputation in the backward re-gathers nothing the outputs' hook has not already gathered
(Note [recomputed forward] in dtensor/parallel/fsdp_hooks.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import simpg
from dtensor import DTensor, init_device_mesh
from dtensor.parallel import fully_shard
from dtensor.parallel.fsdp import data_parallel_state
from tests.support.fsdp_net import Block, data_parallel_blocks, tensor_parallel_blocks
from tests.support.paths import ROOT

BATCHES = [torch.randn(4, 5, 8, generator=torch.Generator().manual_seed(s)) for s in range(3)]


class Checkpointed(nn.Module):
    def __init__(self, use_checkpoint: bool = True) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.use_checkpoint = use_checkpoint

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.use_checkpoint else block(x)
        return x


def _train_checkpointed(model: Checkpointed, rows: slice) -> tuple[list[float], dict]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
    losses = []
    for x in BATCHES:
        loss = model(x[rows]).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.detach()))
    return losses, {n: p.full_tensor() if isinstance(p, DTensor) else p.detach()
                    for n, p in model.named_parameters()}


def _reference() -> tuple[list[float], dict]:
    torch.manual_seed(0)
    return _train_checkpointed(Checkpointed(), slice(None))


def _check_against_reference(results: list, dp: int) -> None:
    ref_losses, ref_params = _reference()
    for step, expected in enumerate(ref_losses):
        assert sum(r[0][step] for r in results) / len(results) == pytest.approx(expected,
                                                                                rel=1e-5)
    for name, p in ref_params.items():
        torch.testing.assert_close(results[0][1][name], p, msg=name)


def _fully_sharded_body(mesh_shape: tuple[int, int], reshard: bool) -> tuple[list[float], dict]:
    dp, tp = mesh_shape
    mesh = init_device_mesh("cpu", mesh_shape, mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    model = Checkpointed()
    if tp > 1:
        tensor_parallel_blocks(model, mesh["tp"])
    data_parallel_blocks(model, mesh["dp"], reshard_after_forward=reshard)
    rank = mesh.get_local_rank("dp")
    return _train_checkpointed(model, slice(rank * 4 // dp, (rank + 1) * 4 // dp))


# Before the fix this killed the process (SIGSEGV: parameters left as gathered tensors whose
# storage was freed): run it where a crash fails the test instead of the test run.
_SCRIPT = """
import simpg
from tests.parallel.test_fsdp_checkpointing import _check_against_reference, _fully_sharded_body
for reshard in (True, False):
    _check_against_reference(simpg.run(_fully_sharded_body, 2, (2, 1), reshard), 2)
print("OK")
"""


def test_checkpointed_fully_sharded_blocks_train_like_one_device_in_a_subprocess():
    proc = subprocess.run([sys.executable, "-X", "faulthandler", "-c", _SCRIPT], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "OK", (
        f"exit {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")


def test_checkpointed_tensor_parallel_fully_sharded_blocks_train_like_one_device():
    _check_against_reference(simpg.run(_fully_sharded_body, 4, (2, 2), True), 2)


def test_checkpointed_tensor_parallel_blocks_train_like_one_device():
    _check_against_reference(simpg.run(_tensor_parallel_body, 2), 1)


def _tensor_parallel_body() -> tuple[list[float], dict]:
    mesh = init_device_mesh("cpu", (2,))
    torch.manual_seed(0)
    model = Checkpointed()
    tensor_parallel_blocks(model, mesh)
    return _train_checkpointed(model, slice(None))


def test_recomputation_gathers_nothing_more():
    """Per block and step: one all-gather in the forward, one before its backward (freed
    after forward; block 0's is prefetched by block 1's backward, Note [prefetch]), one
    reduce-scatter; the recomputed forward reuses the second gather."""

    def body(use_checkpoint: bool) -> list[str]:
        mesh = init_device_mesh("cpu", (2,))
        torch.manual_seed(0)
        model = Checkpointed(use_checkpoint)
        for block in model.blocks:
            fully_shard(block, mesh)
        fully_shard(model, mesh)  # holds no parameters of its own: no collective
        with simpg.trace() as t:
            model(BATCHES[0]).sum().backward()
        return [r.op.removesuffix("_into_tensor").removesuffix("_tensor") for r in t.records]

    plain, checkpointed = simpg.run(body, 2, False)[0], simpg.run(body, 2, True)[0]
    assert checkpointed == plain == ["all_gather"] * 4 + ["reduce_scatter"] * 2


def test_a_frozen_module_is_not_left_in_backward():
    """Its backward never runs (no gradient to reduce): the end of the backward pass clears
    the in-backward mark, so the next forward gathers as usual instead of reusing pieces."""

    def body() -> list:
        mesh = init_device_mesh("cpu", (2,))
        torch.manual_seed(0)
        model = Checkpointed(use_checkpoint=False)
        model.blocks[0].requires_grad_(False)
        for block in model.blocks:
            fully_shard(block, mesh)
        fully_shard(model, mesh)
        seen = []
        for _ in range(2):
            model(BATCHES[0].requires_grad_()).sum().backward()
            seen.append([data_parallel_state(b).in_backward for b in model.blocks])
            seen.append([isinstance(p, nn.Parameter) for p in model.blocks[0].parameters()])
        return seen

    for seen in simpg.run(body, 2):
        assert seen[0] == seen[2] == [False, False]
        assert seen[1] == seen[3] == [True] * 4  # the stored parameters are back
