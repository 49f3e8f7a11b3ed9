"""``run_subtests``: every combination of a parameter grid, in one world, all failures shown.

Note [one report for the whole world]
Every rank records the combinations it failed in its world (``World.subtest_failures``),
keyed by how many ``run_subtests`` calls the rank had made, so that the ranks of one call
share one list. Ranks meet at the end of each combination (the subtest gate), so after the
last one the list holds every rank's failures; each rank then raises the same merged report,
and whichever ``simpg.run`` re-raises, nothing is lost. A combination that failed on several
ranks with the same error is listed once with its ranks; a deadlock or mismatch in a
combination where a rank had already failed is listed after that failure as its consequence.
"""

from __future__ import annotations

import contextvars
import itertools
import os
import shlex
import sys
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from simpg.errors import RankFailedError, SimpgError, causes, own_failure
from simpg.frames import format_user_traceback, user_location
from simpg.world import rank_context

SELECT_ENV = "SIMPG_SUBTEST"  # run only the combination with this label (a rerun command)


class SubtestsFailed(AssertionError):
    """Some combinations of a ``run_subtests`` grid failed; the message lists each one, and
    ``failures`` holds them as ``SubtestFailure`` records (the same on every rank)."""

    world_wide = True  # simpg.run: one report for the whole world, not one rank's

    def __init__(self, message: str, failures: Sequence[SubtestFailure] = ()) -> None:
        super().__init__(message)
        self.failures = tuple(failures)


@dataclass(frozen=True)
class SubtestFailure:
    """One failing combination, as every rank reports it.

    ``ranks``: the ranks whose own code raised ``error_type`` (empty for a deadlock or a
    mismatch no rank caused); ``consequence``: a simpg diagnostic that followed a rank's own
    failure in the same combination.
    """

    index: int
    params: tuple[tuple[str, Any], ...]
    ranks: tuple[int, ...]
    error_type: str
    message: str
    traceback: str
    location: str | None
    consequence: bool = False

    @property
    def label(self) -> str:
        return _label(dict(self.params))

    def describe(self, world_size: int, rerun: str | None = None) -> str:
        if not self.ranks:
            where = f"failed on every rank of {world_size} (no rank to blame)"
        elif len(self.ranks) == 1:
            where = f"failed on rank {self.ranks[0]} of {world_size}"
        else:
            where = f"failed on ranks {list(self.ranks)} of {world_size}"
        if self.consequence:
            where = "then, as a consequence, " + where.replace("failed on", "stopped")
        at = f" at {self.location}" if self.location else ""
        body = self.traceback if self.ranks else f"{self.error_type}: {self.message}"
        text = f"[{self.label}] {where}{at}:\n" + _indent(body)
        return text + (f"\n  rerun just this: {rerun}" if rerun else "")


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def _label(combo: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in combo.items())


def rerun_command(label: str) -> str:
    """The command that reruns only the combination ``label`` of the current test."""
    test = os.environ.get("PYTEST_CURRENT_TEST")
    if test:  # "path::name (call)"
        node = test.rsplit(" (", 1)[0]
        return f"pytest {shlex.quote(node)} --subtest {shlex.quote(label)}"
    script = " ".join(shlex.quote(a) for a in sys.argv) or "python ..."
    return f"{SELECT_ENV}={shlex.quote(label)} {shlex.quote(sys.executable)} {script}"


# how many run_subtests calls this rank has made: each rank thread has its own context
_calls_made: contextvars.ContextVar[int] = contextvars.ContextVar("simpg_subtests", default=0)


@dataclass(frozen=True)
class _Seen:
    """One rank's failure of one combination, before merging."""

    index: int
    params: tuple[tuple[str, Any], ...]
    rank: int | None
    error: BaseException


def _merge(seen: list[_Seen]) -> list[SubtestFailure]:
    """One record per (combination, error), ranks gathered; a rank's own errors first."""
    merged: dict[tuple, list[int]] = {}
    first: dict[tuple, _Seen] = {}
    for s in seen:
        e = s.error
        key = (s.index, s.rank is None, type(e).__name__, str(e), user_location(e))
        merged.setdefault(key, [])
        if s.rank is not None:
            merged[key].append(s.rank)
        first.setdefault(key, s)
    # a rank's own failure makes the combination's deadlock or mismatch its consequence,
    # unless the rank raised it while unwinding from that very diagnostic
    failed_first = {s.index for s in seen if s.rank is not None
                    and not any(isinstance(c, SimpgError) for c in causes(s.error))}
    out = []
    for key in sorted(merged, key=lambda k: (k[0], k[1], sorted(merged[k]))):
        s = first[key]
        out.append(SubtestFailure(
            index=s.index, params=s.params, ranks=tuple(sorted(set(merged[key]))),
            error_type=key[2], message=key[3],
            traceback=format_user_traceback(s.error), location=key[4],
            consequence=key[1] and s.index in failed_first))
    return out


