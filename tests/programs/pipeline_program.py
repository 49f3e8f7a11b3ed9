"""Every pipeline schedule on 2 pp ranks, run unchanged on simpg and on real gloo processes:
two SGD steps of a small float64 MLP per schedule (GPipe and 1F1B one stage a rank; looped
BFS, interleaved 1F1B, interleaved zero-bubble and the zero-bubble V two stages a rank, the
V's middle stages handing over in memory). Each rank returns its stages' trained weights
and the last stage's losses, keyed by schedule. ``tests/pipelining/test_on_gloo.py`` runs
``program()`` both ways and checks them against one device and each other:

    python tests/programs/pipeline_program.py RANK WORLD_SIZE STORE_PORT OUT_PATH
"""

from __future__ import annotations

import copy
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import dtensor.pipelining as pipelining

TIMEOUT = timedelta(seconds=120)
PP, M, BATCH, DIM = 2, 4, 8, 6
SCHEDULES = {"ScheduleGPipe": 1, "Schedule1F1B": 1, "ScheduleLoopedBFS": 2,
             "ScheduleInterleaved1F1B": 2, "ScheduleInterleavedZeroBubble": 2,
             "ScheduleZBVZeroBubble": 2, "ScheduleDualPipeV": 2}


def model(n_layers: int) -> nn.Sequential:
    torch.manual_seed(0)
    layers = [nn.Sequential(nn.Linear(DIM, DIM), nn.Tanh()) for _ in range(n_layers)]
    return nn.Sequential(*layers).double()


def data() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(BATCH, DIM, generator=g, dtype=torch.float64),
             torch.randn(BATCH, DIM, generator=g, dtype=torch.float64)) for _ in range(2)]


def placement(name: str, rank: int) -> list[int]:
    """The stages rank ``rank`` holds under schedule ``name``."""
    v = SCHEDULES[name]
    if name in ("ScheduleZBVZeroBubble", "ScheduleDualPipeV"):
        return [rank, 2 * PP - 1 - rank]
    return list(range(rank, PP * v, PP))


def train(name: str) -> dict[str, torch.Tensor]:
    rank, v = dist.get_rank(), SCHEDULES[name]
    n = PP * v
    whole = model(n)
    indices = placement(name, rank)
    mine = [copy.deepcopy(whole[i]) for i in indices]
    stages = [pipelining.PipelineStage(mod, i, n) for mod, i in zip(mine, indices)]
    schedule = getattr(pipelining, name)(stages[0] if v == 1 else stages, M,
                                         loss_fn=F.mse_loss)
    params = [p for mod in mine for p in mod.parameters()]
    opt = torch.optim.SGD(params, lr=0.1)
    out: dict[str, torch.Tensor] = {}
    for step, (x, y) in enumerate(data()):
        losses: list = []
        kwargs = {"target": y, "losses": losses} if n - 1 in indices else {}
        schedule.step(x, **kwargs) if 0 in indices else schedule.step(**kwargs)
        opt.step()
        opt.zero_grad()
        if losses:
            out[f"{name}/losses {step}"] = torch.stack([t.detach() for t in losses])
    for i, mod in zip(indices, mine):
        for pname, p in mod.named_parameters():
            out[f"{name}/{i}.{pname}"] = p.detach().clone()
    return out


def program() -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for name in SCHEDULES:
        out.update(train(name))
    return out


if __name__ == "__main__":
    from tests.support.gloo_runner import run_as_gloo_rank

    run_as_gloo_rank(program, sys.argv[1:], TIMEOUT)
