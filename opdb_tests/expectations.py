"""Reading the expected-failure list and judging a run against it (strict both ways).

The list itself is data in ``opdb_tests/expected_failures.py``: ``EXPECTED[(key, tier)]`` is
the reason an OpInfo variant fails a tier, ``SKIP[key]`` the reason one is not run at all
(nondeterminism only). ``judge`` turns a run's failures into the test's verdict: a failure
not listed fails the run (with reproducers); a listed one that passed fails it too, so the
list only shrinks.
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

from opdb_tests.checks import TIERS, Failure
from opdb_tests.expected_failures import EXPECTED


def expected(key: str, tier: str) -> str | None:
    return EXPECTED.get((key, tier))


def judge(key: str, tiers_run: Iterable[str], failures: Sequence[Failure],
          max_reports: int = 3) -> list[str]:
    """Problems with this run: unexpected failures (with reproducers) and unexpected passes."""
    problems = []
    for tier in tiers_run:
        mine = [f for f in failures if f.tier == tier]
        listed = expected(key, tier)
        if mine and listed is None:
            shown = "\n".join(f.report() for f in mine[:max_reports])
            more = f"\n  ... and {len(mine) - max_reports} more" if len(mine) > max_reports else ""
            problems.append(f"{key} fails the {tier} tier ({len(mine)} case(s)); not in "
                            f"opdb_tests/expected_failures.py:\n{shown}{more}")
        if not mine and listed is not None:
            problems.append(f"{key} passes the {tier} tier, but opdb_tests/expected_failures.py "
                            f"lists it ({listed!r}): remove the entry (or run "
                            f".venv/bin/python -m opdb_tests.coverage --update-expected)")
    return problems


# -- generating reasons ------------------------------------------------------------------------

def classify(failures: Sequence[Failure]) -> str:
    """A true, grouped reason for a tier's failures, from the first failure's message."""
    reasons = [f.reason for f in failures]
    no_rule = sorted({m for r in reasons for m in re.findall(r"(aten\.[\w.]+) has no sharding "
                                                             r"rule", r)}
                     | {m for r in reasons for m in re.findall(r"no sharding rule for "
                                                               r"(aten\.[\w.]+)", r)})
    if no_rule:
        return f"no rule yet (replicate fallback): {', '.join(no_rule[:4])}"
    first = reasons[0]
    tier = failures[0].tier
    if "soundness harness" in first or "disagrees with another replica" in first:
        return "harness limitation: " + first[:150]
    if "not differentiable with respect to argument" in first:
        return ("harness limitation: the backward tier sets requires_grad on every float "
                "input; the op rejects it: " + first[:100])
    if tier == "sound":
        m = re.match(r"(aten\.\S+) strategy (.*?): (.*)", first)
        if m and "rule raises" not in first:
            return f"rule returns unsound strategy {m.group(2)}: {m.group(3)[:120]}"
        return first[:160]
    if "the rule predicted" in first:
        return "output placement differs from the rule's prediction: " + first[:120]
    if "values differ" in first or "got (" in first:
        return "wrong values end to end: " + first[:140]
    return first[:160]


def render(expected_map: dict[tuple[str, str], str], skip: dict[str, str],
           exploration: dict[tuple[str, str], str] | None = None) -> str:
    """The text of expected_failures.py, grouped by reason."""
    lines = ['"""Expected failures of the op-database tests: one entry per (OpInfo variant, tier),',
             "each with its reason; strict (an unexpected pass fails the run, so this only",
             "shrinks). Tiers: " + ", ".join(TIERS) + ". Regenerate the list after a change with",
             "``.venv/bin/python -m opdb_tests.coverage --update-expected`` (kept reasons stay).",
             '"""', "", "SKIP: dict[str, str] = {",
             "    # nondeterministic only: the op draws random numbers",]
    for k in sorted(skip):
        lines.append(f"    {k!r}: {skip[k]!r},")
    lines += ["}", "", "EXPECTED: dict[tuple[str, str], str] = {"]
    by_reason: dict[str, list[tuple[str, str]]] = {}
    for kt, r in expected_map.items():
        by_reason.setdefault(_group(r), []).append(kt)
    for group in sorted(by_reason):
        lines.append(f"    # -- {group}")
        for kt in sorted(by_reason[group]):
            lines.append(f"    {kt!r}: {expected_map[kt]!r},")
    lines.append("}")
    lines += ["", "# (variant, tier): the base cases pass, but hypothesis draws find failures (the",
              "# reason names one). The default tier does not explore these tiers; the slow tier",
              "# does, strictly: a listed tier whose exploration passes fails the run.",
              "EXPLORATION: dict[tuple[str, str], str] = {"]
    for kt in sorted(exploration or {}):
        lines.append(f"    {kt!r}: {(exploration or {})[kt]!r},")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _group(reason: str) -> str:
    return reason.split(":")[0][:70]
