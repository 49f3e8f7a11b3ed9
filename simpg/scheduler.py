"""The scheduler of a world of N simulated ranks, one thread each, running one at a time.

A ``simpg.world.World`` is a ``Scheduler`` with its collaborators (the rendezvous, the
capabilities, the faults: Note [a world built whole]); the scheduler itself knows nothing of
collectives.

Note [one rank runs at a time]
Ranks hand a baton to each other: the rank holding it runs; the others sleep on their own
lock. A rank gives the baton away only when it must wait (a collective not yet complete, a
message not yet sent), when it finishes, or, in seeded mode, at each collective. This buys:
- speed: a collective costs one thread switch per rank, with no busy waiting (and, with
  pinned threads, no preemption: Note [hand-over without preemption] in simpg/runner.py);
- isolation: torch's CPU generator is process-wide, so each rank's RNG state is saved when it
  sleeps and restored when it wakes; a process-wide lock (``_CPU``) extends that to several
  worlds running at once in one process (pytest-xdist, threads);
- determinism: the order is round-robin, or drawn from ``schedule_seed``;
- exact deadlock detection: when no rank can run and some still wait, that is a deadlock,
  reported at once with every rank's position. A timeout covers what it cannot see: a rank
  that runs for longer than the timeout without reaching a collective (a loop, a sleep, a
  wait outside simpg), whether or not others wait; see Note [abandoning a stuck rank].

Note [rank switches]
What one rank pays for a 1 KB all_reduce on an 8-rank world (perf_counter_ns stamps around
each step, 2-core VM; the sum is 19-20 µs a rank on a quiet machine, 2026-12-02):
- torch's ``dist.all_reduce`` around the group call, before and after: 4.5-5 µs (not ours);
- the issue (``SimProcessGroup.allreduce`` to the ``Work`` it returns): 7-9 µs, of which the
  ``Work`` (a pybind ``c10d.Work`` subclass: made and freed per call, as c10d needs one)
  1-2.5, the call site 0.3-0.5, the reduction done by the last rank to arrive ~1 a rank;
  Note [lean issue] in simpg/process_group.py lists what was cut there;
- the hand-over (``wait_until`` to the rank running again): 6-8 µs, of which the OS switch
  itself (eventfd write, read, wake-up on the same core) 1.4-1.9 µs at 2-8 threads and 7.6 µs
  at 64 (measured with a bare ring of threads: the cost grows with the number of threads,
  whose stacks no longer stay in cache), saving and restoring the CPU RNG 0.7-1.1, the switch
  snapshot 0.7-0.9, the locks ~0.5; the rest is Python calls.
Why not greenlets (one OS thread, ranks as coroutines; a switch costs well under 1 µs)? torch
keeps state per OS thread that a rank must not share and that Python cannot save and
restore: c10d's group registry in thread-isolation mode (every rank registers its group under
the same name, so a functional collective on one rank would resolve another rank's group),
DTensor's C++ sharding-propagation cache (Note [a fresh thread per rank] in simpg/runner.py),
and the C++ thread-local state of grad mode, autocast, dispatch keys, the Python mode stacks
and the autograd engine's current graph task: a rank that blocks in a collective inside a
backward hook would leave the engine's thread-local graph task to the rank that runs next.
torch exposes no capture of its whole thread-local state to Python; ranks stay OS threads.
"""

from __future__ import annotations

import enum
import os
import random
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import torch

from simpg.errors import CollectiveMismatchError, DeadlockError, RankFailedError, SimpgError
from simpg.isolation import adopt, import_switch_modules, own, restore, snapshot
from simpg.stuck import Cpu, interrupt, user_position

_CPU = Cpu()  # held by the one simulated rank running in this process
_GENERATOR = torch.default_generator  # the process-wide CPU generator (RNG isolation)
_WATCH_S = 0.05  # how often the watchdog looks at the worlds


