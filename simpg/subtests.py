"""``run_subtests``: every combination of a parameter grid, in one world, all failures shown."""

from __future__ import annotations

import itertools
import traceback
from typing import Any, Callable, Mapping, Sequence

from simpg.backend import rank_context
from simpg.errors import SimpgError


class SubtestsFailed(AssertionError):
    """Some combinations of a ``run_subtests`` grid failed; the message lists each one."""


def _label(combo: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in combo.items())


def run_subtests(grid: Mapping[str, Sequence[Any]], fn: Callable[..., Any], *args: Any,
                 **kwargs: Any) -> None:
    """Call ``fn(*args, **combo, **kwargs)`` for every combination of ``grid`` on every rank.

    Call it on every rank of a ``simpg.run`` world (or a ``@pytest.mark.world`` test). A
    failure on any rank, a deadlock or a mismatch aborts only that combination: the ranks
    waiting in it are released, all ranks meet, and the next combination starts with fresh
    collective streams. At the end, if any failed, every rank raises ``SubtestsFailed``
    listing each failing combination with the rank and error that caused it.

    >>> import torch, torch.distributed as dist, simpg
    >>> def check(n, dtype):
    ...     t = torch.ones(n, dtype=dtype); dist.all_reduce(t)
    ...     assert t.sum().item() == 2 * n
    >>> simpg.run(run_subtests, 2, {"n": [1, 3], "dtype": [torch.int32, torch.float64]}, check)
    [None, None]
    """
    ctx = rank_context.get()
    if ctx is None:
        raise RuntimeError("run_subtests must be called inside a simpg rank (simpg.run or "
                           "@pytest.mark.world)")
    world, rank = ctx
    for key, values in grid.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise ValueError(
                f"grid[{key!r}] must be a non-empty sequence of values, got {values!r}")
    keys = list(grid)
    world.subtests_active = True
    failures: list[str] = []
    try:
        for values in itertools.product(*(grid[k] for k in keys)):
            combo = dict(zip(keys, values))
            try:
                fn(*args, **combo, **kwargs)
            except Exception as e:  # noqa: BLE001 - recorded, reported at the end
                world.fail(e, rank)  # aborts this subtest on every rank
                if not isinstance(e, SimpgError):
                    tb = "".join(traceback.format_exception(e, limit=-3)).rstrip()
                    failures.append(f"[{_label(combo)}] failed on rank {rank}:\n{tb}")
            aborted = world.end_subtest()
            if aborted is not None and aborted[1] is None:  # deadlock or mismatch: no rank to blame
                failures.append(f"[{_label(combo)}] {type(aborted[0]).__name__}: {aborted[0]}")
    finally:
        world.subtests_active = False
    if failures:
        raise SubtestsFailed(f"{len(failures)} failure(s) seen from rank {rank}:\n\n"
                             + "\n\n".join(failures))
