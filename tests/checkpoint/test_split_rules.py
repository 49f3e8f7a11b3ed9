"""Checkpoints save from one split rule and load into another (Note [split rules] in
dtensor/layout.py): pieces are boxes, whatever cut them."""

from __future__ import annotations

import torch

import dtensor.checkpoint as dcp
from dtensor import Shard, distribute_tensor
from tests.support.mesh_world import run_on_mesh


def test_save_under_explicit_sizes_load_under_balanced_chunk_and_plain(tmp_path):
    x = torch.randn(10, 6, generator=torch.Generator().manual_seed(0))

    def save(mesh):
        dcp.save({"w": distribute_tensor(x, mesh, [Shard(0, sizes=(3, 5, 0, 2))])}, tmp_path)

    def load(mesh):
        out = []
        for placements in ([Shard(0, sizes="balanced")], [Shard(1)],
                           [Shard(1, sizes=(6, 0))]):
            t = distribute_tensor(torch.zeros(10, 6), mesh, placements)
            dcp.load({"w": t}, tmp_path)
            out.append(torch.equal(t.full_tensor(), x))
        return all(out)

    run_on_mesh((4,), save)
    assert all(run_on_mesh((2,), load))
    plain = {"w": torch.zeros(10, 6)}
    dcp.load(plain, tmp_path)  # one process, no process group
    assert torch.equal(plain["w"], x)
