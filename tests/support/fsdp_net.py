"""The small two-block network the fully_shard tests train, how they lay it out (tensor
parallel blocks, then data parallel blocks and root), and its training loop: the same model
and steps on one device and on a mesh, compared loss by loss."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from dtensor import DeviceMesh
from dtensor.parallel import ColwiseParallel, RowwiseParallel, fully_shard, parallelize_module


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w1 = nn.Linear(8, 14)
        self.w2 = nn.Linear(14, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.w2(F.gelu(self.w1(x)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(8, 3)  # 3 rows over 4 dp ranks: one rank holds nothing

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def tensor_parallel_blocks(model: nn.Module, tp_mesh: DeviceMesh) -> None:
    """Each of ``model.blocks`` over ``tp_mesh``: w1 column-wise, w2 row-wise (the MLP pair
    that needs one all-reduce per block)."""
    for block in model.blocks:
        parallelize_module(block, tp_mesh, {"w1": ColwiseParallel(), "w2": RowwiseParallel()})


def data_parallel_blocks(model: nn.Module, dp_mesh: DeviceMesh,
                         wrap: Callable[..., Any] = fully_shard, **block_kwargs: Any) -> None:
    """``wrap`` (``fully_shard`` or ``replicate``) each of ``model.blocks`` over ``dp_mesh``
    with ``block_kwargs``, then ``model`` itself, which keeps what the blocks do not."""
    for block in model.blocks:
        wrap(block, dp_mesh, **block_kwargs)
    wrap(model, dp_mesh)


def train(model: nn.Module, x: torch.Tensor, steps: int) -> list[float]:
    """``steps`` AdamW steps on the mean square of the output; the losses."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
    losses = []
    for _ in range(steps):
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.detach()))
    return losses


def assert_trains_as_one_device(results: list[tuple[list[float], dict[str, torch.Tensor]]],
                                ref: nn.Module, ref_losses: list[float]) -> None:
    """``results``: each rank's (losses on its dp share, full parameters after training).
    The mean of the ranks' losses is the whole batch's at every step (equal shares), and
    every rank's parameters equal the one-device model ``ref``'s."""
    for step, want in enumerate(ref_losses):
        mean = sum(losses[step] for losses, _ in results) / len(results)
        assert mean == pytest.approx(want, rel=1e-5), f"step {step}"
    for name, p in ref.named_parameters():
        for _, full in results:
            torch.testing.assert_close(full[name], p.detach(), msg=name)
