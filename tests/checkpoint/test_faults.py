"""A save crashed or stalled on any rank at any point never costs the previous checkpoint:
the path loads the previous state or (once rank 0 has published) the new one, exactly, never
a mix; a leftover version directory loads as nothing or as the complete new state.

Faults come from simpg (``RaiseAt``/``StallAt`` at every collective call of every rank) and
from ``dtensor.checkpoint.step_hook`` (a crash at every named step of Note [commit]).
"""

from __future__ import annotations

import os
import re
import shutil

import pytest
import torch

import dtensor
import dtensor.checkpoint as dcp
import simpg
from dtensor import Partial, Replicate, Shard

WORLD = 4


class Crash(BaseException):
    """A rank dying mid-save: not an Exception, so no error handler of the save catches it."""


def _state(version: float) -> dict:
    """The state saved in version ``version``: every tensor differs between versions."""
    mesh = dtensor.init_device_mesh("cpu", (2, 2))
    w = torch.arange(35.0).reshape(7, 5) + version
    p = dtensor.DTensor.from_local(torch.full((3,), version), mesh, [Partial(), Replicate()],
                                   shape=(3,))  # reduced at save: 2 * version
    return {"w": dtensor.distribute_tensor(w, mesh, [Shard(0), Shard(1)]), "p": p,
            "step": torch.tensor(version), "meta": {"version": version}}


def _expected(version: float) -> dict:
    return {"w": torch.arange(35.0).reshape(7, 5) + version, "p": torch.full((3,), 2 * version),
            "step": torch.tensor(version), "meta": {"version": version}}


def _save(path: str, version: float, faults=(), hook=None, timeout: float = 10.0) -> None:
    def body():
        state = _state(version)
        if hook is None:
            dcp.save(state, path)
        else:
            with dcp.step_hook(lambda step: hook(dist_rank(), step)):
                dcp.save(state, path)
    simpg.run(body, WORLD, faults=faults, timeout=timeout)


def dist_rank() -> int:
    import torch.distributed as dist

    return dist.get_rank()


def _loads_as(path: str) -> float | None:
    """The version ``path`` loads as on one process (exactly), or None if it does not load."""
    target = {"w": torch.zeros(7, 5), "p": torch.zeros(3), "step": torch.tensor(0.0),
              "meta": {}}
    try:
        dcp.load(target, path)
    except dcp.IncompleteCheckpointError:
        return None
    version = target["meta"]["version"]
    want = _expected(version)
    for key in ("w", "p", "step"):
        assert torch.equal(target[key], want[key]), (path, key, "a mix of versions")
    return version


def _check_after_failure(root, path: str, published: bool) -> None:
    assert _loads_as(path) == (2.0 if published else 1.0)
    current = os.path.realpath(path)
    for name in os.listdir(root):
        full = os.path.join(root, name)
        if full in (path, current):
            continue
        # a leftover: an unfinished save, a complete unpublished one, or (if rank 0 died
        # between publishing and removing it) the replaced one; each loads exactly or not
        assert _loads_as(full) in ((None, 1.0, 2.0) if published else (None, 2.0)), name


def _fresh(tmp_path) -> tuple:
    root = tmp_path / "run"
    root.mkdir(parents=True)
    path = str(root / "ck")
    _save(path, 1.0)
    return str(root), path


def test_raise_at_every_collective_of_every_rank(tmp_path):
    outcomes = []
    for rank in range(WORLD):
        call = 1
        while True:
            root, path = _fresh(tmp_path / f"r{rank}c{call}")
            try:
                _save(path, 2.0, faults=[simpg.RaiseAt(rank, call)])
            except RuntimeError as e:
                assert "fault injected by simpg" in str(e)
            else:
                assert _loads_as(path) == 2.0
                break  # this rank made fewer collectives than ``call``
            published = _loads_as(path) == 2.0
            outcomes.append((rank, call, published))
            _check_after_failure(root, path, published)
            call += 1
        assert call > 3, f"rank {rank} made only {call - 1} collectives in a save"
    # only a fault in the last exchange (rank 0's outcome: broadcast_object_list is a
    # broadcast of sizes, then one of data) comes after rank 0 published the new version
    for rank in range(WORLD):
        published = [pub for r, _, pub in outcomes if r == rank]
        first = published.index(True)
        assert all(published[first:]) and first >= len(published) - 2, (rank, outcomes)


@pytest.mark.parametrize("rank", [0, WORLD - 1])
def test_stall_at_every_collective(tmp_path, rank):
    for call in range(1, 5):
        root, path = _fresh(tmp_path / f"c{call}")
        with pytest.raises(simpg.DeadlockError, match="stalled by fault injection"):
            _save(path, 2.0, faults=[simpg.StallAt(rank, call)], timeout=3.0)
        _check_after_failure(root, path, published=_loads_as(path) == 2.0)


@pytest.mark.parametrize("step", dcp.STEPS)
def test_crash_at_every_step_on_every_rank(tmp_path, step):
    for rank in range(WORLD):
        reached: list[str] = []

        def hook(r, s, rank=rank, reached=reached):
            if (r, s) == (rank, step):
                reached.append(s)
                raise Crash(f"rank {r} dies at {s}")

        root, path = _fresh(tmp_path / f"r{rank}")
        try:
            _save(path, 2.0, hook=hook)
        except Crash:
            pass
        if not reached:  # a rank-0-only step, on another rank
            assert step in ("metadata_written", "published") and rank != 0
            continue
        published = step in ("published", "done")
        if step == "gathered" and rank != 0:
            # rank 0 holds every manifest once the gather is done: whether it commits before
            # the crash stops the world is the schedule's choice, as on real processes;
            # either way the path loads as exactly one version
            published = _loads_as(path) == 2.0
        _check_after_failure(root, path, published)


def test_a_failed_write_on_one_rank_fails_the_save_on_every_rank(tmp_path):
    """An ordinary error (here: the version directory vanishes under rank 2) is shared in the
    manifest exchange, so every rank raises SaveFailedError instead of waiting on rank 2."""
    root, path = _fresh(tmp_path)

    def hook(r, s):
        if (r, s) == (2, "partials_reduced"):
            shutil.rmtree(_version_dir(root))

    def body():
        with dcp.step_hook(lambda step: hook(dist_rank(), step)):
            try:
                dcp.save(_state(2.0), path)
            except dcp.SaveFailedError as e:
                return str(e)
        return "saved"
    messages = simpg.run(body, WORLD)
    for m in messages:
        assert re.search(r"rank 2: \w+: .*No such file.*previous checkpoint at this path is "
                         r"intact", m), m
    assert _loads_as(path) == 1.0


def _version_dir(root: str) -> str:
    current = os.path.realpath(os.path.join(root, "ck"))
    return next(os.path.join(root, n) for n in os.listdir(root)
                if n.startswith("ck.v-") and os.path.join(root, n) != current
                and not n.endswith(".link"))
