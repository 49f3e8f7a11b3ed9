"""pytest wiring for the whole repository (see simpg.pytest_plugin)."""

import os

# tests run many tiny worlds: one intra-op thread per process keeps 2 cores for pytest -n auto
os.environ.setdefault("OMP_NUM_THREADS", "1")

pytest_plugins = ["simpg.pytest_plugin"]
