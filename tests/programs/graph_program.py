"""A planned training step (dtensor.graph) run unchanged on simpg and on real gloo processes.

    python tests/programs/graph_program.py RANK WORLD_SIZE STORE_PORT OUT_PATH
    (as tests/support/gloo_runner.py starts it: the repository root on PYTHONPATH)

``program()`` returns each output (loss, gradients) gathered whole; ``reference()`` the same
on one device. Inference runs on every rank alike (it is deterministic).
"""

from __future__ import annotations

import sys
from datetime import timedelta

import torch

import dtensor
from dtensor import Shard
from dtensor.graph import ShardSpec, capture_train_step, infer, run


def _setup():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))
    x, y = torch.randn(6, 8), torch.randn(6, 8)
    g = capture_train_step(model, lambda out, t: ((out - t) ** 2).mean(), [x], [y])
    flat = [p.detach() for p in model.parameters()] + [x, y]
    return g, flat


def reference() -> dict[str, torch.Tensor]:
    g, flat = _setup()
    return dict(zip(g.outputs, g(*flat)))


def program() -> dict[str, torch.Tensor]:
    g, flat = _setup()
    plan = infer(g, (2,), {"input0": ShardSpec([Shard(0)]),
                           "2.weight": ShardSpec([Shard(1)])})
    mesh = dtensor.init_device_mesh("cpu", (2,))
    outs = run(plan, mesh, *flat)
    assert plan.placements("2.weight") == (Shard(1),)
    return {name: o.full_tensor() for name, o in zip(g.outputs, outs)}


if __name__ == "__main__":
    from tests.support.gloo_runner import run_as_gloo_rank

    run_as_gloo_rank(program, sys.argv[1:], timedelta(seconds=60))
