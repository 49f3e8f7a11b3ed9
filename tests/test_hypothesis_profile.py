"""The hypothesis profile conftest.py loads is the one every test runs under.

torch.testing._internal.common_utils loads its own profile when imported (op_db imports
it); it once switched every later test of a worker to 10 draws with shrinking and the
tracing explain phase, and opdb explorations spun for minutes."""

import importlib
import os

from hypothesis import settings


def test_profile_is_ours_after_torch_testing_imports() -> None:
    importlib.import_module("torch.testing._internal.common_utils")
    importlib.import_module("torch.testing._internal.common_methods_invocations")
    expected = os.environ.get("HYPOTHESIS_PROFILE", "ci")
    assert settings.get_current_profile_name() == expected
    if expected == "ci":
        assert settings.default.derandomize
        assert settings.default.max_examples == settings.get_profile("ci").max_examples
