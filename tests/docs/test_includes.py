"""The docs pages include parts of the README and COVERAGE.md between marker texts; a marker
that the included file no longer contains breaks the Sphinx build (-W), so check them here,
in the default run, without building the docs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.paths import DOCS

_INCLUDE = re.compile(r"```\{include\} (?P<path>\S+)\n(?P<options>(?::[^\n]*\n)*)```")
_OPTION = re.compile(r':(?P<name>start-after|end-before): "(?P<text>[^"]*)"')


def _includes() -> list[tuple[str, Path, str, str]]:
    found = []
    for page in sorted(DOCS.glob("*.md")):
        for m in _INCLUDE.finditer(page.read_text()):
            target = (page.parent / m["path"]).resolve()
            for opt in _OPTION.finditer(m["options"]):
                found.append((page.name, target, opt["name"], opt["text"]))
    return found


def test_the_docs_include_something() -> None:
    assert len(_includes()) >= 10  # the pattern still matches the pages' include blocks


@pytest.mark.parametrize("page,target,option,text", _includes(),
                         ids=lambda v: v if isinstance(v, str) and len(v) < 30 else None)
def test_include_markers_exist(page: str, target: Path, option: str, text: str) -> None:
    assert target.exists(), f"docs/{page} includes {target}, which does not exist"
    assert text in target.read_text(), (
        f"docs/{page}: {option} marker {text!r} is not in {target.name}; the docs build fails")
