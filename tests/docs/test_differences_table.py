"""docs/differences.md stays true to the code: every row's *where* names code that exists (a
file, an importable module, a Note that some source file heads), so a row cannot outlive the
behaviour it describes without this test failing."""

from __future__ import annotations

import importlib
import re

import pytest

from tests.support.paths import ROOT

PAGE = (ROOT / "docs" / "differences.md").read_text()
SOURCES = "\n".join(p.read_text() for d in ("dtensor", "simpg", "opdb_tests", "benchmarks")
                    for p in (ROOT / d).rglob("*.py"))


def _rows() -> list[tuple[str, str]]:
    rows = []
    for line in PAGE.split("\n"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 4 and not set(cells[0]) <= {"-"} \
                and cells[0] not in ("topic", "case"):
            rows.append((cells[0], cells[3]))
    return rows


def test_the_table_has_rows() -> None:
    assert len(_rows()) >= 20


@pytest.mark.parametrize("topic,where", _rows(), ids=lambda v: v[:40])
def test_each_row_names_code_that_exists(topic: str, where: str) -> None:
    notes = re.findall(r"Note \[([^\]]+)\]", where)
    for note in notes:
        assert f"Note [{note}]" in SOURCES, f"{topic!r}: Note [{note}] is headed nowhere"
    for ref in re.findall(r"`([^`]+)`", where):
        if ref.endswith(".py") or "/" in ref:
            assert (ROOT / ref).exists(), f"{topic!r}: {ref} does not exist"
        elif re.fullmatch(r"(dtensor|simpg)(\.\w+)+", ref):
            module, _, attr = ref.rpartition(".")
            try:
                importlib.import_module(ref)
            except ImportError:
                assert hasattr(importlib.import_module(module), attr), \
                    f"{topic!r}: {ref} is neither a module nor a name in {module}"
    assert notes or "`" in where, f"{topic!r}: the where column names no code"
