"""Pipeline stages that are themselves tensor-parallel and fully sharded: pp x dp x tp on 8
simulated ranks equals one device in every weight after several steps (the docs page's
example, docs/pipelining.md)."""

from __future__ import annotations

import copy

import pytest
import torch

import simpg
from dtensor import init_device_mesh
from dtensor.parallel import ColwiseParallel, RowwiseParallel, fully_shard, parallelize_module
from dtensor.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
from tests.pipelining.test_schedules import (_data, _loss, _model, _one_device_dp,
                                             _stage_modules, _train_dp_stage)


@pytest.mark.parametrize("schedule_cls", [ScheduleGPipe, Schedule1F1B])
@pytest.mark.parametrize("m", [2, 3])
def test_fully_sharded_tensor_parallel_stages_train_like_one_device(schedule_cls, m):
    data = _data(2, 12)
    _, want = _one_device_dp(_model(4), data, m=m, dp=2)
    start = _model(4)

    def rank():
        mesh = init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("pp", "dp", "tp"))
        s, d = mesh.get_local_rank("pp"), mesh.get_local_rank("dp")
        model = copy.deepcopy(start)
        mine = _stage_modules(model, 2)[s]
        for block in mine:
            parallelize_module(block, mesh["tp"], {"up": ColwiseParallel(),
                                                   "down": RowwiseParallel()})
            fully_shard(block, mesh["dp"])
        fully_shard(mine, mesh["dp"])
        stage = PipelineStage(mine, s, 2, group=mesh.get_group("pp"), mesh=mesh["dp", "tp"])
        return _train_dp_stage(schedule_cls(stage, m, loss_fn=_loss), stage, model, mine,
                               data, d)

    seen = set()
    for weights in simpg.run(rank, 8):
        for name, w in weights.items():
            torch.testing.assert_close(w, want[name], msg=name)
            seen.add(name)
    assert seen == set(want)


def test_a_stages_parameters_are_not_laid_out_over_pp():
    """Note [parameters of a pipeline stage]: the other stages hold other parameters, so a
    stage's live on the dp (x tp) mesh, never with a Replicate over pp."""
    start = _model(4)

    def rank():
        mesh = init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("pp", "dp", "tp"))
        mine = _stage_modules(copy.deepcopy(start), 2)[mesh.get_local_rank("pp")]
        parallelize_module(mine[0], mesh["tp"], {"up": ColwiseParallel(),
                                                 "down": RowwiseParallel()})
        fully_shard(mine, mesh["dp"])
        return {n: p.device_mesh.mesh_dim_names for n, p in mine.named_parameters()}

    for names in simpg.run(rank, 8):
        assert names["0.up.weight"] == ("tp", "dp") and names["1.up.weight"] == ("tp", "dp")
        assert names["1.down.bias"] == ("tp", "dp")
