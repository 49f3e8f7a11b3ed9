"""The main job (examples.train): simulated, it trains with losses and weights equal to one
device's and reports what it promises, on DPxTP meshes and with the whole stack (context
parallel, HSDP, bf16, accumulation, checkpointed blocks: each alone and together); under
torchrun on real gloo processes it gives the simulated run's losses (the whole stack on gloo:
tests/test_train_gloo.py)."""

from __future__ import annotations

import json

import pytest

from examples import train
from examples.train_report import (WEIGHT_TOLERANCE, collective_summary, mesh_dim_of,
                                   unique_records)
from tests.support.gloo_runner import torchrun_module



def _simulated(argv: list[str]) -> tuple:
    args = train.parse_args(argv)
    return args, train.run_simulated(args), train.single_device_losses(args)


def _check_against_one_device(argv: list[str], loss_rel: float | None = None) -> tuple:
    """Run simulated; every rank's losses within ``loss_rel`` (default: the dtype's
    tolerance) of one device's, and every trained weight within the weight tolerance."""
    args = train.parse_args(argv + ["--quiet", "--trace-file", ""])
    results = train.run_simulated(args)
    reference, initial, trained = train.single_device_run(args)
    for r in results:
        assert r.losses == pytest.approx(reference, rel=loss_rel or args.tolerance)
    drift = train.weight_drift(results[0].weights, initial, trained)
    worst = max(drift, key=drift.get)
    assert drift[worst] <= WEIGHT_TOLERANCE[args.dtype], (worst, drift[worst])
    return args, results, drift


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
    dims = {mesh_dim_of(rec.ranks, (2, 2)) for rec in records}
    assert {"dp", "tp"} <= dims
    summary = {row["dim"]: row for row in collective_summary(args, records)}
    # fully sharded, Note [one collective per module]: each block gathers its parameters
    # before its forward and again before its backward, the root once (it is not freed in
    # between), and each reduce-scatters its gradients once
    modules = train.build_model(args).config.n_layers + 1
    ops = summary["dp"]["ops"]  # one-buffer forms where the pieces are even (fsdp_comm)
    assert ops.get("all_gather", 0) + ops.get("all_gather_into_tensor", 0) == 2 * modules - 1
    assert ops.get("reduce_scatter", 0) + ops.get("reduce_scatter_tensor", 0) == modules
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
    proc = torchrun_module("examples.train", [*argv, "--json", str(out), "--quiet"], 4)
    assert "PASS" in proc.stdout
    real = json.loads(out.read_text())
    assert real["losses"] == pytest.approx(simulated[0].losses, rel=1e-6)


# -- the whole stack: dp x cp x tp (and rep x shard x cp x tp), bf16, accumulation, checkpoints
SMALL = ["--steps", "2", "--seq", "8"]


def test_the_default_is_the_whole_stack_and_trains_like_one_device():
    args = train.parse_args([])
    assert (args.mesh_dim_names, args.mesh_shape) == (("dp", "cp", "tp"), (2, 2, 2))
    assert (args.dtype, args.accumulate, args.checkpoint_activations) == ("bfloat16", 2, True)
    assert (args.tolerance, args.dp) == (1e-3, "fsdp")
    # a DPxTP mesh keeps the f32 job: what tests/test_train_resume.py and the benchmarks run
    plain = train.parse_args(["--mesh", "2x4"])
    assert (plain.dtype, plain.accumulate, plain.checkpoint_activations, plain.cp_size) == (
        "float32", 1, False, 1)
    _check_against_one_device(SMALL)


def test_the_whole_stack_in_f32_equals_one_device_to_f32_rounding():
    """bf16 aside, context parallel + accumulation + checkpointing + fsdp over dp x cp + tp
    change no value beyond the order of sums: the strict check of the wiring."""
    _, _, drift = _check_against_one_device(SMALL + ["--dtype", "float32"], loss_rel=1e-5)
    assert max(drift.values()) < 1e-4


@pytest.mark.parametrize("argv", [
    ["--mesh", "1x2x1", "--accumulate", "1", "--no-checkpoint-activations"],
    ["--mesh", "1x2x1", "--accumulate", "1", "--cp-rotate", "alltoall"],
    ["--mesh", "2x2", "--accumulate", "2"],
    ["--mesh", "2x2", "--checkpoint-activations"],
    ["--mesh", "2x2", "--dtype", "bfloat16"],
    ["--mesh", "2x2x1x1", "--no-tp", "--batch", "8", "--accumulate", "1",
     "--no-checkpoint-activations"],
], ids=["context-parallel", "ring-attention+checkpointing", "accumulation", "checkpointing",
        "bf16", "hsdp"])
def test_each_feature_alone_trains_like_one_device(argv):
    dtype = [] if "--dtype" in argv else ["--dtype", "float32"]
    args, _, _ = _check_against_one_device(argv + dtype + SMALL)
    assert args.dtype == ("bfloat16" if dtype == [] else "float32")


def test_hsdp_with_context_and_tensor_parallel():
    """rep x shard x cp x tp = 2x1x2x2: replicas, fsdp over shard x cp, cp attention, tp."""
    args, results, _ = _check_against_one_device(["--mesh", "2x1x2x2", "--batch", "4",
                                                  "--accumulate", "1"] + SMALL)
    assert args.rep_size == 2 and len(results) == 8
    # embedding on (replicas, tp, dp x cp): tp cuts the vocabulary, dp x cp cuts inside each
    # tp piece (Note [nested dp inside tp] in dtensor/parallel/fsdp.py)
    assert results[0].params[0][1] == "[R, S(0), S(0)]"


