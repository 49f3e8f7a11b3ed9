"""Every OpInfo of torch's op_db against our sharding rules and runtime.

One test per OpInfo variant (``test_op[add]``): the fixed base cases (``sweep.BASE``: the
first sample, soundness of every strategy on meshes (3,) and (2, 2), end to end forward and
backward on (2,) and (2, 2) in one simpg world each), then hypothesis draws further meshes
(1-D and 2-D, 1 to 8 ranks), samples and placements for every tensor argument. Failures
are judged against ``expected_failures.py`` by kind (strict both ways) and print a
reproducer. A variant that tries no case is skipped with its listed reason (NO_CASES), an
unlisted one fails; a sample generator that raises fails with its traceback.

The exhaustive sweep (every sample, five meshes per tier, more draws) is ``-m slow``.
"""

from __future__ import annotations

import pytest
from hypothesis import Phase, given, seed, settings
from hypothesis import strategies as st

from opdb_tests.readme_figures import README
from opdb_tests import cases, coverage, coverage_readme, expectations, sweep
from opdb_tests.cases import (MESHES, Entry, aten_call, entries, one_partial_family,
                              placement_options, samples, size)
from opdb_tests.checks import GENERATION, TIERS, Failure, soundness
from opdb_tests.expected_failures import EXPECTED, EXPLORATION, NO_CASES, SKIP

KEYS = [e.key for e in entries()]

# op_db samples trigger torch's own warnings (degrees of freedom <= 0, deprecated
# reductions...): the reference run raises them too, they say nothing about sharding
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _budget(ci: int) -> int:
    """Hypothesis draws per OpInfo: a fixed ``ci`` budget in the ci profile, else the
    profile's own ``max_examples`` (dev: 200, debug: 10)."""
    if settings.get_current_profile_name() == "ci":
        return ci
    return settings.default.max_examples


def _explore(e: Entry, r: sweep.Result, tiers: set[str], n_samples: int, budget: int) -> None:
    """Draw meshes, samples and placements; raise (with reproducers) on the first failure of a
    tier not expected to fail, so that hypothesis shrinks it."""
    ss = samples(e, n_samples)
    if not ss or not tiers or budget == 0:
        return

    # the ci profile keeps to 2-core CI's budget: soundness draws only (threadless; end to end
    # forward and backward run on the base cases, and draws explore them in the slow tier),
    # meshes of up to 4 ranks, and a failing draw reported as found (shrinking costs minutes)
    ci = settings.get_current_profile_name() == "ci"
    # never the explain phase: it traces every line (sys.settrace) through torch's Python code
    phases = ((Phase.explicit, Phase.reuse, Phase.generate) if ci
              else tuple(p for p in Phase if p is not Phase.explain))
    meshes = [m for m in MESHES if size(m) <= 4] if ci else list(MESHES)
    if ci:
        tiers = tiers & {"sound"}
    if not tiers:
        return

    @settings(max_examples=budget, database=None, phases=phases)
    @given(st.data())
    def draw(data: st.DataObject) -> None:
        s = data.draw(st.sampled_from(ss), label="sample")
        mesh = data.draw(st.sampled_from(meshes), label="mesh")
        placements = tuple(
            one_partial_family(tuple(
                data.draw(st.sampled_from(placement_options(t)), label=f"tensor {i}")
                for _ in mesh))
            for i, t in enumerate(s.tensors()))
        call = aten_call(e, s)
        failures: list[Failure] = []
        if "sound" in tiers and call is not None:
            failures += soundness(e, s, call, mesh)[0]
        e2e = [t for t in ("forward", "backward", "inference") if t in tiers]
        failures += [f for f in sweep.run_world(mesh, [(e, s, call, placements, t) for t in e2e])
                     if f is not None]
        if failures:
            raise AssertionError("\n".join(f.report() for f in failures[:3]))

    if settings.default.derandomize:
        draw = seed(_derandomized_seed(draw.hypothesis.inner_test))(draw)
    # hypothesis digests the source again for a database key, unused: database=None
    draw._hypothesis_internal_database_key = None  # type: ignore[attr-defined]
    draw()


_DERANDOMIZED_SEED: list[int] = []  # computed once: every ``draw`` has the same source


def _derandomized_seed(test: object) -> int:
    """The seed hypothesis's ``derandomize`` gives ``test``: an int of its source's digest.
    Every ``draw`` closure has the same source, so the seed is the same for all, yet
    hypothesis reads the source again for each (inspect and tokenize: with the database key
    below, 10% of the default op tier's time). Given once as ``@seed``, hypothesis uses it as
    is: the same draws."""
    if not _DERANDOMIZED_SEED:
        from hypothesis.internal.reflection import function_digest

        _DERANDOMIZED_SEED.append(int.from_bytes(function_digest(test), "big"))
    return _DERANDOMIZED_SEED[0]


