"""Sphinx configuration: ``bash scripts/docs.sh`` builds the site into docs/_build/html."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # autodoc imports the packages from this checkout

project = "dtensor · simpg · opdb_tests"
author = "the dtensor-simpg authors"
release = "0.1.0"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.viewcode",
    "myst_parser",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3

# docstrings are plain reST (``literal``, Note [...] paragraphs); one page per package lists
# the public names by topic, so no stub pages are generated
autosummary_generate = False
autodoc_member_order = "bysource"
autodoc_default_options = {"show-inheritance": True}
autodoc_typehints_format = "short"
add_module_names = False

html_theme = "furo"
html_title = "dtensor · simpg"
html_static_path: list[str] = []

# every public name of these packages must appear in the API reference (checked at the end
# of reading: a name added to ``__all__`` without a page entry fails the -W build)
DOCUMENTED_PACKAGES = ("dtensor", "dtensor.parallel", "simpg")


def _check_api_is_complete(app, env) -> None:
    from sphinx.util import logging

    log = logging.getLogger(__name__)
    documented = set(env.get_domain("py").objects)
    for package in DOCUMENTED_PACKAGES:
        module = importlib.import_module(package)
        for name in getattr(module, "__all__", ()):
            if f"{package}.{name}" not in documented:
                log.warning(f"{package}.{name} is in {package}.__all__ but not in the API "
                            f"reference (docs/api/)")


def setup(app) -> None:
    app.connect("env-check-consistency", _check_api_is_complete)