def test_uneven_heads_vocab_and_sequence_pieces_under_context_parallel():
    """6 heads and a vocabulary of 1001 over tp=4; a sequence of 12 is 6 tokens a cp rank,
    cut 2, 2, 1, 1 over tp by sequence parallel."""
    _check_against_one_device(["--mesh", "1x2x4", "--seq", "12", "--steps", "2", "--n-heads",
                               "6", "--vocab", "1001", "--dtype", "float32"])


def test_collectives_show_accumulation_context_parallel_and_recomputation():
    args, results, _ = _simulated(SMALL + ["--steps", "1", "--dtype", "float32", "--quiet"])
    summary = {row["dim"]: row for row in collective_summary(args, unique_records(results))}
    assert {"cp", "dp+cp", "tp"} <= set(summary)
    modules = train.build_model(args).config.n_layers + 1
    # fully_shard over dp x cp: every micro-batch gathers (Note [one collective per module]),
    # only the last reduce-scatters (set_requires_gradient_sync(False) before)
    ops = summary["dp+cp"]["ops"]  # one-buffer forms where the pieces are even (fsdp_comm)
    assert (ops.get("all_gather", 0) + ops.get("all_gather_into_tensor", 0)
            == args.accumulate * (2 * modules - 1))
    assert ops.get("reduce_scatter", 0) + ops.get("reduce_scatter_tensor", 0) == modules
    # cp attention gathers keys and values per layer and micro-batch, again when the
    # checkpointed block recomputes; their gradients are reduce-scattered once
    layers = modules - 1
    assert summary["cp"]["ops"] == {"all_gather": 2 * 2 * layers * args.accumulate,
                                    "reduce_scatter": 2 * layers * args.accumulate}


def test_mesh_dims_of_groups_on_a_3d_mesh():
    shape, names = (2, 2, 2), ("dp", "cp", "tp")
    assert mesh_dim_of([0, 1], shape, names) == "tp"
    assert mesh_dim_of([5, 7], shape, names) == "cp"
    assert mesh_dim_of([1, 3, 5, 7], shape, names) == "dp+cp"
    assert mesh_dim_of(range(8), shape, names) == "dp+cp+tp"
    assert mesh_dim_of([3], shape, names) == "none"


@pytest.mark.parametrize("argv, message", [
    (["--seq", "6"], "--seq 6 over cp=2: .* expected a multiple of 4"),
    (["--mesh", "2x2x2x2"], r"--batch 4 must divide evenly over dp=4 x --accumulate 2"),
    (["--mesh", "1x2x2", "--dp", "none"], "context-parallel ranks hold different tokens"),
    (["--mesh", "2x1x1x2", "--dp", "replicate"], "HSDP .* is fully sharded"),
    (["--mesh", "2x2", "--dp", "replicate", "--dtype", "bfloat16"],
     "the casts are fully_shard's MixedPrecisionPolicy"),
    (["--accumulate", "0"], "expected at least 1 micro-batch"),
    (["--mesh", "2x0x2"], "expected DPxTP, DPxCPxTP or REPxSHARDxCPxTP"),
    (["--mesh", "2x2x2x2x2"], "expected DPxTP, DPxCPxTP or REPxSHARDxCPxTP"),
])
def test_whole_stack_arguments_that_cannot_work_are_refused(capsys, argv, message):
    import re

    with pytest.raises(SystemExit):
        train.parse_args(argv)
    assert re.search(message, capsys.readouterr().err)


def test_the_whole_stack_saves_and_resumes_bit_identically(tmp_path):
    pytest.importorskip("safetensors")
    ck = str(tmp_path / "ck")
    common = ["--seq", "8", "--quiet", "--trace-file", ""]
    straight = train.run_simulated(train.parse_args(["--steps", "2"] + common))[0].losses
    train.run_simulated(train.parse_args(["--steps", "1", "--save", ck] + common))
    resumed = train.run_simulated(train.parse_args(["--steps", "2", "--resume", ck] + common))
    assert resumed[0].first_step == 1 and resumed[0].losses == straight[1:]


def test_report_models_the_last_step_on_a_device(capsys):
    """Simulated runs record the last step's kernels and collectives (simpg.steprecorder) and
    print its modelled step with exposed communication per interconnect; exposed never
    exceeds the serial communication time, and the compute is the same on both."""
    import re

    args, results, _ = _simulated(["--mesh", "2x2", "--steps", "2", "--seq", "8"])
    assert all(r.timeline is not None and r.timeline.events for r in results)
    from examples.train_report import report
    report(args, results, results[0].losses, 1.0, simulated=True)
    out = capsys.readouterr().out
    lines = re.findall(r"h100 (\S+): step ([\d.]+) us: compute ([\d.]+) \+ exposed ([\d.]+) "
                       r"\(comm ([\d.]+) serial", out)
    assert [name for name, *_ in lines] == ["nvlink-node", "ib-cluster"], out
    for _, step, compute, exposed, serial in lines:
        assert float(exposed) <= float(serial) + 1e-6
        assert float(step) == pytest.approx(float(compute) + float(exposed), abs=0.2)
    assert lines[0][2] == lines[1][2]