def report(failures: Sequence[SubtestFailure], total: int, world_size: int,
           title: str = "") -> SubtestsFailed:
    """The one ``SubtestsFailed`` for ``failures`` (Note [one report for the whole world])."""
    combos = len({f.index for f in failures})
    body = "\n\n".join(f.describe(world_size, None if f.consequence else rerun_command(f.label))
                       for f in failures)
    head = f"{title}: " if title else ""
    return SubtestsFailed(f"{head}{combos} failing subtest(s) of {total} on {world_size} "
                          f"simulated ranks:\n\n{body}", failures)


def _selected(labels: list[str]) -> set[int] | None:
    """Indices of the combinations to run: all (None) unless ``SIMPG_SUBTEST`` names one."""
    label = os.environ.get(SELECT_ENV)
    if not label:
        return None
    chosen = {i for i, text in enumerate(labels) if text == label}
    if not chosen:  # a stale rerun command must not pass by running nothing
        listed = "\n  ".join(labels[:20])
        raise ValueError(f"{SELECT_ENV}={label!r} matches no combination of this grid; its "
                         f"combinations are:\n  {listed}")
    return chosen


def run_subtests(grid: Mapping[str, Sequence[Any]], fn: Callable[..., Any], *args: Any,
                 _title: str = "", **kwargs: Any) -> None:
    """Call ``fn(*args, **combo, **kwargs)`` for every combination of ``grid`` on every rank.

    Call it on every rank of a ``simpg.run`` world (or a ``@pytest.mark.world`` test). A
    failure on any rank, a deadlock or a mismatch aborts only that combination: the ranks
    waiting in it are released, all ranks meet, and the next combination starts with fresh
    collective streams. At the end, if any failed, every rank raises the same
    ``SubtestsFailed`` listing each failing combination once, with its ranks, the user's
    line, and a command that reruns just it (``pytest NODE --subtest LABEL``, or the
    ``SIMPG_SUBTEST`` environment variable outside pytest).

    >>> import torch, torch.distributed as dist, simpg
    >>> def check(n, dtype):
    ...     t = torch.ones(n, dtype=dtype); dist.all_reduce(t)
    ...     assert t.sum().item() == 2 * n
    >>> simpg.run(run_subtests, 2, {"n": [1, 3], "dtype": [torch.int32, torch.float64]}, check)
    [None, None]
    """
    __tracebackhide__ = True  # pytest: the report, not this loop (shown with --full-trace)
    ctx = rank_context.get()
    if ctx is None:
        raise RuntimeError(
            "run_subtests must be called inside a simpg rank (simpg.run or a "
            "@pytest.mark.world test); if this is a @pytest.mark.world test, the simpg "
            "pytest plugin is not loaded: install this package (its pytest11 entry point "
            "loads it) or pass -p simpg.pytest_plugin")
    world, rank = ctx
    for key, values in grid.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise ValueError(
                f"grid[{key!r}] must be a non-empty sequence of values, got {values!r}")
    keys = list(grid)
    combos = [tuple(zip(keys, values)) for values in itertools.product(*grid.values())]
    wanted = _selected([_label(dict(c)) for c in combos])
    call = _calls_made.get()
    _calls_made.set(call + 1)
    seen: list[_Seen] = world.subtest_failures.setdefault(call, [])
    world.subtests_active = True
    try:
        for index, params in enumerate(combos):
            if wanted is not None and index not in wanted:
                continue
            try:
                fn(*args, **dict(params), **kwargs)
            except Exception as e:  # noqa: BLE001 - recorded, reported at the end
                world.fail(e, rank)  # aborts this subtest on every rank
                own = own_failure(e)
                if own is not e or not (isinstance(e, RankFailedError) or getattr(
                        e, "is_copy", False) or world.unblamed_abort() is e):
                    # recorded before the gate: the last rank through it may report at once
                    seen.append(_Seen(index, params, rank, own))
            aborted = world.end_subtest()
            if aborted is not None and aborted[1] is None and not any(
                    s.index == index and s.rank is None for s in seen):
                seen.append(_Seen(index, params, None, aborted[0]))  # deadlock or mismatch
    finally:
        world.subtests_active = False
    if seen:
        raise report(_merge(seen), len(combos), world.size, _title)
