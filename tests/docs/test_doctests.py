"""Docstring examples run as tests: every ``>>>`` example in the public modules of dtensor
(dtensor.parallel included) and simpg, one test per docstring, ids naming the object
(``dtensor.layout.local_slices``).

A dedicated test file instead of ``--doctest-modules`` in addopts: the default test command
runs them without changing how anyone else's tests are collected. Examples written as
comments (``>>> # parallelize_module(...)``) hold no example and are not collected; an
example that needs a world starts one itself (``simpg.run(...)``).
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from types import ModuleType

import pytest

PACKAGES = ("dtensor", "simpg")
FLAGS = doctest.ELLIPSIS


def public_modules(package: str) -> list[ModuleType]:
    """The package and every submodule whose dotted name has no part starting with ``_``."""
    pkg = importlib.import_module(package)
    names = [m.name for m in pkgutil.walk_packages(pkg.__path__, package + ".")]
    public = [n for n in names if not any(p.startswith("_") for p in n.split("."))]
    return [pkg] + [importlib.import_module(n) for n in sorted(public)]


def docstring_examples() -> list[doctest.DocTest]:
    finder = doctest.DocTestFinder(exclude_empty=True)
    tests = []
    for package in PACKAGES:
        for module in public_modules(package):
            tests += [t for t in finder.find(module) if t.examples]
    return sorted(tests, key=lambda t: t.name)


EXAMPLES = docstring_examples()


def test_examples_are_found() -> None:
    """Guards the collection itself: a broken walk would otherwise pass by finding nothing."""
    names = {t.name for t in EXAMPLES}
    assert {"simpg.runner.run", "dtensor.layout.local_slices"} <= names, sorted(names)


@pytest.mark.parametrize("test", EXAMPLES, ids=[t.name for t in EXAMPLES])
def test_docstring_example(test: doctest.DocTest) -> None:
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    # run a copy: DocTestRunner clears the globals it was given when it finishes
    test = doctest.DocTest(test.examples, dict(test.globs), test.name, test.filename,
                           test.lineno, test.docstring)
    result = runner.run(test, out=report.append, clear_globs=True)
    assert not result.failed, "".join(report)
