"""Consolidated safetensors files (dtensor/checkpoint/consolidated.py): exported from a
sharded checkpoint or a live state and read back by the safetensors package's own reader;
files the safetensors package wrote, loaded into any layout, each rank reading only its
piece's bytes (Note [box runs])."""

from __future__ import annotations

import json
import math
import os
import secrets

import fsspec
import pytest
import torch
from safetensors.torch import load_file, save_file

import dtensor
import dtensor.checkpoint as dcp
import simpg
from dtensor import Partial, Replicate, Shard
from dtensor.checkpoint import consolidated
from dtensor.layout import local_slices

WORLD = 8
G = torch.Generator().manual_seed(3)
FULL = {  # uneven on 2x4 and 8 ranks; bf16, int64, a 0-d
    "layers.0.w": torch.randn(9, 7, generator=G),
    "layers.0.h": torch.randn(3, 10, generator=G).to(torch.bfloat16),
    "layers.1.i": torch.arange(60, dtype=torch.int64).reshape(3, 4, 5),
    "scale": torch.tensor(2.5),
}
SAVE_2x4 = {"layers.0.w": [Shard(0), Shard(1)], "layers.0.h": [Shard(1), Shard(1)],
            "layers.1.i": [Replicate(), Shard(2)], "scale": [Replicate(), Replicate()]}


def _live(mesh, placements: dict) -> dict:
    return {k: dtensor.distribute_tensor(FULL[k], mesh, placements[k]) for k in FULL}


def _equal_to_full(got: dict) -> None:
    assert sorted(got) == sorted(FULL)
    for k, want in FULL.items():
        assert got[k].dtype == want.dtype and torch.equal(got[k], want), k


def test_export_a_sharded_checkpoint_to_one_file(tmp_path):
    ck = str(tmp_path / "ck")
    simpg.run(lambda: dcp.save({**_live(dtensor.init_device_mesh("cpu", (2, 4)), SAVE_2x4),
                                "step": 3}, ck), WORLD)
    out = str(tmp_path / "model.safetensors")
    assert dcp.export_safetensors(ck, out) == [out]
    _equal_to_full(load_file(out))  # values ("step") are not tensors: not exported
    os.unlink(out)
    written = simpg.run(lambda: dcp.export_safetensors(ck, out), WORLD)  # every rank calls
    assert written == [[out]] + [[]] * (WORLD - 1)
    _equal_to_full(load_file(out))


def test_export_live_dtensors_with_partial_on_every_rank(tmp_path):
    out = str(tmp_path / "model.safetensors")

    def body():
        mesh = dtensor.init_device_mesh("cpu", (2, 4))
        state = _live(mesh, SAVE_2x4)
        cols = dtensor.distribute_tensor(FULL["layers.0.w"], mesh, [Replicate(), Shard(1)])
        state["layers.0.w"] = dtensor.DTensor.from_local(  # 0.5 w + 0.5 w
            cols.to_local() / 2, mesh, [Partial(), Shard(1)], shape=FULL["layers.0.w"].shape)
        return dcp.export_safetensors({"model": state}, out)

    written = simpg.run(body, WORLD)
    assert written[0] == [out] and all(w == [] for w in written[1:])
    got = load_file(out)
    assert sorted(got) == sorted(f"model.{k}" for k in FULL)
    for k, want in FULL.items():
        torch.testing.assert_close(got[f"model.{k}"], want, rtol=0, atol=1e-6)


def test_export_in_the_hubs_sharded_layout(tmp_path):
    folder = str(tmp_path / "hub")
    nbytes = {k: t.numel() * t.element_size() for k, t in FULL.items()}
    files = dcp.export_safetensors(FULL, folder, max_shard_bytes=260)
    index = json.loads((tmp_path / "hub" / consolidated.INDEX).read_text())
    assert files[-1].endswith(consolidated.INDEX) and len(files) - 1 >= 2
    assert index["metadata"]["total_size"] == sum(nbytes.values())
    assert sorted(index["weight_map"]) == sorted(FULL)
    got = {}
    for name in files[:-1]:
        part = load_file(name)
        assert sum(nbytes[k] for k in part) <= 260 or len(part) == 1
        got.update(part)
    _equal_to_full(got)
    assert {index["weight_map"][k] for k in FULL} == {os.path.basename(f) for f in files[:-1]}


