"""The main job's --save / --resume: train, save, resume on another mesh shape, world size
and set of placements, and the losses continue as in an uninterrupted run.

On the same mesh the resumed losses are bit-identical: the loaded state is exact and the
same ranks do the same math. On another mesh the loaded state is still exact, but the steps
after it sum in another order (other tp splits of the matmuls, other dp shares), so the
losses agree to the tolerance the main job already holds every mesh to against one device
(rel. 1e-5), not bitwise."""

from __future__ import annotations

import pytest
import torch

# torch's C++ imports its own DTensor at the first detach() of a DTensor (AdamW does):
# imported before any world, as simpg.isolation asks
import torch.distributed.tensor

import dtensor.checkpoint as dcp
from examples import train
from examples.models import llama

pytest.importorskip("safetensors")

COMMON = ["--seq", "8", "--batch", "8", "--quiet", "--trace-file", ""]


def _run(argv: list[str]) -> list[train.RankResult]:
    return train.run_simulated(train.parse_args(argv + COMMON))


def test_resume_on_the_same_mesh_is_bit_identical(tmp_path):
    ck = str(tmp_path / "ck")
    straight = _run(["--mesh", "2x2", "--steps", "4"])[0].losses
    first = _run(["--mesh", "2x2", "--steps", "2", "--save", ck])
    resumed = _run(["--mesh", "2x2", "--steps", "4", "--resume", ck])
    assert first[0].losses == straight[:2]
    assert all(r.first_step == 2 for r in resumed)
    assert resumed[0].losses == straight[2:]


@pytest.mark.parametrize("target", [
    ["--mesh", "8x1", "--no-tp"],  # 2x4 dp x tp -> 8-way fully sharded
    ["--mesh", "1x4", "--dp", "none", "--no-sp"],  # -> 4 ranks, tensor parallel only
], ids=["2x4->8-way-fsdp", "2x4->1x4-tp"])
def test_resume_on_another_mesh_continues_the_losses(tmp_path, target):
    ck = str(tmp_path / "ck")
    straight = _run(["--mesh", "2x4", "--steps", "4"])[0].losses
    _run(["--mesh", "2x4", "--steps", "2", "--save", ck])
    resumed = _run(target + ["--steps", "4", "--resume", ck])
    for r in resumed:
        assert r.first_step == 2
        assert r.losses == pytest.approx(straight[2:], rel=1e-5)


def test_resume_on_one_process_for_evaluation(tmp_path):
    """Load the 2x4 checkpoint into the plain model on one process (no process group): the
    next step's loss is the uninterrupted run's."""
    ck = str(tmp_path / "ck")
    argv = ["--mesh", "2x4", "--steps", "3"]
    straight = _run(argv)[0].losses
    _run(["--mesh", "2x4", "--steps", "2", "--save", ck])
    args = train.parse_args(argv + COMMON)
    model = train.build_model(args)
    opt = train.make_optimizer(model.parameters(), args)
    assert train.load_checkpoint(model, opt, ck) == 2
    inputs, targets = train.batch(args, 2, model.config.vocab_size)
    with torch.no_grad():
        loss = llama.loss_fn(model(inputs), targets)
    assert loss.item() == pytest.approx(straight[2], rel=1e-5)


def test_a_checkpoint_of_another_model_is_refused_naming_the_tensor(tmp_path):
    ck = str(tmp_path / "ck")
    _run(["--mesh", "1x2", "--steps", "1", "--save", ck])
    with pytest.raises(dcp.StateMismatchError, match=r"tensor 'model.tok_embeddings.weight' "
                       r"is float32 \[1000, 64\] in the checkpoint, but the target is float32 "
                       r"\[999, 64\]"):
        _run(["--mesh", "1x2", "--steps", "2", "--vocab", "999", "--resume", ck])
