"""dtensor.checkpoint when ranks hold different keys, as pipeline stages do (Note [different
keys per rank] in dtensor/checkpoint/saving.py): each stage saves its own layers from a
sub-mesh of a (pp, dp) mesh; the checkpoint holds every key once, whole, and loads into one
process (every key) or into another layout bit for bit."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import dtensor
import dtensor.checkpoint as dcp
import simpg
from dtensor import Replicate, Shard

GEN = torch.Generator().manual_seed(0)
# stage 0 holds "first.*", stage 1 "second.*"; 7 rows: uneven over dp=2
FULL = {"first.w": torch.randn(7, 3, generator=GEN), "first.b": torch.randn(5, generator=GEN),
        "second.w": torch.randn(7, 4, generator=GEN), "second.b": torch.randn(3, generator=GEN),
        "second.step": torch.tensor(4.0)}


def _stage_state(stage: int, mesh) -> dict:
    """What stage ``stage`` saves: its weight sharded over dp, its bias replicated over dp,
    a plain tensor, and a value only that stage holds."""
    name = ("first", "second")[stage]
    state: dict = {f"{name}.w": dtensor.distribute_tensor(FULL[f"{name}.w"], mesh, [Shard(0)]),
                   f"{name}.b": dtensor.distribute_tensor(FULL[f"{name}.b"], mesh,
                                                          [Replicate()]),
                   "epoch": 3, f"{name}.lr": 0.1 * (stage + 1)}
    if stage == 1:
        state["second.step"] = FULL["second.step"].clone()
    return state


def _save_from_two_stages(path: Path) -> None:
    def rank():
        mesh = dtensor.init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "dp"))
        dcp.save(_stage_state(mesh.get_local_rank("pp"), mesh["dp"]), path)

    simpg.run(rank, 4)


def test_every_stages_keys_are_saved_once_and_load_whole_in_one_process(tmp_path):
    _save_from_two_stages(tmp_path / "ck")
    state = {k: torch.zeros_like(v) for k, v in FULL.items()}
    state |= {"epoch": 0, "first.lr": 0.0, "second.lr": 0.0}
    dcp.load(state, tmp_path / "ck")
    for key, want in FULL.items():
        assert torch.equal(state[key], want), key
    assert (state["epoch"], state["first.lr"], state["second.lr"]) == (3, 0.1, 0.2)
    # stage 1's ranks (2, 3) wrote its pieces: before, only the pp=0 replica wrote any
    written = {f.name for f in (tmp_path / "ck").resolve().glob("rank*.safetensors")}
    assert {"rank00002.safetensors", "rank00003.safetensors"} <= written


@pytest.mark.parametrize("layout", ["one stage of 4", "stages swapped"])
def test_two_stages_load_into_another_layout_bit_for_bit(tmp_path, layout):
    _save_from_two_stages(tmp_path / "ck")

    def rank():
        if layout == "one stage of 4":  # pp=1: every key, sharded over 4 ranks
            mesh = dtensor.init_device_mesh("cpu", (4,), mesh_dim_names=("dp",))
            keys = list(FULL)
        else:  # pp=2 again, the other way round: stage 0 now holds "second.*"
            full = dtensor.init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "dp"))
            mesh = full["dp"]
            keys = [k for k in FULL if k.startswith(("second", "first")[full.get_local_rank(
                "pp")])]
        state = {k: (torch.zeros_like(FULL[k]) if FULL[k].ndim == 0 else
                     dtensor.distribute_tensor(torch.zeros_like(FULL[k]), mesh, [Shard(0)]))
                 for k in keys}
        dcp.load(state, tmp_path / "ck")
        return {k: (v.full_tensor() if isinstance(v, dtensor.DTensor) else v)
                for k, v in state.items()}

    for got in simpg.run(rank, 4):
        for key, value in got.items():
            assert torch.equal(value, FULL[key]), key


def test_a_sharded_tensor_a_stage_leaves_incomplete_fails_the_save(tmp_path):
    """Different keys are allowed; a tensor whose pieces do not tile it is still refused."""
    def rank():
        mesh = dtensor.init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "dp"))
        state = _stage_state(mesh.get_local_rank("pp"), mesh["dp"])
        if dist.get_rank() == 3:  # drops its half of stage 1's sharded weight
            del state["second.w"]
        dcp.save(state, tmp_path / "ck")

    with pytest.raises(Exception, match="second.w.*the ranks write 16 elements, expected 28"):
        simpg.run(rank, 4)


def test_the_consolidated_export_of_a_pipelined_checkpoint_holds_every_stage(tmp_path):
    pytest.importorskip("safetensors")
    from safetensors.torch import load_file

    _save_from_two_stages(tmp_path / "ck")
    dcp.export_safetensors(tmp_path / "ck", tmp_path / "model.safetensors")
    got = load_file(tmp_path / "model.safetensors")
    assert set(got) == set(FULL)
    for key, want in FULL.items():
        assert torch.equal(got[key], want), key


def test_a_live_export_from_stages_holding_different_keys_holds_every_stage(tmp_path):
    """Note [a live export across stages]: each key gathered by its stage's ranks and sent
    to rank 0, which writes them all."""
    pytest.importorskip("safetensors")
    from safetensors.torch import load_file

    def rank():
        mesh = dtensor.init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "dp"))
        state = _stage_state(mesh.get_local_rank("pp"), mesh["dp"])
        return dcp.export_safetensors(state, tmp_path / "model.safetensors")

    written = simpg.run(rank, 4)
    assert written[0] == [str(tmp_path / "model.safetensors")] and written[1:] == [[]] * 3
    got = load_file(tmp_path / "model.safetensors")
    assert set(got) == set(FULL)
    for key, want in FULL.items():
        assert torch.equal(got[key], want), key
