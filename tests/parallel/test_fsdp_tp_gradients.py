"""fully_shard over dp with tensor-parallel parameters whose gradients reach it in another tp
layout than the parameter's (Note [gradients in another tp layout] in
dtensor/parallel/fsdp_comm.py)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import simpg
from dtensor import DTensor, Shard, distribute_tensor, init_device_mesh
from dtensor.parallel import ColwiseParallel, fully_shard, parallelize_module


class BatchOverTp(nn.Module):
    """A column-wise weight applied to a batch that is sharded over tp itself: the weight's
    gradient is a Partial sum over tp while the parameter is Shard(0) over tp."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(6, 8, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.proj.weight)


def _train(model: nn.Module, x: torch.Tensor, steps: int, accumulate: int) -> None:
    """SGD on the mean square over ``x``'s rows (this rank's whole batch), in ``accumulate``
    micro-batches."""
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    for _ in range(steps):
        for part in x.chunk(accumulate):
            out = model(part)
            loss = (out * out).sum() / x.numel()
            loss = loss.full_tensor() if isinstance(loss, DTensor) else loss
            loss.backward()
        opt.step()
        opt.zero_grad()


@pytest.mark.parametrize("accumulate", [1, 2])
def test_a_partial_gradient_of_a_tp_sharded_parameter_is_averaged_over_dp_only(accumulate):
    torch.manual_seed(0)
    ref = BatchOverTp()
    x = torch.randn(2, 8, 6)  # one batch per dp rank, its 8 rows cut over tp
    start = copy.deepcopy(ref.state_dict())
    _train(ref, x.reshape(16, 6), 2, accumulate)

    def rank() -> dict[str, torch.Tensor]:
        mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
        model = BatchOverTp()
        model.load_state_dict(start)
        parallelize_module(model, mesh["tp"], {"proj": ColwiseParallel()})
        fully_shard(model, mesh["dp"])
        mine = x[mesh.get_local_rank("dp")]
        # the batch sharded over tp: the weight's gradient is P(sum) over tp
        _train(model, distribute_tensor(mine, mesh["tp"], [Shard(0)]), 2, accumulate)
        return {k: v.full_tensor() for k, v in model.state_dict().items()}

    for got in simpg.run(rank, 8):
        torch.testing.assert_close(got["proj.weight"], ref.proj.weight.detach())
