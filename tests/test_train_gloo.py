"""The main job's whole stack on real gloo processes under torchrun: dp x cp x tp = 1x2x2 on
4 processes, with the defaults of a 3-number mesh (bf16 compute, f32 reductions, 2 accumulated
micro-batches, checkpointed blocks). Its verdict is PASS (losses and trained weights against
one device) and its losses are the simulated run's: the same ``train_rank`` on simpg and gloo.
"""

from __future__ import annotations

import json

import pytest

from examples import train
from tests.support.gloo_runner import torchrun_module

ARGV = ["--mesh", "1x2x2", "--steps", "2", "--seq", "8"]


@pytest.mark.gloo
def test_the_whole_stack_on_gloo_processes(tmp_path):
    args = train.parse_args(ARGV)
    assert (args.cp_size, args.dtype, args.accumulate, args.checkpoint_activations) == (
        2, "bfloat16", 2, True)
    simulated = train.run_simulated(train.parse_args(ARGV + ["--trace-file", ""]))
    out = tmp_path / "run.json"
    proc = torchrun_module("examples.train", [*ARGV, "--json", str(out), "--quiet"], 4)
    assert "4 gloo processes" in proc.stdout
    assert "PASS: every step's loss and every trained weight" in proc.stdout
    real = json.loads(out.read_text())
    assert max(real["weight_drift"].values()) <= 0.3
    # the same collectives in the same order on both: gloo sums as simpg does
    assert real["losses"] == pytest.approx(simulated[0].losses, rel=1e-6)
