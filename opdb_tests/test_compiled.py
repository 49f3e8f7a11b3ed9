"""The compiled and dynamic-shape tiers (opdb_tests/compiled.py: compiled,
compiled_backward, resized, dynamic): OpInfos run on DTensors under ``torch.compile`` in
simpg worlds, values checked against one device, judged against
``expected_failures_compiled.py`` strictly both ways (``expectations.judge``).

The default run takes ``DEFAULT_SLICE``; ``-m slow`` takes every variant whose verdicts
the list records (its ``SWEPT``). ``OPDB_COMPILE_BACKEND=inductor`` runs them on inductor,
as tiers ``compiled@inductor``..., which the list does not record yet: every failure there
is reported as unlisted.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from typing import Any

import pytest
import torch

from opdb_tests import causes, compiled, expectations
from opdb_tests.cases import entries, entry
from opdb_tests.fakes import changed_entry
from opdb_tests.expected_failures import SKIP
from opdb_tests.expected_failures_compiled import EXPECTED, SWEPT

# torch's own warnings (op_db samples; while compiling, inductor's torch.jit.script_method;
# dynamo reading .grad of a non-leaf), not ours
pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated"
                               ":DeprecationWarning"),
]

# cheap variants for the default run, whose compiled tiers pass (elementwise, reductions, a
# view): under QUICK 2 to 8 s each; the file's default tests take about 21 s on 2 cores
DEFAULT_SLICE = ("neg", "abs", "exp", "mul", "sub", "sum", "mean", "t", "clone",
                 "nn.functional.relu")


def _config(base: compiled.Config) -> compiled.Config:
    # read at call time: a test-run switch, like HYPOTHESIS_PROFILE
    return dataclasses.replace(base, backend=os.environ.get("OPDB_COMPILE_BACKEND",
                                                            compiled.DEFAULT_BACKEND))


def _check(key: str, cfg: compiled.Config) -> None:
    if key in SKIP:
        pytest.skip(SKIP[key])
    r = compiled.run_entry(entry(key), _config(cfg))
    if r.generation_error:
        pytest.skip(f"sample generation raises (test_opdb judges it): {r.generation_error}")
    problems = compiled.judge(r)
    no_case = expectations.judge_no_cases(key, sum(r.cases.values()), r.no_cases)
    problems += [no_case] if no_case else []
    assert not problems, "\n\n".join(problems)
    if not r.tiers:
        pytest.skip(f"no cases: {r.no_cases}")


@pytest.mark.parametrize("key", DEFAULT_SLICE)
def test_compiled(key: str) -> None:
    """compiled.QUICK: forward on mesh (2,), and the dynamic tier."""
    _check(key, compiled.QUICK)


@pytest.mark.slow
@pytest.mark.parametrize("key", list(SWEPT))
def test_compiled_exhaustive(key: str) -> None:
    """compiled.BASE, the cases the list was generated from."""
    _check(key, compiled.BASE)


def test_the_list_names_real_variants_and_tiers_and_covers_the_slice() -> None:
    known = {e.key for e in entries()}
    bad = [kt for kt in EXPECTED if kt[0] not in SWEPT or kt[1] not in compiled.TIERS]
    bad += [k for k in SWEPT if k not in known]
    assert not bad, f"expected_failures_compiled.py names unknown or unswept pairs: {bad}"
    empty = [kt for kt, kinds in EXPECTED.items()
             if not kinds or any(not c.strip() or not why.strip() for c, why in kinds.items())]
    assert not empty, f"entries without a kind of failure or a reason: {empty}"
    missing = [k for k in DEFAULT_SLICE if k not in SWEPT]
    assert not missing, f"the default slice has variants with no recorded verdict: {missing}"
    # QUICK runs a subset of the compiled cases: judged against the list only where it lists
    # no kind there (none can vanish from the subset)
    listed = [kt for kt in EXPECTED if kt[0] in DEFAULT_SLICE and kt[1] != "dynamic"]
    assert not listed, f"the default slice runs a subset of these listed tiers: {listed}"


# -- the tiers check values, and a compile that cannot run whole fails ----------------------------


def _off_by_one(gm: torch.fx.GraphModule, _inputs: Any) -> Any:
    """A backend whose graphs return every output plus one."""
    def run(*args: Any) -> Any:
        out = gm(*args)
        return type(out)(o + 1 for o in out) if isinstance(out, (tuple, list)) else out + 1

    return run


_ONE_MESH = dict(meshes=((2,),), backward=False, resized=False, dynamic=False)


def test_a_wrong_compiled_result_is_a_wrong_values_failure_with_its_reproducer() -> None:
    r = compiled.run_entry(entry("add"), compiled.Config(backend=_off_by_one, **_ONE_MESH))
    assert r.tiers == ["compiled@_off_by_one"] and r.failures
    assert {f.cause for f in r.failures} == {causes.WRONG_VALUES}
    problems = compiled.judge(r, table={})
    assert "not in opdb_tests/expected_failures_compiled.py" in problems[0]
    assert ".venv/bin/python -m opdb_tests.compiled add --tier compiled --backend " \
           "_off_by_one --sample 0 --mesh 2 --placements" in problems[0]


def _add_with_a_graph_break(*args: Any, **kwargs: Any) -> Any:
    torch._dynamo.graph_break()
    return torch.add(*args, **kwargs)


def test_a_graph_break_fails_the_compiled_tier_instead_of_running_eagerly() -> None:
    real = entry("add")
    fake = changed_entry(real, op=_add_with_a_graph_break)
    r = compiled.run_entry(fake, compiled.Config(**_ONE_MESH))
    assert r.failures and {f.cause for f in r.failures} == {"Unsupported outside dispatch"}
    assert all(f.tier == "compiled" for f in r.failures)


def test_a_listed_kind_that_no_longer_occurs_fails() -> None:
    r = compiled.run_entry(entry("add"), compiled.Config(**_ONE_MESH))
    assert r.failures == []
    table = {("add", "compiled"): {causes.WRONG_VALUES: "listed by this test"}}
    assert "passes the compiled tier, but opdb_tests/expected_failures_compiled.py lists it" \
        in compiled.judge(r, table=table)[0]


def _first_answer_only() -> Any:
    """A backend whose compiled code, on each rank, returns that rank's first answer: a
    stale graph, as one of the first size would be if it answered for the second."""
    answers: dict[int, Any] = {}

    def first_answer_only(gm: torch.fx.GraphModule, _inputs: Any) -> Any:
        return lambda *args: answers.setdefault(threading.get_ident(), gm(*args))

    return first_answer_only


def test_a_graph_of_the_first_size_answering_for_the_second_fails_the_resized_tier() -> None:
    cfg = compiled.Config(backend=_first_answer_only(), meshes=((2,),), backward=False,
                          dynamic=False)
    r = compiled.run_entry(entry("add"), cfg)
    resized = [f for f in r.failures if f.tier == "resized@first_answer_only"]
    # every case of the second size fails: another shape, or another placement, than its own
    assert len(resized) == r.cases["resized@first_answer_only"] > 0
    assert causes.WRONG_META in {f.cause for f in resized}
