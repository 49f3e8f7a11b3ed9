"""``simpg.run``: a function on N simulated ranks, each with torch.distributed initialised."""

from __future__ import annotations

import contextvars
import ctypes
import os
import sys
import threading
import time
from typing import Any, Callable, Sequence, TypeVar

import torch
import torch.distributed as dist

from simpg.c10d_state import RankC10dState, current_state
from simpg.errors import RankAbandoned, SimpgError, own_failure
from simpg.capabilities import resolve
from simpg.faults import Fault
from simpg.frames import user_location
from simpg.isolation import import_switch_modules, restore, snapshot, warn_shared
from simpg.propagation_share import install as share_propagation
from simpg.stuck import clear_interrupt
from simpg.trace import active_sinks
from simpg.unwaited import check_unwaited
from simpg.scheduler import _CPU
from simpg.world import World, rank_context

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 60.0
_EXIT_GRACE_S = 5.0  # after a failure: how long (at most the timeout) to wait for ranks


# Note [a fresh thread per rank]: each rank of each world runs on a new OS thread, as each
# rank of a real job is a new process. torch keeps caches per thread (DTensor's C++
# sharding-propagation cache, the c10d group registry in thread-isolation mode) whose keys do
# not name the rank: a pooled thread that served rank 1 of one world and then rank 0 of the
# next would hand rank 0 rank 1's answers. Starting a thread costs about as much as a few
# collectives; an empty cache is worth it.


_ALL_CPUS = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
try:
    _sched_getcpu = ctypes.CDLL(None, use_errno=True).sched_getcpu
except (OSError, AttributeError):  # not Linux
    _sched_getcpu = None


def _rank_cpus(pin: bool) -> set[int] | None:
    """Note [pinning rank threads]: ranks run one at a time, so keeping them on one core costs
    no parallelism and makes each hand-over a same-core wake-up (several times faster here)."""
    if _ALL_CPUS is None:
        return None
    if pin and _sched_getcpu is not None:
        cpu = _sched_getcpu()
        if cpu in _ALL_CPUS:
            return {cpu}
    return set(_ALL_CPUS)


# Note [hand-over without preemption]
# A hand-over is "wake the next rank (os.write), then sleep (os.read)"; both calls release the
# GIL. Under Linux's default policy the woken rank, on the same core (Note [pinning rank
# threads]), preempts the waker inside its os.write; the waker then needs the GIL back just to
# reach its os.read, and waits behind the rank that now runs: an extra thread switch and GIL
# hand-off per hand-over, and on a busy machine each is a chance to lose the core for a
# time slice. Measured (4 ranks, 1 KB all_reduce, busy 2-core VM): os.write took 510 us per
# hand-over on average, 70 us with this. SCHED_BATCH only turns off wakeup preemption (no
# privilege needed): the waker runs on to its os.read and the next rank starts then.
def _no_wakeup_preemption() -> None:
    """SCHED_BATCH for the calling rank thread (Note [hand-over without preemption])."""
    if _SCHED_BATCH is not None:
        try:
            os.sched_setscheduler(0, _SCHED_BATCH, os.sched_param(0))
        except OSError:  # a container's seccomp policy may refuse it: slower, still correct
            pass


_SCHED_BATCH = getattr(os, "SCHED_BATCH", None)


