"""pytest wiring for the whole repository: hypothesis profiles (simpg's world marker comes
from its pytest11 entry point, as in any project that installs this package)."""

import os

import pytest
from hypothesis import HealthCheck, Verbosity, settings

# the shared test helpers assert too: their failures show values, as a test's own asserts do
pytest.register_assert_rewrite("tests.support")

# torch.testing._internal.common_utils (imported by op_db) registers its own "dev"/"debug"
# profiles and loads one on import: 10 or 50 draws with every phase, shrinking and the
# tracing explain phase included, which made opdb explorations spin for minutes mid-run.
# Import it first, so that the profiles below are the ones that stay loaded.
import torch.testing._internal.common_utils  # noqa: F401,E402

# tests run many tiny worlds: one intra-op thread per process keeps 2 cores for pytest -n auto
os.environ.setdefault("OMP_NUM_THREADS", "1")

# HYPOTHESIS_PROFILE=dev|debug|ci (default ci): fixed budgets, no deadlines (2-core CI).
settings.register_profile("ci", deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None, max_examples=200)
settings.register_profile("debug", deadline=None, max_examples=10, verbosity=Verbosity.verbose)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
