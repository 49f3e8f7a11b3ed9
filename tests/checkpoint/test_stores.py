"""Checkpoints on any fsspec filesystem and in copied folders (Note [folder of versions] in
dtensor/checkpoint/stores.py): fsspec's memory filesystem stands for an object store (no
links, no renames), ``file://`` and copied folders for local ones."""

from __future__ import annotations

import os
import secrets
import shutil

import fsspec
import pytest
import torch

import dtensor
import dtensor.checkpoint as dcp
import simpg
from dtensor import Partial, Replicate, Shard
from dtensor.layout import local_slices

WORLD = 8
W = torch.randn(64, 48, generator=torch.Generator().manual_seed(0))
B = torch.arange(13, dtype=torch.float64)


@pytest.fixture
def url():
    """A fresh memory:// folder, removed afterwards (the memory filesystem is process-wide)."""
    name = f"/ck-{secrets.token_hex(4)}"
    yield f"memory://{name}"
    fs = fsspec.filesystem("memory")
    if fs.exists(name):
        fs.rm(name, recursive=True)


def _state(mesh, shift: float = 0.0) -> dict:
    p = dtensor.DTensor.from_local((B + shift) / 2, mesh, [Partial(), Replicate()],
                                   shape=B.shape)
    return {"w": dtensor.distribute_tensor(W + shift, mesh, [Shard(0), Shard(1)]), "b": p,
            "step": torch.tensor(int(shift)), "meta": {"shift": shift}}


def _save(path: str, shift: float = 0.0, hook=None) -> list:
    def body():
        state = _state(dtensor.init_device_mesh("cpu", (2, 4)), shift)
        if hook is None:
            return dcp.save(state, path)
        import torch.distributed as dist

        rank = dist.get_rank()
        with dcp.step_hook(lambda step: hook(rank, step)):
            return dcp.save(state, path)
    return simpg.run(body, WORLD)


def _load_one(path: str) -> dict:
    state = {"w": torch.zeros_like(W), "b": torch.zeros_like(B), "step": torch.tensor(-1),
             "meta": None}
    dcp.load(state, path)
    return state


def _assert_holds(path: str, shift: float) -> None:
    got = _load_one(path)
    assert torch.equal(got["w"], W + shift) and torch.equal(got["b"], B + shift)
    assert got["step"].item() == int(shift) and got["meta"] == {"shift": shift}


def test_memory_filesystem_round_trip_into_another_layout(url):
    _save(url)
    fs, root = fsspec.core.url_to_fs(url)
    [version] = fs.ls(root, detail=False)
    assert version.rsplit("/", 1)[-1].startswith("v-")
    assert fs.exists(f"{version}/metadata.json")

    def load_8way():
        mesh = dtensor.init_device_mesh("cpu", (8,))
        w = dtensor.distribute_tensor(torch.zeros_like(W), mesh, [Shard(1)])
        dcp.load({"w": w}, url)
        want = W[local_slices(W.shape, (8,), [Shard(1)], mesh.get_coordinate())]
        return torch.equal(w.to_local(), want)

    assert all(simpg.run(load_8way, WORLD))
    _assert_holds(url, 0.0)


def test_newest_committed_version_wins_and_older_ones_go(url):
    _save(url, 0.0)
    _save(url, 1.0)
    fs, root = fsspec.core.url_to_fs(url)
    assert len(fs.ls(root, detail=False)) == 1  # the first version was removed
    # a newer save that never committed (no metadata.json) is not loaded...
    fs.pipe_file(f"{root}/v-99991231-000000-000000-deadbeef/rank00000.safetensors", b"junk")
    _assert_holds(url, 1.0)
    _save(url, 2.0)  # ...and the next save removes it
    assert len(fs.ls(root, detail=False)) == 1
    _assert_holds(url, 2.0)


@pytest.mark.parametrize("step", ["dir_made", "partials_reduced", "file_written"])
def test_a_crash_before_the_commit_keeps_the_previous_version(url, step):
    _save(url, 0.0)

    class Crash(BaseException):
        pass

    def hook(rank, at):
        if rank == 1 and at == step:
            raise Crash

    with pytest.raises(BaseException):
        _save(url, 5.0, hook)
    _assert_holds(url, 0.0)
    _save(url, 3.0)
    _assert_holds(url, 3.0)