def run(
    fn: Callable[..., T],
    world_size: int,
    *args: Any,
    timeout: float = DEFAULT_TIMEOUT_S,
    schedule_seed: int | None = None,
    faults: Sequence[Fault] = (),
    pin_threads: bool = True,
    strict_async: bool = False,
    capabilities: str | None = None,
    **kwargs: Any,
) -> list[T]:
    """Run ``fn(*args, **kwargs)`` on ``world_size`` simulated ranks; return their results.

    Each rank is a thread with the default process group initialised on the ``"simpg"``
    backend, its own torch.distributed state and its own CPU RNG (a copy of the caller's).
    If a rank raises, the ranks waiting on it are released and ``run`` re-raises the
    original exception with a note naming its rank. ``schedule_seed`` draws the order in
    which ranks run (switching at every collective) so that an interleaving replays.
    ``timeout``: seconds a rank may run without reaching a collective; past it the world
    ends with a ``DeadlockError`` showing each rank's position, and the stuck rank is
    abandoned (Note [abandoning a stuck rank]). Work issued with ``async_op=True`` and never
    waited gives an ``UnwaitedWorkWarning``, or with ``strict_async`` an
    ``UnwaitedWorkError``. ``capabilities`` (``"full"``, ``"gloo"``, ``"portable"``; default
    the enclosing ``simpg.behave_as`` block's, else full) makes the groups declare and run
    only that backend's collectives (Note [behaving as gloo]).

    >>> import torch, torch.distributed as dist, simpg
    >>> def body():
    ...     t = torch.tensor([dist.get_rank() + 1])
    ...     dist.all_reduce(t)
    ...     return t.item()
    >>> simpg.run(body, 4)
    [10, 10, 10, 10]
    """
    __tracebackhide__ = True  # pytest shows the user's frames (all of them with --full-trace)
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    outer = rank_context.get()
    if outer is not None:
        # this rank holds its world's baton: the inner world's ranks could never run, and
        # the outer world would wait for this rank for ever
        raise SimpgError(f"simpg.run called inside rank {outer[1]} of a running simpg world: "
                         f"worlds do not nest; run the inner program from outside the world "
                         f"(or call its function directly on this rank)")
    import_switch_modules()  # Note [per-rank process state]
    share_propagation()  # Note [one propagation for every rank]
    with _CPU:  # Note [one rank runs at a time]: other worlds' ranks may be running
        caller_rng = torch.get_rng_state()
        caller_switches = snapshot()  # Note [per-rank process state]
    world = World(world_size, capabilities=resolve(capabilities), faults=faults,
                  trace_sinks=active_sinks(), interrupt_stuck=True, timeout=timeout,
                  schedule_seed=schedule_seed, members_ready=True, rng_state=caller_rng,
                  switches=caller_switches)
    caller_hook = sys.excepthook  # init_process_group wraps it once per rank
    cpus = _rank_cpus(pin_threads)
    store = dist.HashStore()
    results: list[Any] = [None] * world_size
    finished = [False] * world_size
    changed = threading.Condition()

    def rank_main(rank: int) -> None:
        try:
            try:
                if cpus is not None:
                    os.sched_setaffinity(0, cpus)
                if pin_threads:
                    _no_wakeup_preemption()
                rank_context.set((world, rank))
                current_state.set(RankC10dState())
                _run_rank(world, rank, store, fn, args, kwargs, results)
            finally:
                with changed:
                    finished[rank] = True
                    changed.notify_all()
                clear_interrupt()
        except RankAbandoned:
            pass  # run() has reported this rank already

    for rank in range(world_size):  # Note [a fresh thread per rank]
        ctx = contextvars.Context()
        threading.Thread(target=ctx.run, args=(rank_main, rank), name=f"simpg-rank-{rank}",
                         daemon=True).start()
    try:
        _wait_all(world, finished, changed)
    finally:
        with _CPU:
            torch.set_rng_state(caller_rng)
            restore(caller_switches)
        sys.excepthook = caller_hook
    if world.failure is not None:
        _raise_failure(world)
    check_unwaited(world.rendezvous, strict_async)
    warn_shared(world.shared_switches)
    return results


def _run_rank(world: World, rank: int, store: dist.Store, fn: Callable[..., Any],
              args: tuple, kwargs: dict, results: list[Any]) -> None:
    __tracebackhide__ = True
    joined = False
    try:
        world.join(rank)
        joined = True
        world.check_failed(subtest=False)  # another rank's aborted subtest is not this one's
        dist.init_process_group("simpg", rank=rank, world_size=world.size, store=store)
        results[rank] = fn(*args, **kwargs)
    except BaseException as e:  # noqa: BLE001 - any failure ends the world, re-raised by run
        if isinstance(e, RankAbandoned):
            raise  # the world gave up on this rank and reported why already
        own = own_failure(e)  # Note [no lost failure]
        if own is not e:
            world.fail_from(own, rank, e)
        if not isinstance(e, SimpgError) or world.failure is None:
            world.fail(e, rank)
    finally:
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        except BaseException as e:  # noqa: BLE001
            world.fail(e, rank)
        if joined:
            world.leave()


