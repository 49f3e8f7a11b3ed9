"""Reading the expected-failure list and judging a run against it (strict both ways).

The list is data in ``opdb_tests/expected_failures.py``, written by
``.venv/bin/python -m opdb_tests.coverage --update-expected`` from what the base sweep saw:

- ``EXPECTED[(key, tier)]`` maps each *kind* of failure (``opdb_tests.causes``: the error
  type and the aten op that raised, ``wrong values``, ``no rule: OP``...) of a variant's
  tier to a reason taken from the first failing case (max error, message).
- ``NO_CASES[key]``: why a variant tries no case at all (its test is skipped with that).
- ``SKIP[key]``: a variant not run at all (nondeterminism only).

``judge`` turns a run's failures into the test's verdict: a failure of a tier not listed,
or of a kind not listed for that tier, fails the run (with reproducers); a listed tier
that passed, or a listed kind that no longer occurs, fails it too, so the list stays
exact. Regeneration rewrites every reason from today's failure; none is kept.

Listed tiers are judged on the base cases only: they are deterministic, so their kinds
can be regenerated exactly; hypothesis draws explore only unlisted tiers (a draw's kinds
could not be regenerated without the same draws).
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from opdb_tests.checks import GENERATION, TIERS, Failure
from opdb_tests.expected_failures import EXPECTED, NO_CASES

Expected = Mapping[tuple[str, str], Mapping[str, str]]
FILE = "opdb_tests/expected_failures.py"
REGENERATE = ".venv/bin/python -m opdb_tests.coverage --update-expected"
# ops whose outputs are uninitialized memory: no two runs (or replicas) agree on the values, so
# which kind of mismatch a run reports is itself random; they are listed in SKIP instead
UNINITIALIZED = {"empty_like": "aten.empty_like", "new_empty": "aten.new_empty",
                 "new_empty_strided": "aten.new_empty_strided"}


def expected(key: str, tier: str, table: Expected = EXPECTED) -> Mapping[str, str] | None:
    """The listed kinds of failure (kind -> reason) of a variant's tier, or None."""
    return table.get((key, tier))


def by_cause(failures: Sequence[Failure]) -> dict[str, list[Failure]]:
    out: dict[str, list[Failure]] = {}
    for f in failures:
        out.setdefault(f.cause, []).append(f)
    return out


def _reports(fs: Sequence[Failure], max_reports: int) -> str:
    shown = "\n".join(f.report() for f in fs[:max_reports])
    more = f"\n  ... and {len(fs) - max_reports} more" if len(fs) > max_reports else ""
    return shown + more


def judge(key: str, tiers_run: Iterable[str], failures: Sequence[Failure],
          max_reports: int = 3, table: Expected = EXPECTED, file: str = FILE,
          regenerate: str = REGENERATE) -> list[str]:
    """Problems with this run: failures of an unlisted tier or kind (with reproducers),
    listed tiers that passed and listed kinds that no longer occur. ``file`` and
    ``regenerate`` name the table's data module and the command that writes it (the
    compiled tiers keep theirs in ``expected_failures_compiled.py``)."""
    problems = []
    for tier in [*tiers_run, GENERATION]:
        mine = [f for f in failures if f.tier == tier]
        listed = expected(key, tier, table)
        seen = by_cause(mine)
        if mine and listed is None:
            problems.append(f"{key} fails the {tier} tier ({len(mine)} case(s), kinds "
                            f"{sorted(seen)}); not in {file}:\n{_reports(mine, max_reports)}")
        elif not mine and listed is not None:
            problems.append(f"{key} passes the {tier} tier, but {file} lists it (kinds "
                            f"{sorted(listed)}): remove the entry (or run {regenerate})")
        elif listed is not None:
            for cause in sorted(set(seen) - set(listed)):
                problems.append(f"{key} fails the {tier} tier with a kind of failure not listed "
                                f"for it: {cause!r} (listed: {sorted(listed)}); fix it or, if "
                                f"it is expected, run {regenerate}:\n"
                                f"{_reports(seen[cause], max_reports)}")
            gone = sorted(set(listed) - set(seen))
            if gone:
                problems.append(f"{key} no longer fails the {tier} tier with {gone} (it still "
                                f"fails with {sorted(seen)}): run {regenerate}")
    return problems