def _tiers(r: sweep.Result) -> list[str]:
    tiers = ["sound"] if r.rule_level and not r.random else []
    return tiers + ["forward"] + (["backward"] if r.backward else []) + ["inference"]


def run_and_judge(e: Entry, cfg: sweep.Config) -> tuple[sweep.Result, list[str]]:
    """The base sweep of one entry and its verdict: no case at all is skipped with the
    reason NO_CASES lists for it (unlisted: a problem), failures are judged by kind."""
    r = sweep.sweep_entry(e, cfg)
    problems = expectations.judge(e.key, _tiers(r) if r.cases else [], r.failures)
    if not r.failed(GENERATION):
        no_case = expectations.judge_no_cases(e.key, r.cases, r.no_cases)
        problems += [no_case] if no_case else []
    return r, problems


def _check(key: str, cfg: sweep.Config, ci_budget: int, n_samples: int,
           explore_listed: bool = False) -> None:
    if key in SKIP:
        pytest.skip(SKIP[key])
    e = cases.entry(key)
    r, problems = run_and_judge(e, cfg)
    assert not problems, "\n\n".join(problems)
    if r.cases == 0:
        pytest.skip(f"no cases: {NO_CASES[key]}")
    tiers = _tiers(r)
    clean = {t for t in tiers if expectations.expected(key, t) is None}
    listed = {t for t in clean if (key, t) in EXPLORATION}
    if not explore_listed:
        _explore(e, r, clean - listed, n_samples, _budget(ci_budget))
        return
    _explore(e, r, clean - listed, n_samples, _budget(ci_budget))
    for t in sorted(listed):  # strict: a listed exploration failure that no longer fails
        try:
            _explore(e, r, {t}, n_samples, _budget(ci_budget))
        except AssertionError:
            continue
        raise AssertionError(f"({key!r}, {t!r}) is listed in EXPLORATION of "
                             "opdb_tests/expected_failures.py but its exploration passed: "
                             "remove the entry")


@pytest.mark.parametrize("key", KEYS)
def test_op(key: str) -> None:
    _check(key, sweep.BASE, ci_budget=1, n_samples=3)


@pytest.mark.slow
@pytest.mark.parametrize("key", KEYS)
def test_op_exhaustive(key: str) -> None:
    _check(key, sweep.EXHAUSTIVE, ci_budget=25, n_samples=None,  # type: ignore[arg-type]
           explore_listed=True)


def test_expected_failures_name_real_variants_and_tiers() -> None:
    known = set(KEYS)
    bad = [kt for kt in EXPECTED if kt[0] not in known or kt[1] not in TIERS]
    bad += [(k, "skip") for k in SKIP if k not in known]
    bad += [kt for kt in EXPECTED if kt[0] not in known or kt[1] not in (*TIERS, GENERATION)]
    bad += [(k, "no cases") for k in NO_CASES if k not in known or k in SKIP]
    bad += [kt for kt in EXPLORATION if kt[0] not in known or kt[1] not in TIERS or kt in EXPECTED]
    assert not bad, f"expected_failures.py names unknown (variant, tier) pairs: {bad}"
    empty = [kt for kt, kinds in EXPECTED.items()
             if not kinds or any(not c.strip() or not why.strip() for c, why in kinds.items())]
    empty += [k for k, why in NO_CASES.items() if not why.strip()]
    assert not empty, f"entries without a kind of failure or a reason: {empty}"


def test_coverage_matrix_is_fresh() -> None:
    """The checked-in matrix records a hash of everything that determines it (dtensor/ and
    the opdb_tests engine sources, the torch version); any change to their code makes it stale."""
    recorded = coverage.recorded_hash()
    assert recorded == coverage.inputs_hash(), (
        "opdb_tests/coverage_matrix.txt is stale (dtensor/ or the opdb_tests engine changed "
        "since it was written): run  .venv/bin/python -m opdb_tests.coverage  and commit the "
        "matrix, COVERAGE.md and coverage.png")


def test_matrix_hash_ignores_docs_and_comments_but_not_code() -> None:
    before = 'def f(x):\n    return x + 1\n'
    documented = '"""Module doc."""\ndef f(x):  # why\n    """Doc."""\n\n    return x + 1\n'
    assert coverage._code_only(before) == coverage._code_only(documented)
    assert coverage._code_only(before) != coverage._code_only(before.replace("1", "2"))
    assert coverage._code_only('def f():\n    """Only a doc."""\n') \
        != coverage._code_only('def f():\n    return "Only a doc."\n')


def test_readme_coverage_figures_match_coverage_md() -> None:
    """The README's block is what opdb_tests.coverage wrote with COVERAGE.md."""
    problem = coverage_readme.drift(README.read_text(), coverage.MARKDOWN.read_text())
    assert problem is None, problem
