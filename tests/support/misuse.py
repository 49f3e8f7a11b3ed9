"""The tally a misuse catalogue prints when run as a module (``python -m
tests.test_misuse_dtensor``): every misuse that does not get a clear error, by name, then
the count of each outcome."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

OUTCOMES = ("clear error", "wrong error", "hang", "silent")


def print_tally(outcomes: Mapping[str, str]) -> None:
    """``outcomes``: each misuse's name and which of ``OUTCOMES`` it met."""
    for name, outcome in outcomes.items():
        if outcome != "clear error":
            print(f"{name}: {outcome}")
    tally = Counter(outcomes.values())
    print(f"{len(outcomes)} misuses: " + ", ".join(f"{k} {tally.get(k, 0)}" for k in OUTCOMES))