def judge_no_cases(key: str, cases: int, reason: str,
                   table: Mapping[str, str] = NO_CASES) -> str | None:
    """A variant that tried no case must be listed in NO_CASES, and only such a variant."""
    if cases == 0 and key not in table:
        return (f"{key} tried no case at all ({reason}); if that is expected, list it in "
                f"NO_CASES of {FILE} (run {REGENERATE})")
    if cases and key in table:
        return (f"{key} is listed in NO_CASES of {FILE} ({table[key]!r}) but ran {cases} "
                f"case(s): remove the entry (or run {REGENERATE})")
    return None


# -- generating the list -----------------------------------------------------------------------

def reasons(failures: Sequence[Failure], limit: int = 220) -> dict[str, str]:
    """kind -> the reason of its first failing case (for the generation tier, the
    traceback's last line: the whole one is in the test's report)."""
    out = {}
    for cause, fs in by_cause(failures).items():
        f = fs[0]
        text = f.reason.strip().rsplit("\n", 1)[-1] if f.tier == GENERATION else f.reason
        out[cause] = f"{f.label}: {text}"[:limit]
    return out


def expected_lines(expected_map: Expected) -> list[str]:
    """The ``EXPECTED = {...}`` block of a generated list, grouped by the category of each
    entry's kinds (the op-database list and the compiled tiers' list alike)."""
    from opdb_tests.causes import category

    lines = ["EXPECTED: dict[tuple[str, str], dict[str, str]] = {"]
    groups: dict[str, list[tuple[str, str]]] = {}
    for kt, kinds in expected_map.items():
        groups.setdefault(", ".join(sorted({category(c) for c in kinds})), []).append(kt)
    for group in sorted(groups):
        lines.append(f"    # -- {group}")
        for kt in sorted(groups[group]):
            kinds = expected_map[kt]
            lines.append(f"    {kt!r}: {{")
            lines += [f"        {c!r}: {kinds[c]!r}," for c in sorted(kinds)]
            lines.append("    },")
    return lines + ["}"]


def render(expected_map: Expected, skip: Mapping[str, str], no_cases: Mapping[str, str],
           exploration: Mapping[tuple[str, str], str] | None = None) -> str:
    """The text of expected_failures.py, grouped by the category of each entry's kinds."""
    lines = ['"""Expected failures of the op-database tests, generated from the base sweep by',
             f"``{REGENERATE}``: every reason is today's.",
             "",
             "EXPECTED: per (OpInfo variant, tier), each kind of failure -> the first failing",
             "case's reason. Strict: a new kind, a vanished kind or a passing tier fails the",
             "test. Tiers: " + ", ".join(TIERS) + f", and {GENERATION} (the generator raises).",
             "NO_CASES: variants that try no case, and why (their tests are skipped).",
             "SKIP: variants not run (nondeterminism only).",
             '"""', "", "SKIP: dict[str, str] = {",
             "    # nondeterministic only: no two runs agree on the values"]
    lines += [f"    {k!r}: {skip[k]!r}," for k in sorted(skip)]
    lines += ["}", "", "NO_CASES: dict[str, str] = {"]
    lines += [f"    {k!r}: {no_cases[k]!r}," for k in sorted(no_cases)]
    lines += ["}", ""] + expected_lines(expected_map)
    lines += ["", "# (variant, tier): the base cases pass, but hypothesis draws find failures (the",
              "# reason names one). The default tier does not explore these tiers; the slow tier",
              "# does, strictly: a listed tier whose exploration passes fails the run.",
              "EXPLORATION: dict[tuple[str, str], str] = {"]
    for kt in sorted(exploration or {}):
        lines.append(f"    {kt!r}: {(exploration or {})[kt]!r},")
    lines.append("}")
    return "\n".join(lines) + "\n"