LOAD_LAYOUTS = [  # (mesh, placements per key)
    ((2, 4), SAVE_2x4),
    ((8,), {"layers.0.w": [Shard(1)], "layers.0.h": [Shard(0)], "layers.1.i": [Shard(1)],
            "scale": [Partial()]}),
]


@pytest.mark.parametrize("mesh_shape,placements", LOAD_LAYOUTS, ids=["2x4", "8"])
@pytest.mark.parametrize("layout", ["one file", "index"])
def test_load_a_file_the_safetensors_package_wrote_into_any_layout(tmp_path, mesh_shape,
                                                                   placements, layout):
    if layout == "one file":
        path = str(tmp_path / "model.safetensors")
        save_file(FULL, path)
    else:
        keys = sorted(FULL)
        for i, part in enumerate([keys[:2], keys[2:]]):
            save_file({k: FULL[k] for k in part}, str(tmp_path / f"part{i}.safetensors"))
        path = str(tmp_path / "model.safetensors.index.json")
        weight_map = {k: f"part{int(k in keys[2:])}.safetensors" for k in keys}
        with open(path, "w") as f:
            json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)
    read = []
    real_read = consolidated._read_ranges

    def counting(file, ranges):
        out = real_read(file, ranges)
        if ranges and ranges[0][0] > 8:  # not the header (its length, then its JSON)
            read.append(len(out))
        return out

    def body():
        mesh = dtensor.init_device_mesh("cpu", mesh_shape)
        state = {k: dtensor.distribute_tensor(torch.zeros_like(v), mesh, placements[k])
                 for k, v in FULL.items()}
        dcp.load_safetensors(state, path)
        coord = mesh.get_coordinate()
        ok = True
        for k, t in state.items():
            if any(isinstance(p, Partial) for p in placements[k]):
                ok = ok and torch.equal(t.full_tensor(), FULL[k])
                continue
            want = FULL[k][local_slices(FULL[k].shape, mesh_shape, placements[k], coord)]
            ok = ok and torch.equal(t.to_local(), want)
        held = sum(t.to_local().numel() * t.element_size() for k, t in state.items()
                   if not any(isinstance(p, Partial) for p in placements[k])
                   or t.device_mesh.get_coordinate()[0] == 0)
        return ok, held

    consolidated._read_ranges = counting
    try:
        results = simpg.run(body, WORLD)
    finally:
        consolidated._read_ranges = real_read
    assert all(ok for ok, _ in results)
    assert sum(read) == sum(held for _, held in results)  # each rank read its piece, no more


def test_box_runs_cover_exactly_the_box():
    shape, itemsize = (3, 4, 5), 2
    flat = torch.arange(math.prod(shape)).reshape(shape)
    for box in [((0, 3), (1, 3), (0, 5)), ((1, 2), (0, 4), (2, 3)), ((0, 3), (0, 4), (0, 5)),
                ((2, 3), (3, 4), (4, 5)), ((0, 0), (0, 4), (0, 5))]:
        got = [i // itemsize for a, b in consolidated.box_runs(shape, box, itemsize)
               for i in range(a, b, itemsize)]
        assert got == flat[tuple(slice(a, b) for a, b in box)].reshape(-1).tolist(), box


def test_round_trip_through_the_memory_filesystem():
    url = f"memory:///hub-{secrets.token_hex(4)}"
    try:
        dcp.export_safetensors(FULL, url, max_shard_bytes=300)
        state = {k: torch.zeros_like(v) for k, v in FULL.items()}
        dcp.load_safetensors(state, f"{url}/{consolidated.INDEX}")
        _equal_to_full(state)
    finally:
        fsspec.filesystem("memory").rm(url.removeprefix("memory://"), recursive=True)


def test_errors_name_the_file_and_the_key(tmp_path):
    path = str(tmp_path / "model.safetensors")
    save_file({"w": torch.zeros(2, 3)}, path)
    with pytest.raises(dcp.MissingKeyError, match=r"model.safetensors: no tensor 'v'"):
        dcp.load_safetensors({"v": torch.zeros(1)}, path)
    with pytest.raises(dcp.StateMismatchError, match=r"'w' is F32 \[2, 3\], but the target is "
                       r"float32 \[3, 2\]"):
        dcp.load_safetensors({"w": torch.zeros(3, 2)}, path)
    with pytest.raises(ValueError, match="max_shard_bytes=0: expected a positive size"):
        dcp.export_safetensors({"w": torch.zeros(1)}, str(tmp_path / "x"), max_shard_bytes=0)
