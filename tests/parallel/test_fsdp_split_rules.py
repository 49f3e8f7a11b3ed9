"""fully_shard's ``shard_placement_fn`` with split rules (Note [split rules] in
dtensor/layout.py): parameters cut into balanced or explicit pieces per dp rank, or along
another dim, train exactly as one device, and the optimizer steps the pieces as cut."""

from __future__ import annotations

import copy

import pytest
import torch

from dtensor import Shard
from dtensor.parallel import FullyShardError, fully_shard
from tests.support.fsdp_net import Net, assert_trains_as_one_device, train
from tests.support.mesh_world import run_on_mesh

DP = 4


def _explicit(p):  # every row on the last two ranks, the first two hold nothing
    n = p.shape[0]
    return Shard(0, sizes=(0, 0, n // 2, n - n // 2))


RULES = {
    "balanced": lambda p: Shard(0, sizes="balanced"),
    "explicit": _explicit,
    "last-dim": lambda p: Shard(p.dim() - 1),
}


@pytest.mark.parametrize("rule", list(RULES))
def test_split_rules_train_as_one_device(rule):
    torch.manual_seed(0)
    ref = Net()
    x = torch.randn(8, 8)
    start = copy.deepcopy(ref.state_dict())
    ref_losses = train(ref, x, 3)

    def body(mesh):
        model = Net()
        model.load_state_dict(start)
        for block in model.blocks:
            fully_shard(block, mesh, shard_placement_fn=RULES[rule])
        fully_shard(model, mesh, shard_placement_fn=RULES[rule])
        w = model.blocks[0].w1.weight
        want = RULES[rule](torch.empty(14, 8))
        assert w.placements == (want,), w.placements
        rank = mesh.get_coordinate()[0]
        share = x.chunk(DP)[rank]
        losses = train(model, share, 3)
        return losses, {n: p.full_tensor() for n, p in model.named_parameters()}

    results = run_on_mesh((DP,), body)
    assert_trains_as_one_device(results, ref, ref_losses)


def test_bad_choices_are_refused_by_name():
    def body(mesh):
        for fn, match in ((lambda p: 0, "expected a Shard or None"),
                          (lambda p: Shard(5), "expected a dim in"),
                          (lambda p: Shard(0, sizes=(1, 2)), "expected 4 sizes summing to")):
            with pytest.raises(FullyShardError, match=match):
                fully_shard(Net(), mesh, shard_placement_fn=fn)
        return True

    assert all(run_on_mesh((DP,), body))
