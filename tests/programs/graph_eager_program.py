"""An inferred plan applied to the eager module and followed call by call (dtensor.graph
``EagerPlan`` + ``following``), run unchanged on simpg and on real gloo processes.

    python tests/programs/graph_eager_program.py RANK WORLD_SIZE STORE_PORT OUT_PATH
    (as tests/support/gloo_runner.py starts it: the repository root on PYTHONPATH)

``program()`` returns the loss and every gradient gathered whole, and the collectives this
rank issued by kind next to the plan's; ``reference()`` the loss and gradients on one device.
"""

from __future__ import annotations

import copy
import sys
from collections import Counter
from datetime import timedelta

import torch

import dtensor
from dtensor import Replicate, Shard
from dtensor.comm.debug_mode import KINDS, CommDebugMode
from dtensor.graph import ShardSpec, capture_train_step, following, infer


def _mse(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((out - target) ** 2).mean()


def _setup():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))
    return model, torch.randn(6, 8), torch.randn(6, 8)


def reference() -> dict[str, torch.Tensor]:
    model, x, y = _setup()
    loss = _mse(model(x), y)
    loss.backward()
    return {"loss": loss.detach(), **{n: p.grad for n, p in model.named_parameters()}}


def program() -> dict:
    model, x, y = _setup()
    plan = infer(capture_train_step(model, _mse, [x], [y]), (2,),
                 {"input0": ShardSpec([Shard(0)]), "2.weight": ShardSpec([Shard(1)])})
    mesh = dtensor.init_device_mesh("cpu", (2,))
    m = plan.to_parallelize_plan().apply(copy.deepcopy(model), mesh)
    target = dtensor.distribute_tensor(y, mesh, plan.placements("target0"), src_data_rank=None)
    with CommDebugMode() as comms, following(m):
        loss = _mse(m(x), target).redistribute(mesh, [Replicate()])
        loss.to_local().backward()
    planned = Counter(s.kind for r in plan.reshards for s in r.steps if s.kind in KINDS)
    return {"loss": loss.full_tensor(),
            **{n: p.grad.full_tensor() for n, p in m.named_parameters()},
            "collectives": dict(comms.get_comm_counts_by_kind()), "planned": dict(planned)}


if __name__ == "__main__":
    from tests.support.gloo_runner import run_as_gloo_rank

    run_as_gloo_rank(program, sys.argv[1:], timedelta(seconds=60))
