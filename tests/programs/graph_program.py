"""A planned training step (dtensor.graph) run unchanged on simpg and on real gloo processes.

    python tests/programs/graph_program.py RANK WORLD_SIZE STORE_PORT OUT_PATH

``program()`` returns each output (loss, gradients) gathered whole; ``reference()`` the same
on one device. Inference runs on every rank alike (it is deterministic).
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import dtensor  # noqa: E402
from dtensor import Shard  # noqa: E402
from dtensor.graph import ShardSpec, capture_train_step, infer, run  # noqa: E402


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
    rank, world, port, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=60))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    torch.save(program(), out)
    dist.destroy_process_group()
