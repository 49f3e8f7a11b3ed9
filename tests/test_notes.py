"""Every ``Note [name]`` cited in the code is written, a Note written as a heading (its
name alone on a line, in a docstring or a ``#`` comment) is written once, and a citation that
says where a Note is ("Note [x] in dtensor/comm/handles.py", "in `dtensor.dispatch.entry`",
in the code, the README or docs/) names the module or package that holds it."""

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
# "Note [x] in <where>": a dotted module, a path, or a file name; quotes of any kind around it
_CITE_IN = re.compile(r"Note \[([^\]]+)\]\s+in\s+`*([A-Za-z_][\w./]*\w/?)`*")
_PACKAGES = ("dtensor", "simpg", "opdb_tests", "benchmarks", "tests", "examples", "scripts")
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


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


def _holds(heading_file: str, where: str) -> bool:
    """Whether ``where`` (as cited) names ``heading_file`` or a package above it."""
    where = where.rstrip("/")
    if "/" not in where and not where.endswith(".py"):
        where = where.replace(".", "/")
    if "/" not in where and where.endswith(".py"):  # a bare file name
        return heading_file.endswith("/" + where)
    return heading_file in (where, where + ".py") or heading_file.startswith(where + "/")


def _misplaced(label: str, text: str, headings: dict[str, list[str]]) -> list[str]:
    wrong = []
    for cite in _CITE_IN.finditer(text):
        name, where = _name(cite.group(1)), cite.group(2)
        if not (where.split(".")[0].split("/")[0] in _PACKAGES or where.endswith(".py")):
            continue  # "in the planner", "in this file": prose, not a place
        written = headings.get(name)
        if written and not _holds(written[0].split(":")[0], where):
            line = text[:cite.start()].count("\n") + 1
            wrong.append(f"{label}:{line}: Note [{name}] cited in {where}, written in "
                         f"{written[0]}")
    return wrong


def test_every_citation_names_where_the_note_is():
    headings, _, _ = _notes()
    wrong = [w for path in [*SOURCES, *DOCS]
             for w in _misplaced(str(path.relative_to(ROOT)), path.read_text(), headings)]
    assert not wrong, "Notes cited in the wrong place:\n" + "\n".join(wrong)


def test_a_misplaced_citation_is_seen():
    text = "\n".join(f"see Note [fast path] in {where}" for where in (
        "\n`dtensor/comm/handles.py`", "``dtensor.dispatch.entry``", "`dtensor.dispatch`",
        "entry.py", "dispatch.py", "the dispatcher"))
    wrong = _misplaced("x.md", text, {"fast path": ["dtensor/dispatch/entry.py:35"]})
    assert len(wrong) == 2, wrong
    assert "dtensor/comm/handles.py" in wrong[0] and "dispatch.py" in wrong[1]
