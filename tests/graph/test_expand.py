"""dtensor.graph expansion: planned graphs run as SPMD programs on simpg (and gloo) and give
one device's outputs and gradients, moving exactly the bytes the plan says."""

from __future__ import annotations

import pytest
import torch

import dtensor
import simpg
from dtensor import Replicate, Shard
from dtensor.graph import ShardSpec, capture, capture_train_step, infer, run, shard_hint
from examples.models import llama
from tests.support.graph_steps import (mse, run_moving_the_planned_bytes, tiny_llama,
                                       tiny_mlp)
from tests.support.paths import PROGRAMS

R = Replicate()
PROGRAM = PROGRAMS / "graph_program.py"


@pytest.fixture(scope="module")
def mlp_step():
    model = tiny_mlp()
    x, y = torch.randn(6, 8), torch.randn(6, 7)  # 6 rows over 2 x 2 ranks: uneven pieces too
    g = capture_train_step(model, mse, [x], [y])
    plan = infer(g, (2, 2), {"input0": ShardSpec([Shard(0), R]),
                             "0.weight": ShardSpec([R, Shard(0)])})
    flat = [p.detach() for p in model.parameters()] + [x, y]
    return plan, flat, g(*flat)


@pytest.mark.world(4)
def test_training_step_equals_one_device_and_moves_the_planned_bytes(mlp_step):
    plan, flat, reference = mlp_step
    outs = run_moving_the_planned_bytes(plan, (2, 2), flat)
    for name, got, want, ends in zip(plan.graph.outputs, outs, reference, plan.output_targets()):
        assert tuple(got.placements) == ends, name
        torch.testing.assert_close(got.full_tensor(), want, msg=name)


@pytest.fixture(scope="module")
def hinted():
    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(8, 16)
            self.b = torch.nn.Linear(16, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = shard_hint(torch.tanh(self.a(x)), ShardSpec([Shard(1)]))
            return self.b(h).sum(-1)

    torch.manual_seed(1)
    model = Model()
    x = torch.randn(5, 8)
    plan = infer(capture(model, x), (2,), {"input0": ShardSpec([Shard(0)])})
    return model, x, plan


@pytest.mark.world(2)
def test_forward_with_a_hint_and_backward_through_dtensors(hinted):
    model, x, plan = hinted
    assert plan.placements("shard_hint") == (Shard(1),)
    mesh = dtensor.init_device_mesh("cpu", (2,))
    params = [dtensor.distribute_tensor(p.detach(), mesh, [R]).requires_grad_()
              for p in model.parameters()]
    out = run(plan, mesh, *params, x)  # one output: not a tuple
    out.full_tensor().pow(2).sum().backward()
    model.zero_grad()
    want = model(x)
    want.pow(2).sum().backward()
    torch.testing.assert_close(out.full_tensor(), want.detach())
    for p, ref in zip(params, model.parameters()):
        torch.testing.assert_close(p.grad.full_tensor(), ref.grad)


@pytest.fixture(scope="module")
def llama_step():
    model, tokens = tiny_llama()
    g = capture_train_step(model, llama.loss_fn, [tokens], [tokens.roll(-1, 1)])
    plan = infer(g, (2, 2), {"input0": ShardSpec([Shard(0), R]),
                             "tok_embeddings.weight": ShardSpec([R, Shard(0)])})
    flat = [t.detach() for t in list(model.parameters()) + list(model.buffers())]
    flat += [tokens, tokens.roll(-1, 1)]
    return plan, flat, g(*flat)


@pytest.mark.world(4, timeout=60)
def test_llama_training_step_equals_one_device(llama_step):
    plan, flat, reference = llama_step
    outs = run_moving_the_planned_bytes(plan, (2, 2), flat)
    for name, got, want in zip(plan.graph.outputs, outs, reference):
        torch.testing.assert_close(got.full_tensor(), want, msg=name, atol=1e-5, rtol=1e-4)


def _program():
    from tests.support.gloo_runner import load_program

    return load_program(PROGRAM)


# slow tier: the plan on real gloo processes (22 s); on simpg is the default run's
@pytest.mark.slow
@pytest.mark.gloo
def test_training_step_on_gloo_equals_simpg_and_one_device(tmp_path):
    from tests.support.gloo_runner import run_program_on_gloo

    program = _program()
    on_simpg = simpg.run(program.program, 2, timeout=60)
    on_gloo = run_program_on_gloo(PROGRAM, 2, tmp_path, timeout_s=180.0)
    reference = program.reference()
    for sim, real in zip(on_simpg, on_gloo, strict=True):
        for name, want in reference.items():
            torch.testing.assert_close(sim[name], want, msg=name)
            torch.testing.assert_close(real[name], want, msg=name)
