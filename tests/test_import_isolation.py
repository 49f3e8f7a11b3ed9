"""dtensor never depends on simpg (STYLE.md point 8): importing it loads no simpg module, and
its code names simpg nowhere but in prose (comments, docstrings, messages to the user)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import ROOT

SOURCES = sorted((ROOT / "dtensor").rglob("*.py"))
# a module or backend name: what an import, a sys.modules lookup or a backend test would use
_NAME = re.compile(r"simpg(\.\w+)*", re.IGNORECASE)


def test_importing_dtensor_loads_no_simpg() -> None:
    # dtensor and every module under it: a lazy import of simpg anywhere would show
    code = ("import importlib, pkgutil, sys, dtensor\n"
            "for m in pkgutil.walk_packages(dtensor.__path__, 'dtensor.'):\n"
            "    importlib.import_module(m.name)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'simpg'))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"importing dtensor loaded {out.stdout.strip()}"


def simpg_in_code(source: str) -> list[str]:
    """Each place where ``source`` names simpg as code: an import, an identifier, or a string
    that is exactly a simpg module or backend name. Comments and docstrings are prose."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] + [a.name for a in node.names]
        elif isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value] if _NAME.fullmatch(node.value.strip()) else []
        else:
            continue
        found += [f"line {node.lineno}: {n!r}" for n in names if "simpg" in n.lower()]
    return found


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_dtensor_source_does_not_name_simpg(path: Path) -> None:
    assert simpg_in_code(path.read_text()) == []


def test_the_source_check_sees_each_way_of_naming_simpg() -> None:
    assert len(simpg_in_code("import simpg")) == 1
    assert len(simpg_in_code("from simpg.world import World")) == 1
    assert len(simpg_in_code("x = sys.modules['simpg']")) == 1
    assert len(simpg_in_code("if group.getBackendName() == 'SIMPG':\n    pass")) == 1
    assert len(simpg_in_code("simulated = is_simpg(group)")) == 1
    assert simpg_in_code('"""Runs on simpg too."""\n# simpg: a comment\n'
                         'raise E("or run under simpg.run / torchrun")') == []
