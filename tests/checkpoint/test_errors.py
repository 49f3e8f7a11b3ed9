"""Every way a checkpoint or a target can be wrong gets its own CheckpointError naming the
file and the tensor; nothing damaged loads silently, and loading never unpickles."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest
import torch

import dtensor.checkpoint as dcp

W = torch.arange(64.0).reshape(8, 8)


def _target() -> dict:
    return {"model": {"w": torch.zeros(8, 8), "b": torch.zeros(3, dtype=torch.int32)},
            "step": 0}


@pytest.fixture
def ck(tmp_path) -> Path:
    path = tmp_path / "ck"
    dcp.save({"model": {"w": W, "b": torch.arange(3, dtype=torch.int32)}, "step": 5}, path,
             chunk_bytes=64)  # 8 chunks of w, so one damaged chunk is one of several
    return path


def _data_file(ck: Path) -> Path:
    return Path(os.path.realpath(ck)) / "rank00000.safetensors"


def _chunk_offset(file: Path, name: str) -> int:
    raw = file.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    return 8 + n + json.loads(raw[8:8 + n])[name]["data_offsets"][0]


def test_a_flipped_byte_is_a_checksum_error_naming_file_and_tensor(ck):
    file = _data_file(ck)
    raw = bytearray(file.read_bytes())
    raw[_chunk_offset(file, "model.w@4,4") + 5] ^= 0x10
    file.write_bytes(bytes(raw))
    with pytest.raises(dcp.ChecksumError, match=r"rank00000.safetensors: tensor 'model.w': "
                       r"chunk 'model.w@4,4' has crc32 .* expected") as e:
        dcp.load(_target(), ck)
    assert (e.value.file, e.value.key) == (str(file), "model.w")


def test_a_truncated_file_names_file_and_tensor(ck):
    file = _data_file(ck)
    file.write_bytes(file.read_bytes()[:-100])
    with pytest.raises(dcp.TruncatedFileError, match=r"rank00000.safetensors: \d+ bytes, "
                       r"expected \d+ as written \(opened for tensor 'model.\w'\)") as e:
        dcp.load(_target(), ck)
    assert e.value.file == str(file)


def test_a_missing_file_names_file_and_tensor(ck):
    _data_file(ck).unlink()
    with pytest.raises(dcp.MissingFileError, match=r"rank00000.safetensors: missing, but the "
                       r"metadata lists it as holding tensor 'model.w'"):
        dcp.load(_target(), ck)


def test_a_damaged_header_is_corrupt(ck):
    file = _data_file(ck)
    raw = file.read_bytes().replace(b'"F32"', b'"F16"', 1)
    file.write_bytes(raw)
    with pytest.raises(dcp.CorruptCheckpointError, match=r"tensor 'model.w': header entry "
                       r".* expected dtype float32"):
        dcp.load(_target(), ck)


def test_a_header_without_the_chunk_names_it(ck):
    file = _data_file(ck)
    file.write_bytes(file.read_bytes().replace(b'"model.w@4,4"', b'"model.w@4,5"', 1))
    with pytest.raises(dcp.CorruptCheckpointError, match=r"tensor 'model.w': the file's header "
                       r"has no entry 'model.w@4,4', expected one with dtype float32 and shape "
                       r"\[4, 4\] as the metadata records: the file was replaced or damaged"):
        dcp.load(_target(), ck)


def test_a_long_target_value_is_shortened_visibly(ck):
    target = _target()
    target["model"]["b"] = {"lr": 0.001, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01,
                            "params": list(range(30))}
    with pytest.raises(dcp.StateMismatchError, match=r"the value \{'betas': \(0.9, 0.999\), "
                       r"'eps': 1e-08, 'lr': 0.001, 'params': \[0, 1, 2, 3, \.\.\.\], "
                       r"\.\.\.\}"):
        dcp.load(target, ck)


def test_edited_metadata_fails_its_checksum(ck):
    meta = Path(os.path.realpath(ck)) / "metadata.json"
    meta.write_text(meta.read_text().replace('"step": 5', '"step": 6'))
    with pytest.raises(dcp.CorruptCheckpointError, match="metadata.json: metadata checksum "
                       "does not match its body"):
        dcp.load(_target(), ck)


def test_shape_and_dtype_mismatches_name_the_tensor(ck):
    bad = _target()
    bad["model"]["w"] = torch.zeros(8, 9)
    with pytest.raises(dcp.StateMismatchError, match=r"metadata.json: tensor 'model.w' is "
                       r"float32 \[8, 8\] in the checkpoint, but the target is float32 \[8, 9\]"):
        dcp.load(bad, ck)
    bad = _target()
    bad["model"]["b"] = torch.zeros(3, dtype=torch.int64)
    with pytest.raises(dcp.StateMismatchError, match=r"'model.b' is int32 \[3\] in the "
                       r"checkpoint, but the target is int64 \[3\]"):
        dcp.load(bad, ck)


def test_a_missing_key_and_a_structure_mismatch(ck):
    bad = _target()
    bad["model"]["extra"] = torch.zeros(1)
    with pytest.raises(dcp.MissingKeyError, match=r"no 'model.extra' in the checkpoint") as e:
        dcp.load(bad, ck)
    assert e.value.key == "model.extra"
    with pytest.raises(dcp.StateMismatchError, match=r"the target holds the value \{\} at "
                       r"'model', but the checkpoint has 2 entries under it .*"
                       r"init_optimizer_state"):
        dcp.load({"model": {}, "step": 0}, ck)
    with pytest.raises(dcp.StateMismatchError, match=r"'step' is a value in the checkpoint"):
        dcp.load({"step": torch.zeros(1)}, ck)


def test_incomplete_and_absent_checkpoints(ck, tmp_path):
    unfinished = tmp_path / "ck.v-unfinished"
    unfinished.mkdir()
    (unfinished / "rank00000.safetensors").write_bytes(_data_file(ck).read_bytes())
    with pytest.raises(dcp.IncompleteCheckpointError, match="a save that never finished"):
        dcp.load(_target(), unfinished)
    with pytest.raises(dcp.CheckpointNotFoundError, match="nothing was published"):
        dcp.load(_target(), tmp_path / "nope")


def test_values_that_need_pickle_are_refused_at_save(tmp_path):
    with pytest.raises(dcp.UnsupportedValueError, match=r"'opt.fn' holds a "
                       r"builtin_function_or_method .* never pickles") as e:
        dcp.save({"w": torch.ones(1), "opt": {"fn": len}}, tmp_path / "ck")
    assert e.value.key == "opt.fn"


def test_save_refuses_a_path_that_is_not_a_checkpoint(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "keep.txt").write_text("mine")
    with pytest.raises(dcp.SaveFailedError, match="exists and holds no checkpoint"):
        dcp.save({"w": torch.ones(1)}, tmp_path / "data")
    assert (tmp_path / "data" / "keep.txt").read_text() == "mine"


def test_loading_never_unpickles(ck, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("load unpickled something")
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)
    monkeypatch.setattr(torch, "load", refuse)
    state = _target()
    dcp.load(state, ck)
    assert torch.equal(state["model"]["w"], W) and state["step"] == 5


def test_files_are_safetensors(ck):
    pytest.importorskip("safetensors")
    from safetensors.torch import load_file

    chunks = load_file(str(_data_file(ck)))
    assert torch.equal(chunks["model.w@4,4"], W[4:8, 4:8])
    assert torch.equal(chunks["model.b@0"], torch.arange(3, dtype=torch.int32))
