"""Interop with torch.distributed.checkpoint (DCP): a DCP checkpoint of torch's DTensors,
saved on simpg, loads into our DTensors in another layout (``load_torch_dcp``); and ours
loads into torch's DTensors (``load`` reads their public attributes), from where DCP can
save it (Note [the reverse] in dtensor.checkpoint.torch_dcp)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.distributed.checkpoint as torch_dcp
from torch.distributed.device_mesh import init_device_mesh as torch_mesh
from torch.distributed.tensor import Replicate as TR
from torch.distributed.tensor import Shard as TS
from torch.distributed.tensor import distribute_tensor as torch_distribute

import dtensor
import dtensor.checkpoint as dcp
import simpg
from dtensor import Replicate, Shard

W = torch.randn(7, 5, generator=torch.Generator().manual_seed(0))
B = torch.arange(6.0)


def _torch_save(path: str) -> None:
    def body():
        mesh = torch_mesh("cpu", (2, 2))
        state = {"model": {"w": torch_distribute(W, mesh, [TS(0), TS(1)]),
                           "b": torch_distribute(B, mesh, [TR(), TS(0)])},
                 "step": torch.tensor(3.0), "lr": 0.25}
        torch_dcp.save(state, checkpoint_id=path)
    simpg.run(body, 4)


def test_a_dcp_checkpoint_loads_into_our_dtensors_in_another_layout(tmp_path):
    path = str(tmp_path / "dcp")
    _torch_save(path)

    def body():
        mesh = dtensor.init_device_mesh("cpu", (8,))
        state = {"model": {"w": dtensor.zeros(7, 5, device_mesh=mesh, placements=[Shard(1)]),
                           "b": dtensor.zeros(6, device_mesh=mesh, placements=[Replicate()])},
                 "step": torch.tensor(0.0), "lr": 0.0}
        report = dcp.load_torch_dcp(state, path)
        return (state["model"]["w"].full_tensor(), state["model"]["b"].to_local(),
                state["step"], state["lr"], report.bytes_read)

    for w, b, step, lr, _ in simpg.run(body, 8):
        assert torch.equal(w, W) and torch.equal(b, B)
        assert step.item() == 3.0 and lr == 0.25


def test_a_dcp_checkpoint_loads_on_one_process(tmp_path):
    path = str(tmp_path / "dcp")
    _torch_save(path)
    state = {"model": {"w": torch.zeros(7, 5), "b": torch.zeros(6)}, "step": torch.tensor(0.0),
             "lr": 0.0}
    dcp.load_torch_dcp(state, path)
    assert torch.equal(state["model"]["w"], W) and state["lr"] == 0.25
    with pytest.raises(dcp.StateMismatchError, match=r"'model.w' is float32 \[7, 5\] in the "
                       r"DCP checkpoint, but the target is float32 \[5, 7\]"):
        dcp.load_torch_dcp({"model": {"w": torch.zeros(5, 7)}}, path)
    with pytest.raises(dcp.MissingKeyError, match=r"no 'model.nope' in the DCP checkpoint"):
        dcp.load_torch_dcp({"model": {"nope": torch.zeros(1)}}, path)


def test_dcp_metadata_outside_the_allow_list_is_refused(tmp_path):
    import pickle

    (tmp_path / "evil").mkdir()

    class Evil:
        def __reduce__(self):
            return (print, ("ran code from a checkpoint",))

    (tmp_path / "evil" / ".metadata").write_bytes(pickle.dumps(Evil()))
    with pytest.raises(dcp.CorruptCheckpointError, match=r"builtins.print, which is not on the "
                       r"allow-list"):
        dcp.load_torch_dcp({}, tmp_path / "evil")


def test_ours_loads_into_torch_dtensors_which_dcp_can_then_save(tmp_path):
    ours, theirs = str(tmp_path / "ours"), str(tmp_path / "dcp")

    def save_ours():
        mesh = dtensor.init_device_mesh("cpu", (2, 4))
        dcp.save({"w": dtensor.distribute_tensor(W, mesh, [Shard(1), Shard(0)]),
                  "b": dtensor.distribute_tensor(B, mesh, [Replicate(), Shard(0)])}, ours)

    def into_torch():
        mesh = torch_mesh("cpu", (2, 2))
        state = {"w": torch_distribute(torch.zeros(7, 5), mesh, [TS(0), TR()]),
                 "b": torch_distribute(torch.zeros(6), mesh, [TR(), TS(0)])}
        dcp.load(state, ours)
        torch_dcp.save(state, checkpoint_id=theirs)
        return state["w"].full_tensor(), state["b"].full_tensor()

    simpg.run(save_ours, 8)
    for w, b in simpg.run(into_torch, 4):
        assert torch.equal(w, W) and torch.equal(b, B)
    plain = {"w": torch.zeros(7, 5), "b": torch.zeros(6)}
    with warnings.catch_warnings():  # DCP says it assumes one process, which is the case
        warnings.filterwarnings("ignore", "torch.distributed is disabled", UserWarning)
        torch_dcp.load(plain, checkpoint_id=theirs, no_dist=True)  # DCP itself, one process
    assert torch.equal(plain["w"], W) and torch.equal(plain["b"], B)
