"""pytest wiring: ``@pytest.mark.world(n)`` runs a test body on n simulated ranks.

In a test module (as in ``tests/test_simpg_run.py``)::

    @pytest.mark.world(4)
    def test_sum():
        t = torch.ones(2)
        dist.all_reduce(t)
        assert t.tolist() == [4.0, 4.0]
"""

from __future__ import annotations

from typing import Any

import pytest

import simpg

TEST_TIMEOUT_S = 10.0  # short: a deadlock in a test should fail fast, not hang CI


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "world(size, timeout=10.0, schedule_seed=None): run on N simulated ranks"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Any:
    marker = pyfuncitem.get_closest_marker("world")
    if marker is None:
        return None
    size = marker.args[0] if marker.args else marker.kwargs.get("size")
    if size is None:
        raise pytest.UsageError(
            f"{pyfuncitem.nodeid}: @pytest.mark.world needs a size, e.g. world(4)")
    timeout = marker.kwargs.get("timeout", TEST_TIMEOUT_S)
    seed = marker.kwargs.get("schedule_seed")
    names = pyfuncitem._fixtureinfo.argnames
    kwargs = {name: pyfuncitem.funcargs[name] for name in names}
    test = pyfuncitem.obj
    simpg.run(lambda: test(**kwargs), size, timeout=timeout, schedule_seed=seed)
    return True
