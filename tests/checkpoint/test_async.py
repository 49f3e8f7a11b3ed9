"""dtensor.checkpoint.async_save (Note [async save]): the bytes written are the values at the
call, whatever the step after it does; a failure on any rank reaches every rank's future and
the next save; the previous checkpoint survives every failure."""

from __future__ import annotations

import os
import threading

import pytest
import torch

import dtensor
import dtensor.checkpoint as dcp
import simpg
from dtensor import Partial, Replicate, Shard
from dtensor.checkpoint import background

WORLD = 8
FULL = {"w": torch.arange(63.0).reshape(9, 7), "b": torch.arange(11, dtype=torch.float64),
        "p": torch.full((5,), 3.0), "step": torch.tensor(4)}


def _state(mesh) -> dict:
    """2x4 layouts, uneven, one Partial (reduced at save), one plain tensor, one value."""
    p = dtensor.DTensor.from_local(FULL["p"] / 2, mesh, [Partial(), Replicate()],
                                   shape=(5,))  # 1.5 + 1.5 = 3.0 exactly
    return {"w": dtensor.distribute_tensor(FULL["w"], mesh, [Shard(0), Shard(1)]),
            "b": dtensor.distribute_tensor(FULL["b"], mesh, [Replicate(), Shard(0)]),
            "p": p, "step": FULL["step"].clone(), "meta": {"epoch": 2}}


def _next_step(state: dict) -> None:
    """What a training step does to the state right after async_save returns: in place."""
    for key in ("w", "b"):
        state[key].to_local().add_(1000)
    state["p"].to_local().mul_(-1)
    state["step"].add_(1)


def _load_one_process(path: str) -> dict:
    out = {k: torch.zeros_like(v) for k, v in FULL.items()}
    out["meta"] = None
    dcp.load(out, path)
    return out


def _assert_saved(path: str) -> None:
    got = _load_one_process(path)
    for key, want in FULL.items():
        assert torch.equal(got[key], want), key
    assert got["meta"] == {"epoch": 2}


def test_single_process_update_after_return_is_not_saved(tmp_path):
    w = torch.arange(10.0)
    future = dcp.async_save({"w": w, "lr": 0.1}, tmp_path / "ck")
    w.mul_(-1)
    report = future.result()
    assert future.done() and report.bytes_written > 40
    state = {"w": torch.zeros(10), "lr": None}
    dcp.load(state, tmp_path / "ck")
    assert torch.equal(state["w"], torch.arange(10.0)) and state["lr"] == 0.1


def test_eight_ranks_step_right_after_return(tmp_path, monkeypatch):
    """Each rank's background write waits until that rank's next step has changed every
    tensor in place, so the test fails for sure if the bytes came from the live tensors."""
    path = str(tmp_path / "ck")
    stepped = {f"rank{r:05d}.safetensors": threading.Event() for r in range(WORLD)}
    real_write = background.write_planned

    def write_after_the_step(planned):
        assert stepped[planned.file].wait(30)
        return real_write(planned)

    monkeypatch.setattr(background, "write_planned", write_after_the_step)

    def body():
        import torch.distributed as dist

        mesh = dtensor.init_device_mesh("cpu", (2, 4))
        state = _state(mesh)
        future = dcp.async_save(state, path)
        _next_step(state)
        stepped[f"rank{dist.get_rank():05d}.safetensors"].set()
        dist.barrier()  # simpg runs one rank at a time: let every rank take its step first
        return future.result()

    reports = simpg.run(body, WORLD)
    assert len({r.version for r in reports}) == 1
    assert os.path.realpath(path) == reports[0].version
    _assert_saved(path)
    left = sorted(os.listdir(reports[0].version))
    assert not [n for n in left if "crc32" in n or n.endswith(".tmp")], left


def test_save_waits_for_the_async_save_in_flight(tmp_path):
    path = str(tmp_path / "ck")

    def body():
        mesh = dtensor.init_device_mesh("cpu", (2, 4))
        state = _state(mesh)
        first = dcp.async_save(state, path)
        _next_step(state)
        report = dcp.save(state, path)  # settles `first` before it starts
        return first.done(), first.result().version, report.version

    results = simpg.run(body, WORLD)
    assert all(done for done, _, _ in results)
    first, second = results[0][1:]
    assert first != second and os.path.realpath(path) == second
    assert not os.path.exists(first)  # the second save removed the first's version
    got = _load_one_process(path)
    assert torch.equal(got["w"], FULL["w"] + 1000) and torch.equal(got["p"], -FULL["p"])


def test_a_background_write_failure_reaches_every_rank_and_the_next_save(tmp_path,
                                                                         monkeypatch):
    path = str(tmp_path / "ck")
    simpg.run(lambda: dcp.save(_state(dtensor.init_device_mesh("cpu", (2, 4))), path), WORLD)
    real_write = background.write_planned

    def failing_write(planned):
        if planned.file == "rank00002.safetensors":
            raise OSError(28, "No space left on device")
        return real_write(planned)

    monkeypatch.setattr(background, "write_planned", failing_write)

    def body():
        state = _state(dtensor.init_device_mesh("cpu", (2, 4)))
        future = dcp.async_save(state, path)
        _next_step(state)
        with pytest.raises(dcp.SaveFailedError, match="rank 2: OSError.*No space left"):
            future.result()
        with pytest.raises(dcp.SaveFailedError, match="previous asynchronous save failed"):
            dcp.save(state, path)  # raised again here, without starting
        return dcp.save(state, path).version  # the save after that goes ahead

    versions = simpg.run(body, WORLD)
    assert os.path.realpath(path) == versions[0]
    assert torch.equal(_load_one_process(path)["w"], FULL["w"] + 1000)


class Crash(BaseException):
    """A rank dying in the background: no handler of the save catches it."""


def test_a_rank_dying_mid_write_times_out_and_the_previous_checkpoint_stays(tmp_path):
    path = str(tmp_path / "ck")
    simpg.run(lambda: dcp.save(_state(dtensor.init_device_mesh("cpu", (2, 4))), path), WORLD)
    before = os.path.realpath(path)

    def body():
        import torch.distributed as dist

        state = _state(dtensor.init_device_mesh("cpu", (2, 4)))
        rank = dist.get_rank()

        def hook(step):
            if rank == 1 and step == "file_written":
                raise Crash

        with dcp.step_hook(hook):
            future = dcp.async_save(state, path, timeout=1.0)
        _next_step(state)
        error = future.exception()
        return type(error).__name__, str(error)

    outcomes = simpg.run(body, WORLD)
    assert outcomes[1][0] == "Crash"
    assert all(name == "SaveFailedError" for i, (name, _) in enumerate(outcomes) if i != 1)
    assert "rank 1: no crc32s within the timeout" in outcomes[0][1]
    assert os.path.realpath(path) == before
    _assert_saved(path)


def test_a_state_that_cannot_be_saved_fails_before_returning_on_every_rank(tmp_path):
    path = str(tmp_path / "ck")

    def body():
        mesh = dtensor.init_device_mesh("cpu", (2, 4))
        bad = dtensor.distribute_tensor(torch.zeros(4, 4, dtype=torch.complex128), mesh,
                                        [Shard(0), Replicate()])
        with pytest.raises(dcp.SaveFailedError, match="complex128, which safetensors cannot"):
            dcp.async_save({"bad": bad}, path)
        return True

    assert all(simpg.run(body, WORLD))
    assert not os.path.exists(path)


def test_timeout_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="timeout=0: expected seconds > 0"):
        dcp.async_save({"w": torch.zeros(1)}, tmp_path / "ck", timeout=0)
