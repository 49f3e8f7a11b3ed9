"""docs/architecture.md stays true to the tree: every file or folder it names exists."""

from __future__ import annotations

import re

from tests.support.paths import DOCS, ROOT

PAGE = DOCS / "architecture.md"
# where a bare name in the page is looked for: the page names dtensor's modules relative to
# dtensor/ (or its subpackage) inside that layer's section, and test files by their folder
_PLACES = ("", "dtensor/", "simpg/", "tests/")


def _cited_paths() -> list[str]:
    names = set(re.findall(r"`([^`\s<>]+)`", PAGE.read_text()))
    return sorted(n for n in names if re.search(r"(\.py|\.md|\.cpp|\.h|/)$", n))


def _exists(name: str) -> bool:
    if any((ROOT / place / name).exists() for place in _PLACES):
        return True
    return any(sub.is_dir() and (sub / name).exists()
               for top in ("dtensor", "tests") for sub in (ROOT / top).iterdir())


def test_every_path_the_map_names_exists():
    cited = _cited_paths()
    assert len(cited) > 50, "the page should name the files it maps"
    missing = [name for name in cited if not _exists(name)]
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"
