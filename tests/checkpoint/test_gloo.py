"""dtensor.checkpoint on real gloo processes: 4 processes save from a 2x2 mesh (uneven,
replicated and Partial pieces), load 4-way column-sharded, and one plain process loads the
same checkpoint: bit for bit the saved tensors, as on simpg; an async_save with the next
step's update and collective while it is in flight saves the values at the call. This file
is also the program the processes run:

    python tests/checkpoint/test_gloo.py RANK WORLD_SIZE STORE_PORT OUT_PATH
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import dtensor
import dtensor.checkpoint as dcp
from dtensor import DTensor, Partial, Replicate, Shard

W = torch.arange(35, dtype=torch.float64).reshape(7, 5)
B = torch.arange(6, dtype=torch.float64)


def program(path: str) -> dict[str, torch.Tensor]:
    mesh = dtensor.init_device_mesh("cpu", (2, 2))
    # B as Partial(sum) over dp: dp rank 0 holds B, dp rank 1 zeros
    part = B.clone() if mesh.get_coordinate()[0] == 0 else torch.zeros(6, dtype=B.dtype)
    state = {"w": dtensor.distribute_tensor(W, mesh, [Shard(0), Shard(1)]),
             "b": DTensor.from_local(part, mesh, [Partial(), Replicate()], shape=(6,)),
             "meta": {"step": 3}}
    dcp.save(state, path)
    # async_save: the next step changes w in place and runs a collective on the same group
    # while the save is in flight (Note [async save]: the save's collectives are all done)
    future = dcp.async_save(state, path + "-async")
    state["w"].to_local().add_(100)
    total = torch.ones(1)
    dist.all_reduce(total)
    future.result()
    flat = dtensor.init_device_mesh("cpu", (4,))
    target = {"w": dtensor.zeros(7, 5, dtype=torch.float64, device_mesh=flat,
                                 placements=[Shard(1)]),
              "b": dtensor.zeros(6, dtype=torch.float64, device_mesh=flat,
                                 placements=[Replicate()]),
              "meta": {}}
    dcp.load(target, path)
    w_async = dtensor.zeros(7, 5, dtype=torch.float64, device_mesh=flat, placements=[Shard(0)])
    dcp.load({"w": w_async}, path + "-async")
    return {"w": target["w"].full_tensor(), "b": target["b"].to_local(),
            "step": torch.tensor(target["meta"]["step"]), "w_async": w_async.full_tensor(),
            "total": total}


def test_the_same_program_on_simpg(tmp_path):
    import simpg

    for r in simpg.run(program, 4, str(tmp_path / "ck")):
        assert torch.equal(r["w"], W) and torch.equal(r["b"], B) and r["step"].item() == 3
        assert torch.equal(r["w_async"], W) and r["total"].item() == 4


@pytest.mark.gloo
def test_save_and_load_on_gloo_processes(tmp_path):
    from tests.support.gloo_runner import run_program_on_gloo

    results = run_program_on_gloo(Path(__file__), 4, tmp_path, timeout_s=180.0)
    for r in results:
        assert torch.equal(r["w"], W) and torch.equal(r["b"], B) and r["step"].item() == 3
        assert torch.equal(r["w_async"], W) and r["total"].item() == 4
    state = {"w": torch.zeros(7, 5, dtype=torch.float64), "b": torch.zeros(6, dtype=B.dtype),
             "meta": {}}
    dcp.load(state, tmp_path / "ck")  # one process, no process group
    assert torch.equal(state["w"], W) and torch.equal(state["b"], B)


if __name__ == "__main__":
    from tests.support.gloo_runner import run_as_gloo_rank

    checkpoint_dir = str(Path(sys.argv[4]).parent / "ck")  # beside OUT_PATH: the test's tmp_path
    run_as_gloo_rank(lambda: program(checkpoint_dir), sys.argv[1:], timedelta(seconds=60))