def test_a_load_reads_only_the_byte_ranges_it_needs(url):
    big = torch.randn(512, 256, generator=torch.Generator().manual_seed(2))
    dcp.save({"w": big}, url)  # one process: four chunks of 128 rows (Note [chunks])
    fs, root = fsspec.core.url_to_fs(url)
    [version] = fs.ls(root, detail=False)
    total = sum(fs.size(p) for p in fs.ls(version, detail=False))
    requests = []
    real_cat = type(fs).cat_file

    def counting_cat(self, path, start=None, end=None, **kw):
        requests.append((path, start, end))
        return real_cat(self, path, start=start, end=end, **kw)

    type(fs).cat_file = counting_cat
    try:
        def load_rows():  # 64 rows each: inside one chunk
            mesh = dtensor.init_device_mesh("cpu", (8,))
            w = dtensor.distribute_tensor(torch.zeros_like(big), mesh, [Shard(0)])
            read = dcp.load({"w": w}, url).bytes_read
            return read, torch.equal(w.full_tensor(), big)
        read = simpg.run(load_rows, WORLD)
    finally:
        type(fs).cat_file = real_cat
    data_files = [r for r in requests if r[0].endswith(".safetensors")]
    assert data_files and all(s is not None and e is not None for _, s, e in data_files)
    assert all(ok for _, ok in read)
    assert max(n for n, _ in read) < 0.3 * total, (read, total)


def test_async_save_to_the_memory_filesystem(url):
    def body():
        import torch.distributed as dist

        state = _state(dtensor.init_device_mesh("cpu", (2, 4)), 4.0)
        future = dcp.async_save(state, url)
        state["w"].to_local().add_(100)
        dist.barrier()
        return future.result().version

    versions = simpg.run(body, WORLD)
    assert len(set(versions)) == 1
    fs, _ = fsspec.core.url_to_fs(url)
    left = {p.rsplit("/", 1)[-1] for p in fs.ls(versions[0], detail=False)}
    assert "metadata.json" in left and not [n for n in left if "crc32" in n], left
    _assert_holds(url, 4.0)


def test_saving_over_a_copied_checkpoint_folder(tmp_path):
    link = str(tmp_path / "ck")
    _save(link, 0.0)
    copy = str(tmp_path / "copied")
    shutil.copytree(os.path.realpath(link), copy)  # what cp -r, rsync or a download leave
    _assert_holds(copy, 0.0)
    _save(copy, 7.0)
    _assert_holds(copy, 7.0)
    names = os.listdir(copy)
    assert len(names) == 1 and names[0].startswith("v-"), names  # the flat files are gone
    _save(copy, 8.0)
    _assert_holds(copy, 8.0)
    _assert_holds(link, 0.0)  # the original is untouched


def test_file_url_uses_a_folder_of_versions(tmp_path):
    url = f"file://{tmp_path}/ck"
    _save(url, 0.0)
    _save(url, 1.0)
    _assert_holds(url, 1.0)
    assert [n[:2] for n in os.listdir(tmp_path / "ck")] == ["v-"]
    assert not os.path.islink(tmp_path / "ck")


def test_a_folder_that_is_no_checkpoint_is_refused(url):
    fs, root = fsspec.core.url_to_fs(url)
    fs.pipe_file(f"{root}/notes.txt", b"mine")
    with pytest.raises(dcp.SaveFailedError, match="exists and holds no checkpoint"):
        dcp.save({"w": torch.ones(1)}, url)
    assert fs.cat_file(f"{root}/notes.txt") == b"mine"
    with pytest.raises(dcp.IncompleteCheckpointError, match="never finished"):
        dcp.load({"w": torch.ones(1)}, url)


def test_nothing_there_is_not_found(url):
    with pytest.raises(dcp.CheckpointNotFoundError, match="no committed checkpoint"):
        dcp.load({"w": torch.ones(1)}, url)


def test_saving_into_the_version_a_link_publishes_is_refused(tmp_path):
    link = str(tmp_path / "ck")
    _save(link, 0.0)
    with pytest.raises(dcp.SaveFailedError, match="is a version directory that the link 'ck'"):
        dcp.save({"w": torch.ones(1)}, os.path.realpath(link))
    _assert_holds(link, 0.0)


def test_async_save_over_a_copied_folder(tmp_path):
    link = str(tmp_path / "ck")
    _save(link, 0.0)
    copy = str(tmp_path / "copied")
    shutil.copytree(os.path.realpath(link), copy)

    def body():
        import torch.distributed as dist

        state = _state(dtensor.init_device_mesh("cpu", (2, 4)), 6.0)
        future = dcp.async_save(state, copy)
        state["w"].to_local().zero_()
        dist.barrier()
        return future.result().version

    versions = simpg.run(body, WORLD)
    assert os.listdir(copy) == [os.path.basename(versions[0])]
    left = os.listdir(versions[0])
    assert "metadata.json" in left and not [n for n in left if n.endswith(".tmp")], left
    _assert_holds(copy, 6.0)
