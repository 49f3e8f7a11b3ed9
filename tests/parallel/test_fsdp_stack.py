"""The large-model features together (docs/large-models.md): a Llama built on meta, tensor
parallel x HSDP on a 2x2x2 simulated mesh, checkpointed layers, two accumulated
micro-batches per step, f32 and bf16 (f32 reductions); losses against one device. On real
gloo processes too: this file is also the program they run,

    python tests/parallel/test_fsdp_stack.py RANK WORLD_SIZE STORE_PORT OUT_PATH
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import simpg
from dtensor import init_device_mesh
from dtensor.parallel import (MixedPrecisionPolicy, fully_shard, loss_parallel,
                              parallelize_module)
from examples.models import llama

CFG = llama.PRESETS["tiny"]
TOKENS = torch.randint(0, CFG.vocab_size, (8, 17), generator=torch.Generator().manual_seed(0))
INPUTS, TARGETS = TOKENS[:, :-1], TOKENS[:, 1:]
STEPS, MICRO = 2, 2


class Checkpointed(nn.Module):
    """A layer whose activations are recomputed in the backward."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.layer, *args, use_reentrant=False)


def _materialize(model: llama.Llama) -> llama.Llama:
    """Storage for a meta-built model, and its init (the same for any mesh)."""
    model.to_empty(device="cpu")
    torch.manual_seed(0)
    model.init_weights()
    # buffers are not parameters: init_weights leaves the rotary tables to the constructor
    model.freqs_cos, model.freqs_sin = llama.rope_tables(CFG.head_dim, CFG.max_seq_len,
                                                         CFG.rope_theta)
    return model


def _reference_losses() -> list[float]:
    with torch.device("meta"):
        model = llama.Llama(CFG)
    _materialize(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(STEPS):
        loss = llama.loss_fn(model(INPUTS), TARGETS)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(float(loss.detach()))
    return losses


def _rank(param_dtype: torch.dtype | None,
          mesh_shape: tuple[int, int, int] = (2, 2, 2)) -> list[float]:
    mesh = init_device_mesh("cpu", mesh_shape, mesh_dim_names=("rep", "shard", "tp"))
    with torch.device("meta"):
        model = llama.Llama(CFG)
    parallelize_module(model, mesh["tp"], llama.tp_plan(CFG))
    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    for layer in model.layers:
        fully_shard(layer, mesh["rep", "shard"], mp_policy=policy)
    fully_shard(model, mesh["rep", "shard"], mp_policy=policy)
    _materialize(model)
    for i, layer in enumerate(model.layers):
        model.layers[i] = Checkpointed(layer)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    replicas, shards, _ = mesh_shape
    dp = mesh.get_local_rank("rep") * shards + mesh.get_local_rank("shard")
    inputs, targets = INPUTS.chunk(replicas * shards)[dp], TARGETS.chunk(replicas * shards)[dp]
    losses = []
    for _ in range(STEPS):
        total = 0.0
        for i, (x, t) in enumerate(zip(inputs.chunk(MICRO), targets.chunk(MICRO))):
            model.set_requires_gradient_sync(i == MICRO - 1)
            with loss_parallel():
                loss = llama.loss_fn(model(x), t) / MICRO
                loss.backward()
            total += float(loss.full_tensor().detach())
        opt.step()
        opt.zero_grad()
        losses.append(total)
    return losses


@pytest.mark.parametrize("param_dtype, tolerance", [(None, 1e-6), (torch.bfloat16, 2e-2)],
                         ids=["f32", "bf16"])
def test_the_whole_stack_trains_like_one_device(param_dtype, tolerance):
    expected = _reference_losses()
    results = simpg.run(_rank, 8, param_dtype)
    for step, want in enumerate(expected):
        mean = sum(r[step] for r in results) / len(results)  # each dp share's mean loss
        assert mean == pytest.approx(want, rel=tolerance)


GLOO_MESH = (1, 2, 2)  # fully sharded over 2 x tensor parallel over 2: 4 processes


@pytest.mark.gloo
def test_the_stack_on_gloo_processes_gives_the_simulated_losses(tmp_path):
    from tests.support.gloo_runner import run_program_on_gloo

    simulated = simpg.run(_rank, 4, torch.bfloat16, GLOO_MESH)
    real = run_program_on_gloo(Path(__file__), 4, tmp_path, timeout_s=240.0)
    expected = _reference_losses()
    for r, s in zip(real, simulated):
        assert r == pytest.approx(s, rel=1e-6)
    for step, want in enumerate(expected):
        assert sum(r[step] for r in real) / len(real) == pytest.approx(want, rel=2e-2)


if __name__ == "__main__":
    from tests.support.gloo_runner import run_as_gloo_rank

    run_as_gloo_rank(lambda: _rank(torch.bfloat16, GLOO_MESH), sys.argv[1:],
                     timedelta(seconds=120))
