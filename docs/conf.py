"""Sphinx configuration: ``bash scripts/docs.sh`` builds the site into docs/_build/html."""

from __future__ import annotations

import html
import importlib
import re
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
DOCUMENTED_PACKAGES = ("dtensor", "dtensor.parallel", "dtensor.checkpoint", "dtensor.graph",
                       "dtensor.experimental",
                       "simpg")


def _check_api_is_complete(app, env) -> None:
    from sphinx.util import logging

    log = logging.getLogger(__name__)
    documented = set(env.get_domain("py").objects)
    # an object exported from two packages is documented once, under the one where it lives
    # (documented twice, viewcode's back-links from its source would point at one of the two)
    documented_ids = set()
    for qualified in documented:
        module_name, _, name = qualified.rpartition(".")
        try:
            documented_ids.add(id(getattr(importlib.import_module(module_name), name)))
        except (ImportError, AttributeError, ValueError):
            continue
    for package in DOCUMENTED_PACKAGES:
        module = importlib.import_module(package)
        for name in getattr(module, "__all__", ()):
            if f"{package}.{name}" not in documented \
                    and id(getattr(module, name)) not in documented_ids:
                log.warning(f"{package}.{name} is in {package}.__all__ but not in the API "
                            f"reference (docs/api/)")


def broken_internal_links(html_root: Path) -> list[str]:
    """Every link between the built pages (``href="page.html#anchor"``) whose page or anchor
    does not exist, as 'page: href' lines. Sphinx's own ``linkcheck`` checks external
    addresses over the network; the back-links viewcode writes ("[docs]") and the anchors
    of included README headings are only checked here."""
    pages = {path.resolve(): set(re.findall(r'\bid="([^"]+)"', path.read_text()))
             for path in html_root.rglob("*.html")}
    broken = []
    for page, _ in pages.items():
        for href in re.findall(r'<a [^>]*href="([^"#:]*)(?:#([^"]*))?"', page.read_text()):
            path, anchor = href
            target = (page.parent / path).resolve() if path else page
            if target.suffix != ".html":
                continue
            if target not in pages or (anchor and html.unescape(anchor) not in pages[target]):
                where = page.relative_to(html_root.resolve())
                broken.append(f"{where}: {path}#{anchor}" if anchor else f"{where}: {path}")
    return broken


def _check_links(app, exception) -> None:
    if exception is not None or app.builder.name != "html":
        return
    broken = broken_internal_links(Path(app.outdir))
    if broken:
        raise RuntimeError(f"{len(broken)} broken link(s) between the built pages:\n  "
                           + "\n  ".join(broken))


def setup(app) -> None:
    app.connect("env-check-consistency", _check_api_is_complete)
    app.connect("build-finished", _check_links)