def _wait_all(world: World, finished: list[bool], changed: threading.Condition) -> None:
    """Wait for every rank, except those abandoned; after a failure, give the others a grace
    period to unwind, then abandon them too (Note [abandoning a stuck rank])."""
    grace = min(_EXIT_GRACE_S, world.timeout)
    failed_at: float | None = None
    with changed:
        while True:
            waiting = [r for r in range(world.size)
                       if not finished[r] and r not in world.abandoned]
            if not waiting:
                break
            if world.failure is not None:
                failed_at = failed_at or time.monotonic()
                if time.monotonic() - failed_at > grace:
                    for r in waiting:
                        world.abandon(r)
                    world.failure.add_note(
                        f"[simpg] rank(s) {waiting} were still running user code {grace:g}s "
                        "after the failure; they were interrupted and left behind")
                    break
            changed.wait(timeout=0.05)  # the watchdog abandons ranks without notifying
    if world.abandoned and world.failure is not None and not any(
            "left behind" in n for n in getattr(world.failure, "__notes__", ())):
        world.failure.add_note(f"[simpg] rank(s) {sorted(world.abandoned)} did not return; "
                               "they were interrupted and left behind")


# Note [no lost failure]
# The world records every rank's own failure, not only the first (World.failures). simpg.run
# raises the first that is the user's own error rather than one of simpg's diagnostics: a
# mismatch or deadlock that follows a rank's assertion is usually its consequence (the rank
# that raised skipped its collectives), so it is listed after it, never instead of it. Equal
# failures on several ranks (the same assertion everywhere, run_subtests' merged report) are
# listed once with their ranks.


def _ranks_label(ranks: list[int | None], size: int) -> str:
    known = sorted({r for r in ranks if r is not None})
    if not known:
        return "every rank"
    if len(known) == 1:
        return f"rank {known[0]} of {size}"
    return f"ranks {known} of {size}"


def _raise_failure(world: World) -> None:
    __tracebackhide__ = True  # pytest: the user's frames, not simpg's (shown with --full-trace)
    failure = world.failure
    if failure is None:
        return
    by_text: dict[tuple[type, str], list[int | None]] = {}
    first: dict[tuple[type, str], BaseException] = {}
    for rank, error in world.failures or [(world.failed_rank, failure)]:
        key = (type(error), str(error))
        by_text.setdefault(key, []).append(rank)
        first.setdefault(key, error)
    keys = list(by_text)
    lead = next((k for k in keys if not issubclass(k[0], SimpgError)), keys[0])
    if first[lead] is not failure:  # keep what _wait_all noted on the world's failure
        for note in getattr(failure, "__notes__", ()):
            first[lead].add_note(note)
    failure = first[lead]
    if any(r is not None for r in by_text[lead]) and not getattr(failure, "world_wide", False):
        failure.add_note(f"[simpg] raised on {_ranks_label(by_text[lead], world.size)}")
    lead_at = keys.index(lead)
    for at, key in enumerate(keys):
        if at == lead_at:
            continue
        error = first[key]
        where = user_location(error)
        text = "\n    ".join(str(error).splitlines()[:24])
        if at < lead_at:
            when = "before it"
        elif isinstance(error, SimpgError) and not issubclass(lead[0], SimpgError):
            when = "then, as a consequence"
        else:
            when = "then"
        failure.add_note(f"[simpg] {when}, on {_ranks_label(by_text[key], world.size)}: "
                         f"{key[0].__name__}: {text}" + (f"\n    at {where}" if where else ""))
    if world.schedule_seed is not None:
        failure.add_note("[simpg] replay this interleaving with "
                         f"schedule_seed={world.schedule_seed}")
    raise failure
