"""Where the repository's files are, for tests that read them or start programs by path."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ROOT / "tests" / "programs"  # the gloo test programs (tests/support/gloo_runner.py)
DOCS = ROOT / "docs"
README = ROOT / "README.md"
