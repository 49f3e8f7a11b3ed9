"""dtensor.graph.infer_by_depth (Note [planning by depth]): a deep model planned from two
shallow probes gives the layouts and figures of planning the full depth directly."""

from __future__ import annotations

import pytest
import torch

from dtensor import Replicate, Shard
from dtensor.graph import AdamW, GraphShardingError, ShardSpec, capture_train_step, infer
from dtensor.graph.depth import infer_by_depth
from examples.models import llama

R = Replicate()
ANNOTATIONS = {"input0": ShardSpec([Shard(0), R]),
               "tok_embeddings.weight": ShardSpec([R, Shard(0)])}


def _build(n: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return llama.Llama(llama.config("tiny", dim=32, n_layers=n, n_heads=4, n_kv_heads=2,
                                    ffn_hidden=48, vocab_size=64, max_seq_len=8))


@pytest.mark.parametrize("optimizer", [None, AdamW()], ids=["grads", "adamw"])
def test_depth_plan_equals_planning_the_full_depth(optimizer):
    tokens = torch.randint(0, 64, (8, 8), generator=torch.Generator().manual_seed(0))
    depth = infer_by_depth(_build, 4, llama.loss_fn, [tokens], [tokens], (2, 4), ANNOTATIONS,
                           optimizer=optimizer)
    full = infer(capture_train_step(_build(4), llama.loss_fn, [tokens], [tokens],
                                    optimizer=optimizer), (2, 4), ANNOTATIONS,
                 method="heuristic")
    assert depth.consistent
    assert set(depth.parameters) == {n for n, _ in _build(4).named_parameters()}
    for name, pl in depth.parameters.items():
        assert pl == full.placements(name), name
    assert (depth.total_bytes, depth.flops_per_rank, depth.whole_flops) == (
        full.total_bytes, full.flops_per_rank, full.whole_flops)
    assert depth.memory == full.memory
    eager = depth.to_parallelize_plan()
    assert eager.parameters == depth.parameters and eager.predicted_bytes == depth.total_bytes


def test_depth_plan_needs_a_first_a_middle_and_a_last_layer():
    tokens = torch.zeros(2, 8, dtype=torch.long)
    with pytest.raises(GraphShardingError, match="probe_layers >= 2"):
        infer_by_depth(_build, 4, llama.loss_fn, [tokens], [tokens], (2,), probe_layers=1)
    with pytest.raises(GraphShardingError, match="n_layers > probe_layers"):
        infer_by_depth(_build, 3, llama.loss_fn, [tokens], [tokens], (2,), probe_layers=3)


def test_a_memory_budget_at_full_depth_is_met():
    tokens = torch.randint(0, 64, (8, 8), generator=torch.Generator().manual_seed(0))
    free = infer_by_depth(_build, 5, llama.loss_fn, [tokens], [tokens], (2, 4), ANNOTATIONS)
    budget = int(free.memory.total * 0.8)
    tight = infer_by_depth(_build, 5, llama.loss_fn, [tokens], [tokens], (2, 4), ANNOTATIONS,
                           memory_budget=budget)
    assert tight.memory.total <= budget < free.memory.total
    assert tight.memory_weight > 0 and free.memory_weight == 0
