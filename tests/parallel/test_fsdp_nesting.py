"""A tensor-parallel-sharded 1-d parameter under fully_shard (Note [nested dp inside tp] in
dtensor/parallel/fsdp.py): stored with dp cutting inside each tp piece, it rides the
module's one all-gather and one reduce-scatter; training equals one device on even and
uneven sizes. On real gloo processes too, with forward and backward prefetch (their gathers
then really are asynchronous): this file is also the program they run,

    python tests/parallel/test_fsdp_nesting.py RANK WORLD_SIZE STORE_PORT OUT_PATH
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import pytest
import torch
from torch import nn

import simpg
from dtensor import Shard, fallback_policy, init_device_mesh
from dtensor.parallel import ColwiseParallel, fully_shard, parallelize_module
from tests.support.fsdp_net import (Net, assert_trains_as_one_device, data_parallel_blocks,
                                    tensor_parallel_blocks, train)

X = torch.randn(6, 5, 8, generator=torch.Generator().manual_seed(0))


def _build(mesh_shape: tuple[int, int]) -> tuple[Net, object]:
    mesh = init_device_mesh("cpu", mesh_shape, mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    model = Net()
    tensor_parallel_blocks(model, mesh["tp"])  # w1.bias (14 rows) is Shard(0) on tp: it nests
    data_parallel_blocks(model, mesh["dp"])
    return model, mesh


def test_a_tp_sharded_bias_rides_the_modules_one_gather_and_one_reduce_scatter():
    """Per block: one all-gather in the forward, one in the backward (the regather), one
    reduce-scatter, all over dp; before, the bias added an all-to-all over the whole mesh
    each way."""

    def body() -> tuple:
        model, mesh = _build((2, 2))
        bias = model.blocks[0].w1.bias
        with simpg.trace() as t:
            model(torch.randn(2, 5, 8)).sum().backward()
        dp_group = set(mesh["dp"].mesh.tolist())
        ops = [r.op for r in t.records if set(r.ranks) == dp_group]
        others = sorted({r.op for r in t.records if set(r.ranks) != dp_group})
        return bias.placements, bias.device_mesh.mesh_dim_names, ops, others

    for placements, names, ops, others in simpg.run(body, 4):
        assert (placements, names) == ((Shard(0), Shard(0)), ("tp", "dp"))
        # forward: root, block 0, block 1; backward: block 1, block 0 regathered; one
        # reduce-scatter per module (the root's, then each block's)
        assert ops.count("all_gather") == 5 and ops.count("reduce_scatter") == 3, ops
        assert len(ops) == 8, ops
        assert others == ["all_reduce"]  # row-wise w2's forward sum over tp, nothing else


@pytest.mark.parametrize("mesh_shape", [(2, 2), (3, 2), (2, 3)],
                         ids=["dp2xtp2", "dp3xtp2-uneven", "dp2xtp3-uneven"])
def test_training_with_nested_biases_equals_one_device(mesh_shape):
    """14 bias rows: over tp=2 then dp=3, pieces 3,2,2; over tp=3 (5,5,4) then dp=2."""
    dp, tp = mesh_shape
    torch.manual_seed(0)
    ref = Net()
    ref_losses = train(ref, X, 3)
    results = simpg.run(_rank, dp * tp, mesh_shape)
    assert_trains_as_one_device(results, ref, ref_losses)


def test_a_checkpoint_of_nested_biases_loads_on_another_mesh(tmp_path):
    """The stored DTensor says where each piece lies: saved on dp2 x tp2, loaded on dp4."""
    from dtensor.checkpoint import load, save

    def saver() -> dict:
        model, _ = _build((2, 2))
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(2.0)  # not the initial values a fresh model has
        save(model.state_dict(), tmp_path / "ckpt")
        return {n: p.detach().full_tensor() for n, p in model.named_parameters()}

    def loader() -> dict:
        mesh = init_device_mesh("cpu", (4,))
        torch.manual_seed(1)
        model = Net()
        for block in model.blocks:
            fully_shard(block, mesh)
        fully_shard(model, mesh)
        state = model.state_dict()
        load(state, tmp_path / "ckpt")
        return {n: p.detach().full_tensor() for n, p in model.named_parameters()}

    saved = simpg.run(saver, 4)[0]
    for loaded in simpg.run(loader, 4):
        for name, p in saved.items():
            torch.testing.assert_close(loaded[name], p, msg=name)


class _GroupedScores(nn.Module):
    """Attention scores with grouped keys: 4 query heads, 2 key heads each serving two
    (llama's repeat_kv). Both projections column-wise over tp split the heads; the matmul
    against the expanded keys leaves the query weight's gradient Partial over tp while the
    weight is Shard(0) on tp (before cc8a5aa: "redistribute [P(sum),S(0)]->[S(0),S(0)] of
    (8, 8) ... holds shape (2, 8), expected (4, 8)")."""

    def __init__(self) -> None:
        super().__init__()
        self.wq = nn.Linear(8, 8, bias=False)
        self.wk = nn.Linear(8, 4, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, 4, 2).transpose(1, 2)
        k = self.wk(x).view(b, s, 2, 1, 2).expand(b, s, 2, 2, 2).reshape(b, s, 4, 2)
        return q @ k.transpose(1, 2).transpose(-1, -2)


def test_a_tp_sharded_weight_whose_gradient_is_partial_over_tp_trains_as_one_device():
    """The gradient is cut to its tp piece before the dp reduce-scatter (dp's pieces lie
    inside it); reducing over dp first took pieces of the whole weight and failed."""

    def body() -> tuple:
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        torch.manual_seed(0)
        model = _GroupedScores()
        parallelize_module(model, mesh["tp"], {"wq": ColwiseParallel(use_local_output=False),
                                               "wk": ColwiseParallel(use_local_output=False)})
        fully_shard(model, mesh["dp"])
        mine = X.chunk(2)[mesh.get_local_rank("dp")]
        losses = train(model, mine, 3)
        return losses, {n: p.detach().full_tensor() for n, p in model.named_parameters()}

    torch.manual_seed(0)
    ref = _GroupedScores()
    ref_losses = train(ref, X, 3)
    results = simpg.run(body, 4)
    assert_trains_as_one_device(results, ref, ref_losses)


def _rank(mesh_shape: tuple[int, int], prefetch: bool = False) -> tuple:
    model, mesh = _build(mesh_shape)
    if prefetch:  # the blocks' forward gathers issued one block ahead (Note [prefetch])
        model.set_modules_to_forward_prefetch([model.blocks[0]])
        model.blocks[0].set_modules_to_forward_prefetch([model.blocks[1]])
    mine = X.chunk(mesh_shape[0])[mesh.get_local_rank("dp")]
    with fallback_policy("error"):
        losses = train(model, mine, 3)
    return losses, {n: p.detach().full_tensor() for n, p in model.named_parameters()}


GLOO_MESH = (2, 2)


@pytest.mark.gloo
def test_nested_biases_with_prefetch_on_gloo_processes_equal_the_simulation(tmp_path):
    from tests.support.gloo_runner import run_program_on_gloo

    simulated = simpg.run(_rank, 4, GLOO_MESH, True)
    real = run_program_on_gloo(Path(__file__), 4, tmp_path, timeout_s=240.0)
    for (real_losses, real_params), (sim_losses, sim_params) in zip(real, simulated):
        assert real_losses == pytest.approx(sim_losses, rel=1e-6)
        for name, p in sim_params.items():
            torch.testing.assert_close(real_params[name], p, msg=name)


if __name__ == "__main__":
    from tests.support.gloo_runner import run_as_gloo_rank

    run_as_gloo_rank(lambda: _rank(GLOO_MESH, True), sys.argv[1:], timedelta(seconds=120))
