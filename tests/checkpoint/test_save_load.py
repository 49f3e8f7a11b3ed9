"""dtensor.checkpoint: save from one layout, load into another, bit-identical.

Each case saves global tensors laid out one way on one world and loads them laid out another
way on another world (or on one process with no process group), then compares every rank's
piece with the slice of the global tensor that ``dtensor.layout`` says it holds.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch

# torch's C++ imports its own DTensor at the first detach() of any DTensor subclass (AdamW,
# nn.Parameter): imported here, before any world, as simpg.isolation asks
import torch.distributed.tensor

import dtensor
import dtensor.checkpoint as dcp
import simpg
from dtensor import Partial, Replicate, Shard
from dtensor.layout import local_slices

# uneven on purpose: 7 rows over 2, 4 or 8 ranks; odd columns; a 0-d, an empty and a bf16
GLOBALS = {
    "w": torch.randn(7, 5, generator=torch.Generator().manual_seed(0)),
    "b": torch.arange(13, dtype=torch.float64),
    "h": torch.randn(3, 9, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16),
    "i": torch.arange(24, dtype=torch.int64).reshape(2, 3, 4),
}
PLACEMENTS_2x4 = {
    "w": [Shard(0), Shard(1)],  # 2-d sharded, uneven both ways
    "b": [Replicate(), Shard(0)],  # replicated over dp: written once
    "h": [Shard(1), Shard(1)],  # one dim split twice (nested), some pieces empty
    "i": [Partial("sum"), Shard(2)],  # reduced at save (Note [saving Partial])
}


def _distribute(mesh, placements: dict) -> dict:
    out = {}
    for key, full in GLOBALS.items():
        t = dtensor.distribute_tensor(full, mesh, [Replicate()] * mesh.ndim)
        target = placements[key]
        # Partial(sum): split the value into addends that sum to it exactly (integers)
        if any(isinstance(p, Partial) for p in target):
            coord = mesh.get_coordinate()
            local = full.clone() if coord[0] == 0 else torch.zeros_like(full)
            local = local[local_slices(full.shape, mesh.shape, [Replicate(), *target[1:]],
                                       coord)]
            t = dtensor.DTensor.from_local(local, mesh, target, shape=full.shape)
        else:
            t = t.redistribute(placements=target)
        out[key] = t
    return out


def _check_pieces(state: dict) -> None:
    for key, t in state.items():
        full = GLOBALS[key]
        if isinstance(t, dtensor.DTensor):
            coord = t.device_mesh.get_coordinate()
            want = full[local_slices(full.shape, t.device_mesh.shape, t.placements, coord)]
            assert torch.equal(t.to_local(), want), (key, coord, t.placements)
        else:
            assert torch.equal(t, full), key


def _save_2x4(path: str, extra: dict | None = None) -> list:
    def body():
        mesh = dtensor.init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
        state = {"model": _distribute(mesh, PLACEMENTS_2x4),
                 "meta": {"step": 7, "betas": (0.9, 0.95), "name": "run", "none": None}}
        state.update(extra or {})
        return dcp.save(state, path)
    return simpg.run(body, 8)


@pytest.mark.parametrize("target", [
    ("8-way S(0)", (8,), {k: [Shard(0)] for k in GLOBALS}),
    ("8-way S(1) (columns)", (8,), {"w": [Shard(1)], "b": [Shard(0)], "h": [Shard(1)],
                                    "i": [Shard(1)]}),
    ("2x2 R,S / S,R", (2, 2), {k: [Replicate(), Shard(0)] if i % 2 else [Shard(0), Replicate()]
                               for i, k in enumerate(GLOBALS)}),
    ("3 ranks replicated", (3,), {k: [Replicate()] for k in GLOBALS}),
    ("4 ranks Partial targets", (4,), {"w": [Partial("sum")], "b": [Partial("avg")],
                                       "h": [Shard(0)], "i": [Partial("max")]}),
], ids=lambda t: t[0])
def test_save_on_2x4_load_into_another_layout_is_bit_identical(tmp_path, target):
    _, mesh_shape, placements = target
    path = str(tmp_path / "ck")
    _save_2x4(path)

    def body():
        mesh = dtensor.init_device_mesh("cpu", mesh_shape)
        state = {"model": {k: dtensor.zeros(GLOBALS[k].shape, dtype=GLOBALS[k].dtype,
                                            device_mesh=mesh, placements=placements[k])
                           for k in GLOBALS},
                 "meta": {"step": 0, "betas": None, "name": "", "none": 1}}
        dcp.load(state, path)
        # Partial targets: reducing them gives the value
        full = {k: v.full_tensor() for k, v in state["model"].items()}
        for key, t in state["model"].items():
            if not any(isinstance(p, Partial) for p in t.placements):
                _check_pieces({key: t})
        return full, state["meta"]

    for full, meta in simpg.run(body, math.prod(mesh_shape)):
        for key, value in full.items():
            assert torch.equal(value, GLOBALS[key]), key
        assert meta == {"step": 7, "betas": (0.9, 0.95), "name": "run", "none": None}


def test_load_on_one_process_without_a_process_group(tmp_path):
    path = str(tmp_path / "ck")
    _save_2x4(path)
    state = {"model": {k: torch.zeros_like(v) for k, v in GLOBALS.items()}, "meta": {}}
    dcp.load(state, path)
    _check_pieces(state["model"])
    assert state["meta"]["betas"] == (0.9, 0.95)


def test_replicas_are_written_once_and_each_rank_writes_only_its_pieces(tmp_path):
    path = str(tmp_path / "ck")
    reports = _save_2x4(path)
    written = sum(r.bytes_written for r in reports)
    payload = sum(t.numel() * t.element_size() for t in GLOBALS.values())
    headers = written - payload
    assert 0 < headers < 8 * 4096, (written, payload)  # every byte once, plus the headers
    body = json.loads((Path(path) / "metadata.json").read_text())["body"]
    # "b" is replicated over dp: only the dp=0 ranks (0..3) write it
    writers = {p["file"] for p in body["tensors"]["model.b"]["pieces"]}
    assert writers == {f"rank{r:05d}.safetensors" for r in range(4)}
    assert body["tensors"]["model.i"]["placements"] == "[P(sum),S(2)]"


def test_plain_tensors_and_values_round_trip_in_one_process(tmp_path):
    state = {"a": torch.arange(6).reshape(2, 3), "nested": [torch.ones(2), {"x": 1.5}],
             "t": (torch.tensor(3.0), "s"), "scalar": torch.tensor(2.5),
             "empty": torch.zeros(0, 4), "inf": float("inf"), "keys": {1: "one", "2": 2}}
    dcp.save(state, tmp_path / "ck")
    target = {"a": torch.zeros(2, 3, dtype=torch.int64),
              "nested": [torch.zeros(2), {"x": 0.0}], "t": (torch.tensor(0.0), ""),
              "scalar": torch.tensor(0.0), "empty": torch.ones(0, 4), "inf": 0.0, "keys": {}}
    nested_list = target["nested"]
    dcp.load(target, tmp_path / "ck")
    assert target["nested"] is nested_list  # filled in place
    assert torch.equal(target["a"], state["a"]) and torch.equal(target["nested"][0], torch.ones(2))
    assert target["nested"][1] == {"x": 1.5} and target["t"][1] == "s"
    assert torch.equal(target["t"][0], torch.tensor(3.0)) and target["scalar"].item() == 2.5
    assert target["inf"] == float("inf") and target["keys"] == {1: "one", "2": 2}


def test_a_second_save_replaces_the_first_and_removes_it(tmp_path):
    path = tmp_path / "ck"
    dcp.save({"w": torch.zeros(3)}, path)
    first = os.path.realpath(path)
    dcp.save({"w": torch.ones(3)}, path)
    assert os.path.realpath(path) != first and not os.path.exists(first)
    state = {"w": torch.zeros(3)}
    dcp.load(state, path)
    assert torch.equal(state["w"], torch.ones(3))
    assert sorted(os.listdir(tmp_path)) == sorted(["ck", os.path.basename(os.path.realpath(path))])


def test_resharding_reads_only_the_chunks_a_rank_needs(tmp_path):
    """8-way row shards saved, loaded as 8-way column shards: each rank reads about its
    eighth (chunks are cut square, Note [chunks]), not every full row."""
    full = torch.randn(256, 256, generator=torch.Generator().manual_seed(2))
    path = str(tmp_path / "ck")

    def save():
        mesh = dtensor.init_device_mesh("cpu", (8,))
        dcp.save({"w": dtensor.distribute_tensor(full, mesh, [Shard(0)])}, path,
                 chunk_bytes=4096)

    def load():
        mesh = dtensor.init_device_mesh("cpu", (8,))
        w = dtensor.zeros(256, 256, device_mesh=mesh, placements=[Shard(1)])
        report = dcp.load({"w": w}, path)
        assert torch.equal(w.full_tensor(), full)
        return report

    simpg.run(save, 8)
    target_bytes = full.numel() * 4 // 8
    for r in simpg.run(load, 8):
        assert target_bytes <= r.bytes_read < 1.2 * target_bytes + 16384, r


def test_optimizer_state_round_trips_into_another_mesh(tmp_path):
    """AdamW moments on a 2x2 mesh, loaded into an AdamW on a 4-way mesh, continue the same
    training bit for bit."""
    path = str(tmp_path / "ck")
    w0 = torch.randn(6, 5, generator=torch.Generator().manual_seed(3))

    def train(mesh, placements, steps, load_from=None, save_to=None):
        p = torch.nn.Parameter(dtensor.distribute_tensor(w0, mesh, placements))
        opt = torch.optim.AdamW([p], lr=0.1, foreach=True)
        if load_from:
            dcp.init_optimizer_state(opt)
            state = {"p": p, "opt": opt.state_dict()}
            dcp.load(state, load_from)
            opt.load_state_dict(state["opt"])
        for step in range(steps):
            (p * p).sum().backward()
            opt.step()
            opt.zero_grad()
        if save_to:
            dcp.save({"p": p, "opt": opt.state_dict()}, save_to)
        return p.full_tensor()

    straight = simpg.run(lambda: train(dtensor.init_device_mesh("cpu", (2, 2)),
                                       [Shard(0), Shard(1)], 4), 4)[0]
    simpg.run(lambda: train(dtensor.init_device_mesh("cpu", (2, 2)), [Shard(0), Shard(1)], 2,
                            save_to=path), 4)
    resumed = simpg.run(lambda: train(dtensor.init_device_mesh("cpu", (4,)), [Shard(1)], 2,
                                      load_from=path), 4)
    for r in resumed:
        assert torch.equal(r, straight)
