"""The contributor guide's code (docs/contributing.md) runs as written: the rule example is
proven sound and its wrong variant caught, and the example test passes on 4 ranks."""

from __future__ import annotations

import re

import simpg
from tests.support.paths import DOCS

PAGE = (DOCS / "contributing.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE, re.S)


def test_the_page_has_its_two_examples() -> None:
    assert len(BLOCKS) == 2


def test_rule_example_is_sound_and_the_wrong_rule_is_caught(capsys) -> None:
    exec(BLOCKS[0], {})
    assert "Unsound(op='aten.flip.default', candidate='[S(1)] -> [S(1)]'" in \
        capsys.readouterr().out


def test_example_test_passes_on_four_ranks() -> None:
    names: dict = {}
    exec(BLOCKS[1], names)
    simpg.run(names["test_flip_moves_nothing"], 4)
