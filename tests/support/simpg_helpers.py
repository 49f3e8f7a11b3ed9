"""What several simpg test files share: a bounded ``simpg.run``, a rank that never reaches a
collective, exact test values, and a runner for unittest-style test methods."""

from __future__ import annotations

import threading
import unittest
from typing import Any, Callable

import torch

import simpg

HANG_GUARD_S = 60.0  # far above every world timeout used in tests: only a real hang reaches it
# a deadlock or a failure must be reported within this, not hang until a CI timeout
FAST_S = 10.0


def run_bounded(fn: Callable[..., Any], world_size: int, *args: Any, **kwargs: Any) -> list[Any]:
    """``simpg.run(fn, world_size, ...)`` on a helper thread: its results, or what it raised;
    a ``TimeoutError`` saying "a hang" if it has not returned after ``HANG_GUARD_S``, so a
    hang fails one test instead of the whole suite."""
    box: dict[str, Any] = {}

    def call() -> None:
        try:
            box["result"] = simpg.run(fn, world_size, *args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - handed back to the test thread
            box["error"] = e

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(HANG_GUARD_S)
    if thread.is_alive():
        raise TimeoutError(f"simpg.run did not return within {HANG_GUARD_S:g}s (a hang)")
    if "error" in box:
        raise box["error"]
    return box["result"]


def spin_forever() -> None:
    """A rank busy outside any collective: only the world's timeout ends it."""
    while True:
        pass


def integer_valued(*shape: int, seed: int) -> torch.Tensor:
    """Integer-valued float64: sums and products are exact, so results compare with equal."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-9, 10, shape, generator=g).to(torch.float64)


def run_test_methods(cls: type[unittest.TestCase], *names: str) -> unittest.TestResult:
    """The methods in order, then the class's tearDownClass, as unittest runs a class."""
    result = unittest.TestResult()
    unittest.TestSuite([cls(name) for name in names]).run(result)
    return result
