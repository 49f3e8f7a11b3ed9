"""The kernels of one fully_shard training step (Note [copy-out in one kernel] in
dtensor/parallel/fsdp_comm.py): the gather's copy-in and copy-out, the reduce-scatter's packing
and clip_grad_norm_'s norms are a few ops per module, not one per parameter or per piece.
Counted with simpg.steprecorder, which records each rank's local aten ops."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch import nn

import simpg
from dtensor import init_device_mesh
from dtensor.parallel import MixedPrecisionPolicy, fully_shard
from simpg.overlap import Compute
from simpg.steprecorder import record_step

# what moves or casts data rather than computing: fully_shard's own ops are among these
MOVES = ("copy_", "cat", "split_with_sizes_copy", "_foreach_copy_", "_to_copy", "clone",
         "stack")
RANKS = 4


def _step_kernels(layers: int, width: int, bf16: bool) -> Counter[str]:
    mesh = init_device_mesh("cpu", (RANKS,))
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
        if bf16 else MixedPrecisionPolicy()
    for layer in model:
        fully_shard(layer, mesh, mp_policy=policy)
    fully_shard(model, mesh, mp_policy=policy)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    x = torch.randn(2, width)
    for step in range(2):  # the second step is recorded: optimizer state exists by then
        with record_step() as rec:
            model(x).float().sum().backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
            opt.step()
            opt.zero_grad()
    return Counter(e.op.split(".")[0] for e in rec.timeline().events if isinstance(e, Compute))


def _moves(counts: Counter[str]) -> dict[str, int]:
    return {op: counts[op] for op in MOVES if counts[op]}


@pytest.mark.parametrize("width", [8, 6], ids=["even", "uneven"])
@pytest.mark.parametrize("bf16", [False, True], ids=["f32", "bf16"])
def test_data_movement_per_step_does_not_grow_with_parameters(width, bf16):
    # one module per layer: a layer more is one gather, one regather and one reduce-scatter
    # more, each a fixed number of ops, whatever the dp size or the parameters per module
    few, many = (simpg.run(_step_kernels, RANKS, n, width, bf16)[0] for n in (2, 4))
    per_layer = {op: (many[op] - few[op]) / 2 for op in MOVES if many[op] or few[op]}
    # per extra layer: a copy-in cat and a copy-out for its gather and its regather, a
    # packing cat for its reduce-scatter; with bf16 also the forward's input cast
    assert per_layer.get("copy_", 0) == 0, _moves(many)  # no copy per piece
    assert per_layer.get("cat", 0) <= 3, _moves(many)
    assert per_layer.get("split_with_sizes_copy", 0) + per_layer.get("_foreach_copy_", 0) <= 2
    assert per_layer.get("_to_copy", 0) <= (2 if bf16 else 0), _moves(many)


def test_clip_grad_norm_takes_one_norm_op_not_one_per_parameter():
    counts = simpg.run(_step_kernels, RANKS, 4, 8, False)[0]
    assert counts["pow"] == 0 and counts["_foreach_pow"] == 1, dict(counts)
    assert counts["_foreach_powsum"] == 1
