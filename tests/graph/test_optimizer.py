"""AdamW captured inside the training step (dtensor.graph.AdamW): one device's graph equals
torch.optim.AdamW, and the planned step equals one device on simpg, moving the planned
bytes."""

from __future__ import annotations

import copy

import pytest
import torch

from dtensor import Replicate, Shard
from dtensor.graph import AdamW, CaptureError, ShardSpec, capture_train_step, infer
from tests.support.graph_steps import mse, run_moving_the_planned_bytes

R = Replicate()
OPT = AdamW(lr=0.1, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.05, step=3)


@pytest.fixture(scope="module")
def case():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    x, y = torch.randn(6, 8), torch.randn(6, 4)
    params = [p.detach() for p in model.parameters()]
    exp_avg = [torch.randn_like(p) * 0.1 for p in params]
    exp_avg_sq = [torch.rand_like(p) * 0.1 for p in params]
    graph = capture_train_step(model, mse, [x], [y], optimizer=OPT)
    return model, graph, params + [x, y] + exp_avg + exp_avg_sq, exp_avg, exp_avg_sq


def test_the_captured_update_is_torch_adamw(case):
    model, graph, flat, exp_avg, exp_avg_sq = case
    n = len(exp_avg)
    assert graph.outputs[1:n + 1] == tuple(f"new:{k}" for k, _ in model.named_parameters())
    ref = copy.deepcopy(model)
    opt = torch.optim.AdamW(ref.parameters(), lr=OPT.lr, betas=OPT.betas, eps=OPT.eps,
                            weight_decay=OPT.weight_decay, foreach=False)
    mse(ref(flat[n]), flat[n + 1]).backward()
    for p, m, v in zip(ref.parameters(), exp_avg, exp_avg_sq):
        opt.state[p] = {"step": torch.tensor(float(OPT.step - 1)), "exp_avg": m.clone(),
                        "exp_avg_sq": v.clone()}
    opt.step()
    outs = graph(*flat)
    for i, p in enumerate(ref.parameters()):
        torch.testing.assert_close(outs[1 + i], p.detach())
        torch.testing.assert_close(outs[1 + n + i], opt.state[p]["exp_avg"])
        torch.testing.assert_close(outs[1 + 2 * n + i], opt.state[p]["exp_avg_sq"])


@pytest.mark.world(4, timeout=120)
def test_the_planned_adamw_step_equals_one_device(case):
    _, graph, flat, _, _ = case
    plan = infer(graph, (2, 2), {"input0": ShardSpec([Shard(0), R]),
                                 "0.weight": ShardSpec([R, Shard(0)])})
    assert plan.problem.optimizer_states == 0  # the states are the graph's own inputs
    outs = run_moving_the_planned_bytes(plan, (2, 2), flat)
    for i, (name, got, want) in enumerate(zip(graph.outputs, outs, graph(*flat))):
        if i in graph.ties:  # a new state ends laid out like the state it replaces
            assert tuple(got.placements) == plan.placements(graph.ties[i]), name
        torch.testing.assert_close(got.full_tensor(), want, msg=name)


def test_sgd_and_adamw_together_are_refused():
    with pytest.raises(CaptureError, match="not both"):
        capture_train_step(torch.nn.Linear(2, 2), lambda y: y.sum(), [torch.randn(1, 2)],
                           lr=0.1, optimizer=AdamW())
