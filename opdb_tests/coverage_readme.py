"""The README's op-coverage figures: a block written by ``opdb_tests.coverage`` from the
counts it measured, and the check that it still says what ``COVERAGE.md`` says.

The block is rendered from COVERAGE.md's count table alone, so ``drift`` needs no sweep:
it re-renders the block from COVERAGE.md and compares it with the README's.

>>> print(block({"variants": 3, "with cases": 2, "no cases (skipped)": 1}))
| op_db variants | with cases | no cases (skipped) |
|---:|---:|---:|
| 3 | 2 | 1 |
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping

from opdb_tests.readme_figures import README, read_block, replace_block

BLOCK = "coverage"
COMMAND = ".venv/bin/python -m opdb_tests.coverage"
MARKDOWN = Path(__file__).resolve().parent / "COVERAGE.md"

# README column -> COVERAGE.md count; "backward" is shown as "N of M"
COLUMNS = {"op_db variants": "variants", "with cases": "with cases",
           "no cases (skipped)": "no cases (skipped)",
           "random (seeded alike)": "random (seeded alike, no soundness tier)",
           "sample generation errors": "sample generation errors",
           "one aten op": "one aten op (rule level)", "with a rule": "with a rule",
           "sound for all placements": "sound for all placements",
           "end to end forward": "end to end forward",
           "under inference_mode": "end to end under inference_mode"}


def block(counts: Mapping[str, int]) -> str:
    """The README block's text for these counts (keys as ``coverage.counts`` names them)."""
    cols = [c for c, k in COLUMNS.items() if k in counts]
    cells = [str(counts[COLUMNS[c]]) for c in cols]
    if "backward (of autograd float)" in counts:
        cols.append("backward")
        cells.append(f"{counts['backward (of autograd float)']} of {counts['autograd float']}")
    return "\n".join(["| " + " | ".join(cols) + " |", "|" + "---:|" * len(cols),
                      "| " + " | ".join(cells) + " |"])


def parse_counts(markdown: str) -> dict[str, int]:
    """The ``| name | number |`` rows of COVERAGE.md's first table."""
    return {m[1]: int(m[2]) for m in re.finditer(r"^\| ([^|]+?) \| (\d+) \|$", markdown, re.M)}


def _counts_table(markdown: str) -> str:
    # the count table ends at the first section heading after it
    return markdown.split("\n## ", 1)[0]


def drift(readme: str, markdown: str) -> str | None:
    """What the README's block says that COVERAGE.md does not, or None."""
    body, _ = read_block(readme, BLOCK)
    want = block(parse_counts(_counts_table(markdown)))
    if body.strip() == want.strip():
        return None
    return (f"the README's coverage figures differ from opdb_tests/COVERAGE.md:\n"
            f"README:\n{body.strip()}\nCOVERAGE.md says:\n{want}\n"
            f"run  {COMMAND}  (it writes both) and commit them")


def write_readme(counts: Mapping[str, int], path: Path = README) -> None:
    path.write_text(replace_block(path.read_text(), BLOCK, block(counts), COMMAND))
