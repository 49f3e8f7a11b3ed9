"""One simulated world kept for several test methods: ``simpg.testing``'s ``class_world``.

Note [a world kept between test methods]
torch's continuous test base (``MultiProcContinuousTest``) starts its ranks once per class
and runs every test method on them, because starting processes and NCCL costs seconds. A
simpg world costs milliseconds (a thread and an ``init_process_group`` per rank), yet for a
class of many tiny methods that is about a third of the time: see the figures in
tests/simpg/test_porting_worlds.py's docstring.

A ``ClassWorld`` is one ``simpg.run`` on a host thread whose ranks run test methods as the
caller hands them over. Between methods the ranks are *parked* (``World.park``): each gives
the CPU away and counts as not joined, so the world is neither deadlocked nor timed out
while the caller does unittest's bookkeeping, and other worlds can run meanwhile. A rank that
ends a method waits (``_MethodEnd``, not a collective) until every rank has ended it, then
parks: a rank still in a collective of the method shows up as a deadlock, as in a world of
its own, the others shown "waiting in the end of its test method". A method that raises
anywhere ends the world the way ``simpg.run`` ends one (the error, with its rank, is the
method's); so does a method that destroys the default group (simpg's ranks leave the world
then), after it passes. The next method gets a new world. What a method leaves behind stays
for the next one, as in torch's continuous base: process groups it created, caches, module
state; the RNG is reseeded by the caller's rank body.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from simpg.isolation import restore, snapshot
from simpg.runner import run
from simpg.scheduler import _CPU
from simpg.world import World, rank_context

class WorldEnded(Exception):
    """The kept world is over (a method failed, or it was closed): build another."""


class _MethodEnd:
    """Ready once every rank still in the world has ended the method (a rank that destroyed
    the default group has left it); only the rank holding the baton counts."""

    def __init__(self, world: World | None, size: int) -> None:
        self.world = world
        self.size = size
        self.ended = 0

    def ready(self) -> bool:
        if self.world is None:
            return False
        return self.ended >= self.world.live_ranks()

    def describe(self) -> str:
        return (f"the end of its test method ({self.ended} of {self.size} ranks there; "
                "class_world)")


class ClassWorld:
    """A world of ``size`` ranks that runs one function per call of ``run_on_ranks``.

    >>> import torch.distributed as dist
    >>> kept = ClassWorld(2)
    >>> kept.run_on_ranks(dist.get_rank), kept.run_on_ranks(dist.get_world_size)
    ([0, 1], [2, 2])
    >>> kept.close()
    """

    def __init__(self, size: int, timeout: float = 30.0) -> None:
        self.size = size
        self._changed = threading.Condition()
        self._parked: set[int] = set()
        self._job: Callable[[], Any] | None = None
        self._end = _MethodEnd(None, size)
        self._retire = False
        self._results: list[Any] = [None] * size
        self._world: World | None = None
        self.error: BaseException | None = None  # why the world ended, if it failed
        self.ended = False
        self._host = threading.Thread(target=self._host_main, args=(timeout,), daemon=True,
                                      name="simpg-class-world")
        self._host.start()
        self._wait_parked()
        if self.error is not None:  # the world failed before its first method
            raise self.error

    # -- the caller's side ----------------------------------------------------------------
    def run_on_ranks(self, fn: Callable[[], Any]) -> list[Any]:
        """``fn()`` on every rank; its results. If it fails, the world is over: this raises
        the failure as ``simpg.run`` would, and later calls raise ``WorldEnded``. If it
        destroys the default group, the world is over too (``ended``), after it."""
        if self.ended:
            raise WorldEnded("this kept world is over; build another")
        self._job = fn
        self._end = _MethodEnd(self._world, self.size)
        self._retire = False
        self._results = [None] * self.size
        with _CPU:  # the caller's RNG and switches, which the ranks' hand-overs overwrite
            rng, switches = torch.get_rng_state(), snapshot()
        try:
            self._unpark()
            self._wait_parked()
        finally:
            with _CPU:
                torch.set_rng_state(rng)
                restore(switches)
        if self.ended and self.error is not None:
            raise self.error
        return list(self._results)  # ended without error: the method retired the world

    def close(self) -> None:
        """End the world (its ranks return); idempotent. Raises what ending it raised (work
        never waited, with ``strict_async``; a warning the caller turned into an error)."""
        was_over = self.ended
        if not was_over:
            self._job = None
            self._unpark()
        self._host.join()
        if not was_over and self.error is not None:
            raise self.error

    def _wait_parked(self) -> None:
        with self._changed:
            self._changed.wait_for(lambda: self.ended or len(self._parked) == self.size)

    def _unpark(self) -> None:
        world = self._world
        with self._changed:
            if self.ended or world is None:
                return
            self._parked.clear()
        world.unpark_all()

    # -- the ranks' side -------------------------------------------------------------------
    def _host_main(self, timeout: float) -> None:
        try:
            run(self._rank_loop, self.size, timeout=timeout)
        except BaseException as e:  # noqa: BLE001 - the method's failure, raised by the caller
            self.error = e
        finally:
            with self._changed:
                self.ended = True
                self._changed.notify_all()

    def _rank_loop(self) -> None:
        world, rank = rank_context.get()  # type: ignore[misc]
        if rank == 0:
            self._world = world
        dist.barrier()  # rank 0 has set _world before anyone parks
        while True:
            self._park(world, rank)
            job = self._job
            if job is None:
                return
            self._results[rank] = job()
            if not dist.is_initialized():  # destroying the default group left the world
                self._retire = True  # the others end theirs too: no next method here
                return
            end = self._end
            end.ended += 1
            world.wait_until(end)
            if self._retire:
                return

    def _park(self, world: World, rank: int) -> None:
        def parked() -> None:
            with self._changed:
                self._parked.add(rank)
                self._changed.notify_all()

        world.park(parked)


__all__ = ["ClassWorld", "WorldEnded"]