class Waker:
    """A rank's wake-up signal: an eventfd on Linux, a pipe elsewhere.

    Note [fast hand-over]: ``os.write`` releases the GIL during the system call, so the rank
    it wakes can take the GIL at once; waking through ``threading.Lock.release`` keeps the
    GIL held, and the woken thread bounces off it (about twice the cost per hand-over here).
    A blocked read has no timeout: the watchdog thread does the timing.
    """

    __slots__ = ("_r", "_w")

    def __init__(self) -> None:
        if hasattr(os, "eventfd"):
            self._r = self._w = os.eventfd(0)
        else:  # pragma: no cover - not Linux
            self._r, self._w = os.pipe()

    def set(self) -> None:
        os.write(self._w, b"\x01\0\0\0\0\0\0\0" if self._r == self._w else b"x")

    def wait(self) -> None:
        os.read(self._r, 8)

    def close(self) -> None:
        os.close(self._r)
        if self._w != self._r:
            os.close(self._w)


class Waitable(Protocol):
    def ready(self) -> bool: ...

    def describe(self) -> str: ...


class Status(enum.Enum):
    ABSENT = "not joined yet"
    READY = "ready to run"
    RUNNING = "running"
    BLOCKED = "waiting"
    DONE = "finished"


@dataclass(eq=False)
class RankSlot:
    index: int
    status: Status
    wake: Waker = field(default_factory=Waker)
    wake_pending: bool = False  # a wake was sent that the rank has not consumed yet
    has_cpu: bool = False
    waiting_for: Waitable | None = None
    rng_state: torch.Tensor | None = None
    switches: dict[str, Any] = field(default_factory=dict)  # Note [per-rank process state]
    owned: dict[str, Any] | None = None  # the last switches ``own`` returned for this rank
    thread: threading.Thread | None = None
    calls: int = 0  # collectives issued so far (fault injection counts these)


