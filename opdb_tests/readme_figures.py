"""Generated blocks of the README: figures written by the script that measures them.

A block sits between two marker comments::

    <!-- generated:NAME begin: COMMAND writes this block (checksum 1a2b3c4d5e6f); do not edit -->
    ...the script's own output...
    <!-- generated:NAME end -->

The checksum is over the block's text, so an edit by hand (a figure typed over) no longer
matches it and ``tests/docs/test_readme_figures.py`` fails; rerunning COMMAND rewrites the block.

>>> text = "a\\n<!-- generated:x begin -->\\nold\\n<!-- generated:x end -->\\nb\\n"
>>> print(replace_block(text, "x", "new", "make x").split("\\n")[2])
new
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import re
import sys
from pathlib import Path
from typing import Iterator

README = Path(__file__).resolve().parent.parent / "README.md"


class BlockError(ValueError):
    """A README block is missing, duplicated, or its text does not match its checksum."""


def checksum(body: str) -> str:
    return hashlib.sha256(body.strip().encode()).hexdigest()[:12]


def _pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"<!-- generated:{re.escape(name)} begin(?P<meta>[^\n]*?)-->\n"
                      rf"(?P<body>.*?)\n?<!-- generated:{re.escape(name)} end -->", re.S)


def names(text: str) -> list[str]:
    """The names of the generated blocks in a README's text, in order."""
    return re.findall(r"<!-- generated:([\w.-]+) begin", text)


def read_block(text: str, name: str) -> tuple[str, str]:
    """(body, begin-marker metadata) of block ``name``; BlockError if not exactly one."""
    found = list(_pattern(name).finditer(text))
    if len(found) != 1:
        raise BlockError(f"README has {len(found)} blocks named {name!r} (expected one, "
                         f"between '<!-- generated:{name} begin ... -->' and "
                         f"'<!-- generated:{name} end -->')")
    return found[0]["body"], found[0]["meta"]


def demote_headings(body: str) -> str:
    """A script's report with its markdown headings (``# title``) turned into bold lines: a
    heading inside a README block would become a section of the README and, through the docs'
    includes, a page title in the site's navigation. Code fences are left as they are."""
    lines, fenced = [], False
    for line in body.split("\n"):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6} (.*)", line)):
            line = f"**{m[1].strip()}**"
        lines.append(line)
    return "\n".join(lines)


def replace_block(text: str, name: str, body: str, command: str) -> str:
    """``text`` with block ``name``'s body replaced by ``body`` (headings demoted to bold
    lines), stamped with its checksum."""
    read_block(text, name)
    body = demote_headings(body)
    begin = (f"<!-- generated:{name} begin: `{command}` writes this block "
             f"(checksum {checksum(body)}); do not edit by hand -->")
    new = f"{begin}\n{body.strip()}\n<!-- generated:{name} end -->"
    return _pattern(name).sub(lambda _: new, text, count=1)


def verify_block(text: str, name: str) -> str | None:
    """What is wrong with block ``name`` (edited by hand, no checksum), or None."""
    body, meta = read_block(text, name)
    m = re.search(r"checksum ([0-9a-f]{12})", meta)
    command = re.search(r"`([^`]+)`", meta)
    rerun = f"rerun `{command[1]}`" if command else "regenerate it"
    if m is None:
        return f"README block {name!r} has no checksum in its begin marker: {rerun}"
    if m[1] != checksum(body):
        return (f"README block {name!r} was edited by hand: its text's checksum is "
                f"{checksum(body)}, the marker says {m[1]} (what its script wrote): {rerun}")
    return None


def write_readme(name: str, body: str, command: str, path: Path = README) -> None:
    """Rewrite block ``name`` of the README with ``body`` (what ``command`` measured)."""
    path.write_text(replace_block(path.read_text(), name, body, command))
    print(f"wrote the {name!r} block of {path.name}")


@contextlib.contextmanager
def tee() -> Iterator[io.StringIO]:
    """Within the block, what is printed also goes to the returned buffer (the script's
    report, printed as ever, and kept for its README block)."""
    out, buf = sys.stdout, io.StringIO()

    class _Tee(io.TextIOBase):
        def write(self, s: str) -> int:
            buf.write(s)
            return out.write(s)

        def flush(self) -> None:
            out.flush()

    with contextlib.redirect_stdout(_Tee()):
        yield buf


def through_first_table(report: str) -> str:
    """The report up to the end of its first markdown table (what follows is for the
    terminal: losses per step, verdicts)."""
    lines = report.split("\n")
    start = next((i for i, line in enumerate(lines) if line.startswith("|")), len(lines))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")),
               len(lines))
    return "\n".join(lines[:end])
