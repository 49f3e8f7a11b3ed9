"""dtensor.graph plans applied to the eager module (Note [plans in eager code]): parameters
and gradients laid out as planned, the step equal to one device, its bytes next to the
plan's."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.distributed as dist

import dtensor
import simpg
from dtensor import Replicate, Shard
from dtensor.graph import EagerPlanError, ShardSpec, capture_train_step, infer
from dtensor.tensor import DTensor
from examples.models import llama

R = Replicate()
MESH = (2, 2)


def _mse(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((out - target) ** 2).mean()


def _mlp_case():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.Linear(32, 7))
    x, y = torch.randn(6, 8), torch.randn(6, 7)
    return model, _mse, x, y, {"input0": ShardSpec([Shard(0), R]),
                               "0.weight": ShardSpec([R, Shard(0)])}


def _llama_case():
    cfg = llama.config("tiny", dim=32, n_layers=1, n_heads=4, n_kv_heads=2, ffn_hidden=48,
                       vocab_size=64, max_seq_len=8)
    torch.manual_seed(0)
    model = llama.Llama(cfg)
    tokens = torch.randint(0, cfg.vocab_size, (4, 8))
    return model, llama.loss_fn, tokens, tokens.roll(-1, 1), {
        "input0": ShardSpec([Shard(0), R]),
        "tok_embeddings.weight": ShardSpec([R, Shard(0)])}


CASES = {"mlp": _mlp_case, "llama": _llama_case}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    model, loss_fn, x, y, annotations = CASES[request.param]()
    plan = infer(capture_train_step(model, loss_fn, [x], [y]), MESH, annotations)
    reference = copy.deepcopy(model)
    loss = loss_fn(reference(x), y)
    loss.backward()
    grads = {n: p.grad for n, p in reference.named_parameters()}
    return request.param, model, loss_fn, x, y, plan, loss.detach(), grads


def _step(model, loss_fn, x, y, plan):
    """One eager training step of the plan applied to a copy of ``model``: (loss, params,
    bytes every rank received)."""
    mesh = dtensor.init_device_mesh("cpu", MESH)
    eager = plan.to_parallelize_plan()
    m = eager.apply(copy.deepcopy(model), mesh)
    target = dtensor.distribute_tensor(y, mesh, plan.placements("target0"), src_data_rank=None)
    with simpg.trace() as t:
        loss = loss_fn(m(x), target)
        loss = loss.redistribute(mesh, [R] * len(MESH))
        loss.to_local().backward()
    mine = torch.tensor([sum(r.bytes_received[r.ranks.index(dist.get_rank())]
                             for r in t.records)])
    dist.all_reduce(mine)
    return loss, dict(m.named_parameters()), int(mine.item())


def test_the_eager_plan_holds_the_plans_layouts(case):
    name, model, _, _, _, plan, _, _ = case
    eager = plan.to_parallelize_plan()
    assert set(eager.parameters) == {n for n, _ in model.named_parameters()}
    for n, pl in eager.parameters.items():
        assert pl == plan.placements(n), n
    assert eager.inputs == (plan.placements("input0"),)
    assert eager.predicted_bytes == plan.total_bytes
    assert "input0" in str(eager)


@pytest.mark.world(4, timeout=120)
def test_eager_step_equals_one_device_with_planned_layouts(case):
    name, model, loss_fn, x, y, plan, want_loss, want_grads = case
    loss, params, moved = _step(model, loss_fn, x, y, plan)
    torch.testing.assert_close(loss.full_tensor(), want_loss, atol=1e-5, rtol=1e-4)
    eager = plan.to_parallelize_plan()
    for n, p in params.items():
        assert isinstance(p, DTensor) and tuple(p.placements) == eager.parameters[n], n
        assert tuple(p.grad.placements) == tuple(p.placements), n  # the plan's output ties
        torch.testing.assert_close(p.grad.full_tensor(), want_grads[n], atol=1e-5, rtol=1e-4,
                                   msg=n)
    assert moved > 0


@pytest.mark.world(4)
def test_applying_to_another_module_or_mesh_says_what_is_wrong(case):
    _, model, _, _, _, plan, _, _ = case
    eager = plan.to_parallelize_plan()
    with pytest.raises(EagerPlanError, match="made for mesh"):
        eager.apply(copy.deepcopy(model), dtensor.init_device_mesh("cpu", (4,)))
    with pytest.raises(EagerPlanError, match="does not have"):
        eager.apply(torch.nn.Linear(3, 3), dtensor.init_device_mesh("cpu", MESH))
