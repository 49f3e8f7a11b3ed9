"""pytest wiring: ``@pytest.mark.world(n)`` runs a test body on n simulated ranks.

Installing this package registers the plugin (a ``pytest11`` entry point), so any project
can write, with no conftest::

    @pytest.mark.world(4)
    def test_sum():
        t = torch.ones(2)
        dist.all_reduce(t)
        assert t.tolist() == [4.0, 4.0]

Options: ``--subtest LABEL`` runs only that combination of each ``run_subtests`` grid (the
rerun command a failure prints); ``--full-trace`` (pytest's) shows simpg's and other
libraries' frames, which failures of simulated tests otherwise hide.
"""

from __future__ import annotations

import inspect
import logging
import os
import unittest
from typing import Any, Generator

import pytest
import torch.distributed.c10d_logger

import simpg
from simpg.frames import is_library_file
from simpg.subtests import SELECT_ENV
from simpg.world import rank_context

TEST_TIMEOUT_S = 10.0  # short: a deadlock in a test should fail fast, not hang CI
_MARKER_KWARGS = {"size", "timeout", "schedule_seed"}
_SIMPG_DIR = os.path.dirname(simpg.__file__) + os.sep


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("simpg").addoption(
        "--subtest", default=None, metavar="LABEL",
        help="run only the run_subtests combination with this label, e.g. 'n=2, dtype=...'")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "world(size, timeout=10.0, schedule_seed=None): run on N simulated ranks")
    label = config.getoption("--subtest", default=None)
    if label:
        os.environ[SELECT_ENV] = label  # read by run_subtests on the ranks, at call time
    c10d_logger = getattr(torch.distributed.c10d_logger, "_c10d_logger", None)
    if c10d_logger is not None and _quiet_on_ranks not in c10d_logger.filters:
        c10d_logger.addFilter(_quiet_on_ranks)


def _quiet_on_ranks(record: logging.LogRecord) -> bool:
    """torch logs every collective that raises at DEBUG; on simulated ranks each release of a
    waiting rank is such a raise, and pytest shows them all beside the one real failure."""
    return rank_context.get() is None


def _world_size(item: pytest.Item, marker: pytest.Mark) -> int:
    unknown = set(marker.kwargs) - _MARKER_KWARGS
    if unknown:
        raise pytest.UsageError(
            f"{item.nodeid}: @pytest.mark.world got unknown argument(s) {sorted(unknown)}; "
            f"expected world(size, timeout=..., schedule_seed=...)")
    size = marker.args[0] if marker.args else marker.kwargs.get("size")
    if size is None:
        raise pytest.UsageError(
            f"{item.nodeid}: @pytest.mark.world needs a size, e.g. world(4)")
    if not isinstance(size, int) or isinstance(size, bool) or size < 1:
        raise pytest.UsageError(
            f"{item.nodeid}: @pytest.mark.world({size!r}): the world size must be an int >= 1")
    return size


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Check every world marker at collection, not when the test runs."""
    for item in items:
        marker = item.get_closest_marker("world")
        if marker is None:
            continue
        _world_size(item, marker)
        test = getattr(item, "obj", None)
        if not isinstance(item, pytest.Function) or isinstance(
                getattr(item, "instance", None), unittest.TestCase):
            raise pytest.UsageError(
                f"{item.nodeid}: @pytest.mark.world applies to test functions; a unittest "
                f"class runs its own ranks (simpg.testing.DTensorTestBase, world_size=...)")
        if inspect.iscoroutinefunction(test) or inspect.isgeneratorfunction(test):
            raise pytest.UsageError(
                f"{item.nodeid}: @pytest.mark.world cannot run a coroutine or generator test")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Any:
    marker = pyfuncitem.get_closest_marker("world")
    if marker is None:
        return None
    __tracebackhide__ = True
    size = _world_size(pyfuncitem, marker)
    names = pyfuncitem._fixtureinfo.argnames
    kwargs = {name: pyfuncitem.funcargs[name] for name in names}
    test = pyfuncitem.obj

    def on_each_rank() -> None:
        __tracebackhide__ = True
        test(**kwargs)

    simpg.run(on_each_rank, size, timeout=marker.kwargs.get("timeout", TEST_TIMEOUT_S),
              schedule_seed=marker.kwargs.get("schedule_seed"))
    return True


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Generator:
    """Failures that came through simpg show the user's frames (Note [the user's frame]):
    the library frames between them (simpg's ranks, torch.distributed, a DTensor runtime)
    are hidden unless ``--full-trace``."""
    excinfo = call.excinfo
    if excinfo is not None and not item.config.getoption("fulltrace", False):
        entries = list(excinfo.traceback)
        if any(str(e.path).startswith(_SIMPG_DIR) for e in entries):
            mine = [e for e in entries if not is_library_file(str(e.path))]
            if mine:
                excinfo.traceback = type(excinfo.traceback)(mine)
    yield
