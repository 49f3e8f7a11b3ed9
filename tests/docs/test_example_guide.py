"""examples/guide.py, the user guide's program: sharded training, a checkpoint and a resume
in another layout equal one device's losses (docs/user-guide.md shows its output)."""

from __future__ import annotations

import pytest

from examples import guide


def test_guide_resumes_on_another_mesh_and_matches_one_device(tmp_path, capsys) -> None:
    assert guide.main(["--ranks", "4", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "<- resumed on a 1-D mesh" in out and "PASS" in out
    assert (tmp_path / "ck").exists()


def test_guide_refuses_an_odd_world(capsys) -> None:
    with pytest.raises(SystemExit):
        guide.main(["--ranks", "3"])
    assert "expected an even number" in capsys.readouterr().err
