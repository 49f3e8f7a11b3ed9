"""The main job with ``--pp`` (Note [pipeline stages] in examples/train.py): pipeline stages
that are themselves fully sharded, context- and tensor-parallel train like one device, and a
checkpoint moves between pipelined and unpipelined layouts bit for bit."""

from __future__ import annotations

import json

import pytest
import torch

import dtensor.checkpoint as dcp
from examples import train
from examples.models import llama
from tests.support.gloo_runner import torchrun_module

QUICK = ["--seq", "8", "--quiet", "--trace-file", ""]


@pytest.mark.parametrize("argv", [
    ["--pp", "2", "--mesh", "1x2"],  # pp x tp, f32
    ["--pp", "2", "--mesh", "2x1", "--accumulate", "2", "--pp-schedule", "gpipe"],
    ["--pp", "2", "--mesh", "1x2x1", "--accumulate", "3", "--batch", "3"],  # pp x cp, 3 mbs
    ["--pp", "2", "--mesh", "2x1x2"],  # pp x dp x tp: the whole stack, bf16
    ["--pp", "2", "--mesh", "2x2x2", "--pp-schedule", "zb"],  # zero bubble, pp x dp x cp x tp
    # Note [stages a rank]: several stages a rank, each parallelized as the whole model is
    ["--pp", "2", "--mesh", "1x2", "--model", "small", "--pp-schedule", "interleaved",
     "--pp-stages-per-rank", "2", "--accumulate", "2"],
    ["--pp", "2", "--mesh", "2x1x2", "--model", "small", "--pp-schedule", "looped-bfs",
     "--pp-stages-per-rank", "2"],
    ["--pp", "2", "--mesh", "2x2x2", "--model", "small", "--pp-schedule", "zbv"],
    ["--pp", "2", "--mesh", "2x1", "--model", "small", "--pp-schedule", "dualpipev",
     "--accumulate", "4", "--batch", "8"],
], ids=["pp+tp", "pp+fsdp-gpipe", "pp+cp-checkpointed", "pp+fsdp+tp-bf16", "zb-whole-stack",
        "interleaved-v2+tp", "looped-bfs-v2+fsdp+tp-checkpointed", "zbv-whole-stack",
        "dualpipev+fsdp"])
def test_pipelined_stages_train_like_one_device(argv, capsys):
    assert train.main(argv + ["--steps", "2"] + QUICK) == 0, capsys.readouterr().out


def test_each_rank_holds_only_its_stages_parameters():
    args = train.parse_args(["--pp", "2", "--mesh", "1x2", "--steps", "1"] + QUICK)
    results = train.run_simulated(args)
    first = {name for name, *_ in results[0].params}
    last = {name for name, *_ in results[-1].params}
    assert "tok_embeddings.weight" in first and "output.weight" not in first
    assert "output.weight" in last and "layers.0.attention.wq.weight" not in last
    assert not first & last
    # every rank reports the step's loss, the last stage's
    assert all(r.losses == results[-1].losses for r in results)


def test_a_rank_of_a_v_schedule_holds_the_first_and_the_last_stage():
    # zbv on pp=2, small (4 blocks): rank 0 holds stages 0 and 3, rank 1 stages 1 and 2
    args = train.parse_args(["--pp", "2", "--mesh", "1x1", "--model", "small",
                             "--pp-schedule", "zbv", "--steps", "1"] + QUICK)
    results = train.run_simulated(args)
    held = [{name.split(".")[0] if not name.startswith("layers.") else
             ".".join(name.split(".")[:2]) for name, *_ in r.params} for r in results]
    assert held[0] == {"tok_embeddings", "layers.0", "layers.3", "norm", "output"}
    assert held[1] == {"layers.1", "layers.2"}
    assert all(r.losses == results[0].losses for r in results)


def test_a_checkpoint_of_a_v_schedule_resumes_on_one_stage_a_rank(tmp_path, capsys):
    pytest.importorskip("safetensors")
    ck = str(tmp_path / "ck")
    small = ["--model", "small"]
    train.run_simulated(train.parse_args(["--pp", "2", "--mesh", "1x2", "--pp-schedule",
                                          "zbv", "--steps", "1", "--save", ck] + small
                                         + QUICK))
    assert train.main(["--pp", "2", "--mesh", "1x2", "--steps", "3", "--resume", ck] + small
                      + QUICK) == 0, capsys.readouterr().out


def _one_process(path: str) -> dict[str, torch.Tensor]:
    """Every tensor of a main-job checkpoint (weights, AdamW moments, step counts), loaded
    whole in one process."""
    args = train.parse_args(["--mesh", "1x1"] + QUICK)
    model = train.build_model(args)
    opt = train.make_optimizer(model.parameters(), args)
    dcp.init_optimizer_state(opt)
    state = train._checkpoint_state(model, opt, 0)
    dcp.load(state, path)
    out = {f"model.{k}": v.detach().clone() for k, v in state["model"].items()}
    for name, moments in state["optim"].items():
        out |= {f"optim.{name}.{k}": v.clone() for k, v in moments.items()}
    return out


