"""Unmodified torch DTensor programs on simpg give the single-device answer under every
schedule (Note [per-rank process state]); what simpg cannot isolate is reported."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.tensor import Replicate, Shard, distribute_tensor, init_device_mesh
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    SequenceParallel,
    loss_parallel,
    parallelize_module,
)

import simpg

SEEDS = [None, *range(10)]


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 5))  # 10 over 3: uneven


def _x() -> torch.Tensor:
    return torch.arange(42.0).reshape(7, 6) / 10


def _tp_mlp():
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    # use_local_output=False: the hidden activation keeps its global (uneven) shape
    m = parallelize_module(_mlp(), mesh, {"0": ColwiseParallel(use_local_output=False),
                                          "2": RowwiseParallel()})
    out = m(_x())
    out.sum().backward()
    return out.detach(), m[0].weight.grad.full_tensor(), m[2].weight.grad.full_tensor()


def _tp_mlp_reference():
    m = _mlp()
    out = m(_x())
    out.sum().backward()
    return out.detach(), m[0].weight.grad, m[2].weight.grad


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.norm, self.fc1, self.fc2 = nn.LayerNorm(6), nn.Linear(6, 9), nn.Linear(9, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


def _seq_x() -> torch.Tensor:
    return torch.linspace(-2, 2, 2 * 7 * 6).reshape(2, 7, 6)  # sequence 7 over 3: uneven


def _sequence_parallel():
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    block = parallelize_module(_Block(), mesh, {
        "norm": SequenceParallel(),
        "fc1": ColwiseParallel(input_layouts=Shard(1)),
        "fc2": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
    })
    x = distribute_tensor(_seq_x(), mesh, [Shard(1)])
    out = block(x)
    out.full_tensor().sum().backward()
    return out.full_tensor().detach(), block.fc1.weight.grad.full_tensor()


def _sequence_parallel_reference():
    block = _Block()
    out = block(_seq_x())
    out.sum().backward()
    return out.detach(), block.fc1.weight.grad


def _logits() -> torch.Tensor:
    return torch.linspace(-3, 3, 5 * 7).reshape(5, 7)  # 7 classes over 3 ranks: uneven


def _labels() -> torch.Tensor:
    return torch.tensor([0, 6, 3, 2, 5])


def _loss_parallel():
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    logits = distribute_tensor(_logits(), mesh, [Shard(1)]).requires_grad_()
    with loss_parallel():  # a process-wide switch in torch: swapped per rank by simpg
        loss = F.cross_entropy(logits, _labels())
        loss.backward()
    return loss.full_tensor().detach(), logits.grad.full_tensor()


def _loss_parallel_reference():
    logits = _logits().requires_grad_()
    loss = F.cross_entropy(logits, _labels())
    loss.backward()
    return loss.detach(), logits.grad


def _redistribute_2d():
    mesh = init_device_mesh("cpu", (2, 2))
    full = torch.arange(35.0).reshape(7, 5)
    d = distribute_tensor(full, mesh, [Shard(0), Shard(1)])
    out = []
    for placements in ([Shard(1), Shard(0)], [Replicate(), Shard(0)], [Shard(1), Shard(1)]):
        out.append(d.redistribute(mesh, placements).full_tensor())
    return tuple(out)


def _redistribute_2d_reference():
    return (torch.arange(35.0).reshape(7, 5),) * 3


PROGRAMS = {
    "tp_mlp": (_tp_mlp, _tp_mlp_reference, 3),
    "sequence_parallel": (_sequence_parallel, _sequence_parallel_reference, 3),
    "loss_parallel": (_loss_parallel, _loss_parallel_reference, 3),
    "redistribute_2d": (_redistribute_2d, _redistribute_2d_reference, 4),
}


@pytest.mark.filterwarnings("ignore::UserWarning:torch")  # torch's own advice on cpu groups
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_torch_dtensor_equals_single_device_under_every_schedule(name):
    program, reference, world_size = PROGRAMS[name]
    expected = reference()
    for seed in SEEDS:
        for rank, got in enumerate(simpg.run(program, world_size, schedule_seed=seed)):
            for g, e in zip(got, expected, strict=True):
                where = f"seed {seed}, rank {rank}"
                torch.testing.assert_close(g, e, msg=lambda m, where=where: f"{where}: {m}")


def test_meshes_of_different_ranks_and_worlds_differ():
    def body():
        return init_device_mesh("cpu", (2,))

    a0, a1 = simpg.run(body, 2)
    b0, _ = simpg.run(body, 2)
    assert a0 != a1 and a0 != b0 and hash(a0) != hash(a1)


def test_process_wide_switches_are_per_rank_and_the_callers_come_back():
    def body():
        if dist.get_rank() == 0:
            torch.set_default_dtype(torch.float64)
        dist.barrier()  # rank 1 runs in between
        return torch.get_default_dtype()

    assert simpg.run(body, 2, schedule_seed=3) == [torch.float64, torch.float32]
    assert torch.get_default_dtype() == torch.float32


_LATE_IMPORT = """
import warnings, torch.distributed as dist, simpg
assert "torch.distributed.tensor" not in __import__("sys").modules
def body():
    from torch.distributed.tensor.parallel import loss_parallel  # first imported by a rank
    with loss_parallel():  # and changed before its first collective: the limit
        dist.barrier()
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    simpg.run(body, 2)
print([str(w.message) for w in seen if w.category.__name__ == "IsolationWarning"])
"""


def test_a_module_first_imported_inside_the_world_is_reported():
    out = subprocess.run([sys.executable, "-c", _LATE_IMPORT], capture_output=True, text=True,
                         timeout=300, check=True).stdout
    assert "torch.distributed.tensor._api was first imported inside a simpg world" in out
    assert "changed DTensor custom op handlers before its first collective" in out
