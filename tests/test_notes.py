"""Every ``Note [name]`` cited in the code is written, and a Note written as a heading (its
name alone on a line, in a docstring or a ``#`` comment) is written once."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted(p for package in ("dtensor", "simpg", "opdb_tests", "benchmarks", "tests",
                                   "examples")
                 for p in (ROOT / package).rglob("*.py") if p.name != "test_notes.py")
_HEADING = re.compile(r'^\s*(?:"""|# )?Note \[([^\]]+)\]\s*$')
# a short Note written where it applies: its name, then a colon and its text
_INLINE = re.compile(r"Note \[([^\]]+)\]:")
_CITE = re.compile(r"Note \[([^\]]+)\]")


def _name(raw: str) -> str:
    return " ".join(raw.split())


def _notes() -> tuple[dict[str, list[str]], set[str], dict[str, list[str]]]:
    headings: dict[str, list[str]] = defaultdict(list)
    inline: set[str] = set()
    cites: dict[str, list[str]] = defaultdict(list)
    for path in SOURCES:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            where = f"{path.relative_to(ROOT)}:{n}"
            if heading := _HEADING.match(line):
                headings[_name(heading.group(1))].append(where)
                continue
            inline.update(_name(name) for name in _INLINE.findall(line))
            for name in _CITE.findall(line):
                if "{" not in name:  # a Note named by a format string, checked where it runs
                    cites[_name(name)].append(where)
    return headings, inline, cites


def test_every_cited_note_is_written():
    headings, inline, cites = _notes()
    missing = {name: places[:3] for name, places in cites.items()
               if name not in headings and name not in inline}
    assert not missing, f"Notes cited but written nowhere: {missing}"


def test_every_heading_is_written_once():
    headings, _, _ = _notes()
    twice = {name: places for name, places in headings.items() if len(places) > 1}
    assert not twice, f"Notes written more than once: {twice}"
