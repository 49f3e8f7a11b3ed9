"""The op-database tests' green means what it says: a listed tier failing in another way
fails, a variant that tries no case is not passed, a raising sample generator is a failure
with its traceback. Fake expectation tables are passed in, never patched over the real one.
"""

from __future__ import annotations

from typing import Any

import pytest

from opdb_tests import causes, expectations, sweep
from opdb_tests.cases import entry
from opdb_tests.checks import GENERATION, Failure
from opdb_tests.expected_failures import EXPECTED, NO_CASES
from opdb_tests.fakes import changed_entry
from opdb_tests.test_opdb import _check, run_and_judge

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _failure(cause: str, tier: str = "forward", key: str = "add") -> Failure:
    return Failure(tier, key, 0, "(T(2,):float32)", (2,), None, f"reason of {cause}", "R",
                   f"{key}[R]@mesh(2)", cause)


# -- kinds of failure ----------------------------------------------------------------------


def test_a_listed_tier_failing_with_its_listed_kinds_is_green() -> None:
    table = {("add", "forward"): {"no rule: aten.add.Tensor": "x"}}
    assert expectations.judge("add", ["forward"], [_failure("no rule: aten.add.Tensor")],
                              table=table) == []


def test_a_listed_tier_failing_with_another_kind_fails_with_the_reproducer() -> None:
    table = {("add", "forward"): {"no rule: aten.add.Tensor": "x"}}
    problems = expectations.judge("add", ["forward"], [_failure(causes.WRONG_VALUES)],
                                  table=table)
    text = "\n".join(problems)
    assert "kind of failure not listed" in text and "'wrong values'" in text
    assert ".venv/bin/python -m opdb_tests.repro forward add --sample 0 --mesh 2" in text
    assert "no longer fails the forward tier with ['no rule: aten.add.Tensor']" in text


def test_unlisted_failures_and_listed_passes_fail() -> None:
    assert expectations.judge("add", ["forward"], [_failure("wrong values")], table={})
    table = {("add", "backward"): {"wrong gradient": "x"}}
    assert "passes the backward tier" in expectations.judge("add", ["backward"], [],
                                                            table=table)[0]


def test_a_real_listed_failure_of_another_kind_is_caught() -> None:
    """A real sweep of a variant listed today, judged against its real entry (green) and
    against a fake one listing another kind (red, with the reproducer)."""
    key, tier = next((k, t) for (k, t), kinds in sorted(EXPECTED.items())
                     if t == "forward" and any(c.startswith("no rule") for c in kinds))
    r = sweep.sweep_entry(entry(key))
    assert expectations.judge(key, [tier], r.failures) == []
    fake = {(key, tier): {causes.WRONG_VALUES: "listed by this test"}}
    problems = expectations.judge(key, [tier], r.failures, table=fake)
    assert any("kind of failure not listed" in p and f"opdb_tests.repro {tier} {key}" in p
               for p in problems), problems


def test_causes_name_the_error_and_the_aten_op_that_raised() -> None:
    import torch

    def dispatch_like(func: Any) -> None:  # a frame local `func`, as in dtensor.dispatch
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError) as info:
        dispatch_like(torch.ops.aten.mm.default)
    assert causes.of_exception(info.value) == "RuntimeError in aten.mm.default"
    assert causes.of_exception(KeyError("k")) == "KeyError outside dispatch"
    assert causes.category("RuntimeError in aten.mm.default") == "RuntimeError (raised in an op)"
    assert causes.category("no rule: aten.rsub.Tensor") == "no rule"


# -- variants with no case -----------------------------------------------------------------


def test_a_variant_with_no_case_is_skipped_with_its_listed_reason_not_passed() -> None:
    assert "arange" in NO_CASES, "arange (a factory) is expected to try no case"
    r, problems = run_and_judge(entry("arange"), sweep.BASE)
    assert r.cases == 0 and "factory" in r.no_cases and problems == []
    with pytest.raises(pytest.skip.Exception, match="no cases: .*factory"):
        _check("arange", sweep.BASE, ci_budget=1, n_samples=1)


def test_an_unlisted_no_case_variant_and_a_stale_listing_fail() -> None:
    assert "tried no case at all" in expectations.judge_no_cases("arange", 0, "why", table={})
    assert "but ran 3 case(s)" in expectations.judge_no_cases("add", 3, "", table={"add": "x"})
    assert expectations.judge_no_cases("add", 3, "", table={}) is None


# -- sample generation errors --------------------------------------------------------------


def _broken_generator(op: Any, device: str, dtype: Any, requires_grad: bool, **kw: Any) -> Any:
    yield from ()
    raise ValueError("this generator is broken on purpose")


def test_a_raising_sample_generator_is_a_failure_with_its_traceback() -> None:
    real = entry("add")
    fake = changed_entry(real, "add.broken", sample_inputs_func=_broken_generator)
    r = sweep.sweep_entry(fake)
    assert r.failed(GENERATION) and r.no_cases == "", "a raising generator is not 'no samples'"
    f = r.failures[0]
    assert f.cause == "sample generation raises ValueError"
    assert "Traceback" in f.reason and "_broken_generator" in f.reason
    problems = expectations.judge(fake.key, [], r.failures, table={})
    assert problems and "_broken_generator" in problems[0]
    assert ".venv/bin/python -m opdb_tests.repro samples add.broken" in problems[0]
