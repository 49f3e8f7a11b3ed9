"""The main job (examples.train): simulated, it trains with losses equal to one device and
reports what it promises; under torchrun on real gloo processes it gives the simulated
run's losses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from examples import train
from examples.train_report import collective_summary, mesh_dim_of, unique_records

ROOT = Path(__file__).resolve().parent.parent


def _simulated(argv: list[str]) -> tuple:
    args = train.parse_args(argv)
    return args, train.run_simulated(args), train.single_device_losses(args)


@pytest.mark.parametrize("argv", [
    ["--mesh", "2x2"],
    ["--mesh", "1x4", "--n-heads", "6", "--vocab", "1001", "--dp", "none"],  # 6 heads over 4
    ["--mesh", "2x2", "--dp", "replicate", "--no-sp", "--no-loss-parallel"],
    ["--mesh", "4x1", "--no-tp"],
], ids=["fsdp+tp+sp+loss", "uneven-heads-and-vocab", "replicate+tp", "fsdp-only"])
def test_simulated_training_equals_one_device(argv):
    args, results, reference = _simulated(argv + ["--steps", "2", "--seq", "8"])
    for r in results:
        assert r.losses == pytest.approx(reference, rel=1e-5)


def test_report_counts_per_mesh_dim_and_state_is_sharded():
    args, results, _ = _simulated(["--mesh", "2x2", "--steps", "1", "--seq", "8"])
    records = unique_records(results)
    dims = {mesh_dim_of(rec.ranks, 2, 2) for rec in records}
    assert {"dp", "tp"} <= dims
    summary = {row["dim"]: row for row in collective_summary(args, records)}
    # fully sharded, Note [one collective per module]: each block gathers its parameters
    # before its forward and again before its backward, the root once (it is not freed in
    # between), and each reduce-scatters its gradients once
    modules = train.build_model(args).config.n_layers + 1
    assert summary["dp"]["ops"]["all_gather"] == 2 * modules - 1
    assert summary["dp"]["ops"]["reduce_scatter"] == modules
    assert summary["tp"]["bytes"] > 0 and summary["dp"]["nvlink_s"] > 0
    whole = sum(p.numel() * 4 for p in train.build_model(args).parameters())
    state = max(sum(r.state.values()) for r in results)
    assert state < 4 * whole / 2 * 0.75  # params + grads + 2 moments, ~1/(dp*tp) of each


def test_bad_arguments_are_refused(capsys):
    with pytest.raises(SystemExit):
        train.parse_args(["--mesh", "2by2"])
    assert "expected DPxTP" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        train.parse_args(["--mesh", "3x1", "--batch", "4"])
    assert "must divide evenly over dp=3" in capsys.readouterr().err


@pytest.mark.gloo
def test_torchrun_on_gloo_gives_the_simulated_losses(tmp_path):
    argv = ["--mesh", "2x2", "--steps", "2", "--seq", "8"]
    _, simulated, _ = _simulated(argv)
    out = tmp_path / "run.json"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT),
               GLOO_SOCKET_IFNAME="lo0" if sys.platform == "darwin" else "lo")
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
         "-m", "examples.train", *argv, "--json", str(out), "--quiet"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "PASS" in proc.stdout
    real = json.loads(out.read_text())
    assert real["losses"] == pytest.approx(simulated[0].losses, rel=1e-6)