def test_a_checkpoint_moves_between_pp_and_fsdp_layouts_bit_for_bit(tmp_path):
    pytest.importorskip("safetensors")
    pp_tp = ["--pp", "2", "--mesh", "1x2", "--dp", "none"]  # pp=2 x tp=2
    fsdp = ["--mesh", "4x1", "--no-tp"]  # pp=1 x fsdp=4
    saved, moved, back = (str(tmp_path / n) for n in ("pp", "fsdp", "pp_again"))
    train.run_simulated(train.parse_args(pp_tp + ["--steps", "2", "--save", saved] + QUICK))
    # resume at the saved step with no step left: load into the other layout, save again
    train.run_simulated(train.parse_args(fsdp + ["--steps", "2", "--resume", saved,
                                                 "--save", moved] + QUICK))
    train.run_simulated(train.parse_args(pp_tp + ["--steps", "2", "--resume", moved,
                                                  "--save", back] + QUICK))
    want = _one_process(saved)
    assert any(k.endswith("exp_avg") for k in want) and len(want) > 20
    for other in (moved, back):
        got = _one_process(other)
        assert set(got) == set(want)
        for key in want:
            assert torch.equal(got[key], want[key]), (other, key)


def test_training_resumed_across_layouts_goes_on_like_one_device(tmp_path, capsys):
    pytest.importorskip("safetensors")
    ck = str(tmp_path / "ck")
    train.run_simulated(train.parse_args(["--pp", "2", "--mesh", "1x2", "--steps", "1",
                                          "--save", ck] + QUICK))
    assert train.main(["--mesh", "4x1", "--no-tp", "--steps", "3", "--resume", ck]
                      + QUICK) == 0, capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--pp", "3"], r"--pp 3 with --model tiny \(2 blocks\): expected 1 to 2 stages"),
    (["--pp", "2", "--mesh", "2x2", "--dp", "replicate"], "a pipeline stage is fully sharded"),
    (["--pp", "2", "--pp-schedule", "1f1b", "--pp-stages-per-rank", "2"],
     "--pp-stages-per-rank 2 with --pp-schedule 1f1b: expected 1"),
    (["--pp", "2", "--pp-schedule", "zbv", "--pp-stages-per-rank", "3"],
     "--pp-stages-per-rank 3 with --pp-schedule zbv: expected 2"),
    (["--pp", "2", "--pp-schedule", "interleaved", "--pp-stages-per-rank", "2"],
     r"--pp 2 x --pp-stages-per-rank 2 stages with --model tiny \(2 blocks\)"),
    (["--pp", "2", "--model", "small", "--pp-schedule", "dualpipev", "--accumulate", "2"],
     "dualpipev with --accumulate 2: expected at least 2 x --pp = 4 micro-batches"),
])
def test_pipeline_arguments_that_cannot_work_are_refused(capsys, argv, message):
    import re

    with pytest.raises(SystemExit):
        train.parse_args(argv)
    assert re.search(message, capsys.readouterr().err)


def test_a_stage_is_the_models_own_modules_under_their_names():
    model = llama.Llama(llama.PRESETS["tiny"])
    stages = [llama.LlamaStage(model, s, 2) for s in range(2)]
    names = [n for st in stages for n, _ in st.named_parameters()]
    assert names == [n for n, _ in model.named_parameters()]
    with pytest.raises(ValueError, match="expected 0 <= stage < n_stages <= n_layers"):
        llama.LlamaStage(model, 0, 3)


def test_the_documented_pp_dp_cp_tp_run_on_16_ranks_equals_one_device(capsys):
    """The README's flag: pp x dp x cp x tp = 2x2x2x2, the whole stack on every stage."""
    assert train.main(["--pp", "2", "--mesh", "2x2x2", "--model", "small", "--steps", "2",
                       "--quiet", "--trace-file", ""]) == 0, capsys.readouterr().out


def test_torchrun_on_gloo_gives_the_simulated_pipelined_losses(tmp_path):
    argv = ["--pp", "2", "--mesh", "1x1x2", "--steps", "2", "--seq", "8"]
    simulated = train.run_simulated(train.parse_args(argv + QUICK))
    out = tmp_path / "run.json"
    proc = torchrun_module("examples.train", [*argv, "--json", str(out), "--quiet"], 4)
    assert "PASS" in proc.stdout
    real = json.loads(out.read_text())
    assert real["losses"] == pytest.approx(simulated[0].losses, rel=1e-6)


def test_a_stage_built_on_meta_has_the_whole_builds_weights_and_allocates_no_other():
    """Note [meta build, CPU values]: each stage materialized alone equals the CPU build."""
    from examples.models.meta_init import meta_build

    args = train.parse_args(["--pp", "2", "--mesh", "1x1", "--model", "small"] + QUICK)
    whole = dict(train.build_model(args).named_parameters())
    for s in range(2):
        stage = train.build_stage(args, s, "cpu")
        for name, p in stage.named_parameters():
            assert torch.equal(p, whole[name]), name
        assert torch.equal(stage.freqs_cos, train.build_model(args).freqs_cos)
    torch.manual_seed(args.seed)
    made = meta_build(lambda: llama.Llama(train.model_config(args)))
    made.materialize(llama.LlamaStage(made.model, 1, 2))
    meta = {n for n, p in made.model.named_parameters() if p.is_meta}
    assert "tok_embeddings.weight" in meta and "layers.0.attention.wq.weight" in meta
    assert "output.weight" not in meta