class Scheduler:
    """Scheduling, failure and deadlock state of one simulated world.

    ``interrupt_stuck``: the ranks' threads are simpg's own (``simpg.run``), so a rank stuck
    past the timeout is interrupted, not only reported (Note [abandoning a stuck rank]).
    """

    def __init__(
        self,
        size: int,
        *,
        timeout: float = 60.0,
        schedule_seed: int | None = None,
        members_ready: bool = False,
        rng_state: torch.Tensor | None = None,
        switches: dict[str, Any] | None = None,
        interrupt_stuck: bool = False,
    ) -> None:
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ValueError(f"world_size must be an int >= 1, got {size!r}")
        if not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.size = size
        self.timeout = float(timeout)
        self.schedule_seed = schedule_seed
        self._order = random.Random(schedule_seed) if schedule_seed is not None else None
        self._lock = threading.Lock()
        first = Status.READY if members_ready else Status.ABSENT
        self._ranks = [RankSlot(i, first) for i in range(size)]
        self._holder: int | None = 0 if members_ready else None
        if members_ready:
            self._ranks[0].status = Status.RUNNING
        self._since = time.monotonic()  # when the holder started running, or idling began
        self._rng_state = rng_state if rng_state is not None else torch.get_rng_state()
        if switches is None:  # a world of threads started by the user, or a class world
            import_switch_modules()
            switches = snapshot()
        self.switches = switches
        self.shared_switches: list[str] = []  # Note [per-rank process state], the limits
        self.failure: BaseException | None = None  # the first: it ends the world
        self.failed_rank: int | None = None
        # every rank's own failure, in order (Note [no lost failure])
        self.failures: list[tuple[int | None, BaseException]] = []
        self.interrupt_stuck = interrupt_stuck  # threads you start yourself are only reported
        self.abandoned: set[int] = set()
        self._local = threading.local()
        # subtests (see simpg.subtests): a failure aborts the current subtest, not the world
        self.subtests_active = False
        self.epoch = 0
        self._aborted: tuple[BaseException, int | None] | None = None
        self._gate_arrivals = 0
        self._gate_generation = 0
        self.subtest_failures: dict[int, list[Any]] = {}  # run_subtests call -> its records
        wakers = [r.wake for r in self._ranks]
        weakref.finalize(self, _close_all, wakers)
        _watchdog.watch(self)

    # -- who am I ---------------------------------------------------------------------------
    def current_rank(self) -> int:
        rank = getattr(self._local, "rank", None)
        if rank is None:
            raise RuntimeError("this thread is not a rank of this simpg world")
        return rank

    # -- entering and leaving -----------------------------------------------------------------
    def join(self, rank: int) -> None:
        """Make the calling thread rank ``rank``; returns once it holds the baton."""
        if not isinstance(rank, int) or not 0 <= rank < self.size:
            raise ValueError(
                f"rank must be in [0, {self.size - 1}] for a world of {self.size} ranks, "
                f"got {rank!r}"
            )
        me = self._ranks[rank]
        with self._lock:
            if me.thread is not None:
                raise ValueError(f"rank {rank} joined the world twice")
            me.thread = threading.current_thread()
            me.rng_state = self._rng_state
            me.switches = dict(self.switches)
            self._local.rank = rank
            if self._holder is None and self.failure is None:
                self._holder = rank
                me.status = Status.RUNNING
            elif me.status is Status.ABSENT:
                me.status = Status.READY
            # a rank handed the baton before its thread arrived finds its wake released
            run_now = self._holder == rank and not me.wake_pending
        if run_now:
            self._take_cpu(me)
        else:
            self._sleep(me)

    def leave(self) -> None:
        """The calling rank is done; hand the baton on. Idempotent."""
        me = self._ranks[self.current_rank()]
        with self._lock:
            if me.status is Status.DONE:
                return
            me.status = Status.DONE
            if self._gate_arrivals and self._gate_arrivals >= self.live_ranks():
                self._open_gate()  # the others wait for this rank at a subtest's end: no more
            nxt = self._pass_baton(me)
        self._give_cpu(me)
        if nxt is not None:
            nxt.wake.set()

    # -- waiting --------------------------------------------------------------------------------
    def wait_until(self, waitable: Waitable) -> None:
        """Block the calling rank until ``waitable.ready()``, running other ranks meanwhile."""
        rank = getattr(self._local, "rank", None)
        me = self._ranks[rank if rank is not None else self.current_rank()]
        is_gate = type(waitable) is _Gate
        lock = self._lock
        while True:
            with lock:
                if self.failure is not None or self._aborted is not None:
                    self._raise_if_failed(subtest=not is_gate)
                if waitable.ready():
                    me.status = Status.RUNNING
                    me.waiting_for = None
                    return
                me.waiting_for = waitable
                if self._holder is not None and self._holder != me.index:
                    nxt = None  # woken without the baton: keep waiting for it
                else:
                    me.status = Status.BLOCKED
                    nxt = self._pass_baton(me)
                    if self.failure is not None or self._aborted is not None:
                        self._raise_if_failed(subtest=not is_gate)
            # Note [a hand-over in one pass]: _switch written out, and the check that ends the
            # wait made under the lock taken on waking, not under a second one taken after
            # the CPU (ready() cannot change meanwhile: only the baton holder completes slots)
            self._give_cpu(me)
            if nxt is not None:
                nxt.wake.set()
            me.wake.wait()
            with lock:
                me.wake_pending = False
                if self.failure is not None:
                    continue  # unwind without the baton: the check above raises
                done = self._aborted is None and waitable.ready()
                if done:
                    me.status = Status.RUNNING
                    me.waiting_for = None
            self._take_cpu(me)
            if done:
                return

    def preempt(self) -> None:
        """Seeded mode: at each collective, maybe hand the baton to another ready rank."""
        if self._order is None:
            return
        me = self._ranks[self.current_rank()]
        with self._lock:
            self._raise_if_failed()
            ready = [r for r in self._ranks if r is me or self._runnable(r)]
            nxt = self._order.choice(ready)
            if nxt is me:
                return
            me.status = Status.READY
            self._hand_to(nxt)
        self._switch(me, nxt)
        self.check_failed()  # woken by a failure: unwind before touching the rendezvous

    def check_failed(self, subtest: bool = True) -> None:
        """Raise on the calling rank if the world has failed (or, with ``subtest``, if the
        current subtest was aborted)."""
        if self.failure is not None or (subtest and self._aborted is not None):
            with self._lock:
                self._raise_if_failed(subtest)

    def leave_if_member(self) -> None:
        if getattr(self._local, "rank", None) is not None:
            self.leave()

    def count_call(self, rank: int) -> int:
        """Count a collective issued by ``rank``, the calling one; returns its 1-based index."""
        me = self._ranks[rank]
        me.calls += 1
        self._since = time.monotonic()  # reaching a collective is progress (the timeout)
        return me.calls

    # -- failure ----------------------------------------------------------------------------------
    def fail(self, error: BaseException, rank: int | None) -> None:
        """Record the first failure and wake every sleeping rank so that it raises."""
        with self._lock:
            self._fail_locked(error, rank)

    def fail_from(self, cause: BaseException, rank: int, effect: BaseException) -> None:
        """Record ``cause``, the rank's own failure that ``effect`` (a diagnostic the rank
        raised while unwinding from it) followed: listed ahead of ``effect``'s first record."""
        with self._lock:
            known = len(self.failures)
            self._fail_locked(cause, rank)
            if len(self.failures) == known:
                return  # recorded already (or by run_subtests)
            entry = self.failures.pop()
            same = [i for i, (_, e) in enumerate(self.failures)
                    if type(e) is type(effect) and str(e) == str(effect)]
            self.failures.insert(same[0] if same else len(self.failures), entry)

    def _fail_locked(self, error: BaseException, rank: int | None) -> None:
        if self.subtests_active and self.failure is None:
            # Note [subtest abort]: the ranks waiting in this subtest become runnable and
            # raise one at a time, keeping the baton; they meet again at the subtest's gate.
            if self._aborted is None:
                self._aborted = (error, rank)
            return
        if self.failure is None:
            self.failure, self.failed_rank = error, rank
        if not any(e is error for _, e in self.failures):
            self.failures.append((rank, error))
        for r in self._ranks:
            if r.status in (Status.READY, Status.BLOCKED) and not r.wake_pending:
                r.wake_pending = True
                r.wake.set()

    def _raise_if_failed(self, subtest: bool = True) -> None:
        failure, failed_rank = self.failure, self.failed_rank
        if failure is None and subtest and self._aborted is not None:
            failure, failed_rank = self._aborted
        if failure is None:
            return
        if isinstance(failure, SimpgError):
            raise failure.copy()
        err = RankFailedError(
            f"rank {failed_rank} failed with {type(failure).__name__}: {failure}; "
            "this rank was released from its wait"
        )
        err.failed_rank = failed_rank
        raise err

    # -- the baton ------------------------------------------------------------------------------
    def _runnable(self, r: RankSlot) -> bool:
        if r.status is Status.READY:
            return True
        if r.status is not Status.BLOCKED or r.waiting_for is None:
            return False
        if self._aborted is not None and not isinstance(r.waiting_for, _Gate):
            return True  # it will raise the abort
        return r.waiting_for.ready()

    def _pick(self, me: RankSlot) -> RankSlot | None:
        if self._order is not None:
            ready = [r for r in self._ranks if r is not me and self._runnable(r)]
            return self._order.choice(ready) if ready else None
        for step in range(1, self.size + 1):
            r = self._ranks[(me.index + step) % self.size]
            if r is not me and self._runnable(r):
                return r
        return None

    def _hand_to(self, nxt: RankSlot) -> None:
        self._holder = nxt.index
        nxt.status = Status.RUNNING
        nxt.wake_pending = True

    def _pass_baton(self, me: RankSlot) -> RankSlot | None:
        """Under the lock: choose who runs after ``me``; on a deadlock, fail the world."""
        if self.failure is not None:
            return None  # every sleeping rank was woken to unwind; nobody holds the baton
        nxt = self._pick(me)
        if nxt is not None:
            self._hand_to(nxt)
            return nxt
        self._holder = None
        self._since = time.monotonic()
        stuck = [r for r in self._ranks if r.status is Status.BLOCKED]
        absent = [r for r in self._ranks if r.status is Status.ABSENT]
        if stuck and not absent and self.failure is None:
            if self.subtests_active and self._aborted is None:
                self._aborted = (self._deadlock_error(), None)  # abort the subtest, go on
                return self._pass_baton(me)
            # stuck even with the subtest aborted (or outside subtests): the world is over
            self.subtests_active = False
            self._fail_locked(self._deadlock_error(), None)
        return None

    def _switch(self, me: RankSlot, nxt: RankSlot | None) -> None:
        self._give_cpu(me)
        if nxt is not None:
            nxt.wake.set()
        self._sleep(me)

    def _sleep(self, me: RankSlot) -> None:
        me.wake.wait()
        with self._lock:
            me.wake_pending = False
            failed = self.failure is not None
        if not failed:  # after a failure, ranks unwind without the baton
            self._take_cpu(me)

    def _take_cpu(self, me: RankSlot) -> None:
        _CPU.acquire(me)
        me.has_cpu = True
        self._since = time.monotonic()
        _GENERATOR.set_state(me.rng_state)  # torch.set_rng_state, without its Python frame
        if len(me.switches) < len(self.switches):  # a module imported inside the world
            me.switches = {**self.switches, **me.switches}
        if me.switches is not me.owned:  # snapshots are never mutated: owned stays owned
            me.switches = me.owned = own(me.switches, self.switches)  # Note [values and objects]
        if me.switches is not _CPU.switches:  # Note [cheap switch snapshots]
            # ranks mostly agree on values: only what differs is set
            if restore(me.switches, _CPU.switches) or _CPU.switches is None:
                _CPU.switches = me.switches
            else:
                me.switches = _CPU.switches  # the same state and never mutated: share one

    def _give_cpu(self, me: RankSlot) -> None:
        if me.has_cpu:
            me.rng_state = _GENERATOR.get_state()
            me.switches = _CPU.switches = snapshot(me.switches)
            if len(me.switches) > len(self.switches):
                self.shared_switches += adopt(self.switches, me.switches)
            me.has_cpu = False
            _CPU.release(me)

    # -- parking between jobs (simpg.class_world) ----------------------------------------------
    def park(self, before_sleep: Callable[[], None] | None = None) -> None:
        """Step the calling rank aside until ``unpark_all``: neither runnable nor stuck, so
        deadlock detection and the timeout pass it by (a world kept between test methods).
        ``before_sleep`` runs once the baton is handed on; raises if the world failed."""
        me = self._ranks[self.current_rank()]
        with self._lock:
            me.status = Status.ABSENT
            nxt = self._pass_baton(me)
        if before_sleep is not None:
            before_sleep()
        self._switch(me, nxt)  # gives the CPU away; returns when unparked
        self.check_failed(subtest=False)

    def unpark_all(self) -> None:
        """Make every parked rank ready to run and hand rank 0 the baton (called from outside
        the world, once every rank has parked)."""
        with self._lock:
            for slot in self._ranks:
                slot.status = Status.READY
            first = self._ranks[0]
            self._hand_to(first)
        first.wake.set()

    def live_ranks(self) -> int:
        """How many ranks have not left the world."""
        return sum(r.status is not Status.DONE for r in self._ranks)

    # -- subtest gates -----------------------------------------------------------------------
    def unblamed_abort(self) -> BaseException | None:
        """The error that aborted the current subtest when no rank caused it (a deadlock or a
        mismatch), else None."""
        aborted = self._aborted
        return aborted[0] if aborted is not None and aborted[1] is None else None

    def end_subtest(self) -> tuple[BaseException, int | None] | None:
        """Wait until every live rank ends the current subtest; returns its abort, if any.

        The last rank to arrive clears the abort and starts the next epoch, so the
        collectives of an aborted subtest never match those of the next one.
        """
        with self._lock:
            aborted = self._aborted
            gate = _Gate(self, self._gate_generation)
            self._gate_arrivals += 1
            if self._gate_arrivals >= self.live_ranks():
                self._open_gate()
        self.wait_until(gate)
        return aborted

    def _open_gate(self) -> None:
        """Under the lock: every live rank ended the subtest; start the next epoch (a
        ``World`` also forgets the subtest's pending messages here)."""
        self._gate_arrivals = 0
        self._gate_generation += 1
        self._aborted = None
        self.epoch += 1

    # -- watchdog and reports ----------------------------------------------------------------
    def watchdog_tick(self) -> None:
        """Called by the watchdog thread: time out a rank that runs past the timeout without
        reaching a collective (others waiting or not), and hand the baton on from a thread
        that ended without leaving."""
        with self._lock:
            if self.failure is not None:
                return
            holder = self._ranks[self._holder] if self._holder is not None else None
            if holder is None and not any(r.status is Status.BLOCKED for r in self._ranks):
                return  # nobody runs and nobody waits: not started, or over
            if holder is not None and holder.thread is not None and not holder.thread.is_alive():
                holder.status = Status.DONE  # its thread ended without leaving the world
                nxt = self._pass_baton(holder)
                if nxt is not None:
                    nxt.wake.set()
                return
            idle = time.monotonic() - self._since
            if idle <= self.timeout:
                return
            what = (f"rank {holder.index} ran for {idle:.1f}s without reaching a collective"
                    if holder is not None else f"no rank ran for {idle:.1f}s")
            error = self._deadlock_error(f"timeout ({self.timeout:g}s): {what}")
            self.subtests_active = False  # a stuck rank ends the world, not only a subtest
            self._fail_locked(error, None)
            if holder is not None:
                self.abandon(holder.index)

    def abandon(self, rank: int) -> None:
        """Give up on a rank that will not return: take back the CPU it holds and, if its
        thread is simpg's, interrupt it (Note [abandoning a stuck rank])."""
        slot = self._ranks[rank]
        self.abandoned.add(rank)
        if slot.has_cpu:
            slot.has_cpu = False
            _CPU.revoke(slot)
        if self.interrupt_stuck and slot.thread is not None:
            interrupt(slot.thread)

    def _describe(self, r: RankSlot) -> str:
        if r.status is Status.BLOCKED and r.waiting_for is not None:
            return f"rank {r.index}: waiting in {r.waiting_for.describe()}"
        if r.status is Status.DONE:
            return f"rank {r.index}: finished (left the world)"
        where = user_position(r.thread) if r.thread is not None else None
        if r.status is Status.RUNNING:
            return f"rank {r.index}: running at {where or '<no user code on its stack>'}"
        if r.status is Status.READY:
            return (f"rank {r.index}: ready to run, at {where}" if where
                    else f"rank {r.index}: ready to run (has not started its function)")
        return f"rank {r.index}: {r.status.value}"

    def _deadlock_error(self, reason: str | None = None) -> SimpgError:
        lines = [self._describe(r) for r in self._ranks]
        waiting = [r for r in self._ranks if r.status is Status.BLOCKED]
        in_collectives = all(
            r.status is Status.BLOCKED and getattr(r.waiting_for, "is_collective", False)
            for r in self._ranks
        )
        if reason is None and in_collectives and len(waiting) > 1:
            head = "ranks disagree on their next collective: no group can complete"
            return CollectiveMismatchError(head + "\n  " + "\n  ".join(lines))
        head = reason or "deadlock: no rank can make progress"
        return DeadlockError(head + "\n  " + "\n  ".join(lines))


class _Gate:
    """The end of a subtest: ready once every live rank arrived."""

    is_collective = True

    def __init__(self, world: Scheduler, generation: int) -> None:
        self._world, self._generation = world, generation

    def ready(self) -> bool:
        return self._world._gate_generation > self._generation

    def describe(self) -> str:
        return "the end of a subtest (run_subtests), waiting for the other ranks"


def _close_all(wakers: list[Waker]) -> None:
    for w in wakers:
        w.close()


class _Watchdog:
    """One daemon thread for the process that ticks every live world (weakly held)."""

    def __init__(self) -> None:
        self._worlds: weakref.WeakSet[Scheduler] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, world: Scheduler) -> None:
        with self._lock:
            self._worlds.add(world)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="simpg-watchdog",
                                                daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(_WATCH_S)
            with self._lock:
                worlds = list(self._worlds)
            for world in worlds:
                world.watchdog_tick()
            del worlds


_watchdog = _Watchdog()
