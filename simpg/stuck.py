"""What simpg does with a rank that will not come back: take the CPU from it, interrupt it,
and say where it was.

Note [abandoning a stuck rank]
A rank that runs past its world's timeout (a Python loop, a long ``time.sleep``, a wait on
something outside simpg) still holds the process-wide CPU lock (Note [one rank runs at a
time]); every later world would queue behind it for ever. So the lock is revocable: the
watchdog takes it back in the rank's name (``Cpu.revoke``), and the rank's own late
``release`` is then a no-op. The rank's thread is also sent ``RankAbandoned`` with
``PyThreadState_SetAsyncExc``: a Python loop stops at its next bytecode; a thread inside one
long C call (``time.sleep``, a blocking read) raises when that call returns, long after
``simpg.run`` has reported and returned. Either way the thread holds nothing the next world
needs: its torch.distributed state is its own (Note [per-rank c10d state]), and it unwinds
without the CPU. A thread stuck in C code that holds the GIL cannot be reached from Python;
no watchdog runs then either.
"""

from __future__ import annotations

import ctypes
import gc
import sys
import threading
import traceback
from typing import Any

from simpg.errors import RankAbandoned
from simpg.frames import is_library_file

_SetAsyncExc = ctypes.pythonapi.PyThreadState_SetAsyncExc  # (thread id, exception or NULL)


class Cpu:
    """The process-wide right to run simulated rank code, revocable from its holder.

    Acquire and release cost a plain lock operation each (the hand-over path); the owner
    token is checked only by ``release`` and ``revoke``, under a second small lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._guard = threading.Lock()
        self._owner: object = None
        # the process-wide switches in force as the last rank left them (Note [per-rank
        # process state]); None once a holder that is not a rank may have changed them
        self.switches: dict[str, Any] | None = None

    def acquire(self, owner: object) -> None:
        self._lock.acquire()
        self._owner = owner

    def release(self, owner: object) -> None:
        with self._guard:
            if self._owner is owner:  # not revoked meanwhile
                self._owner = None
                self._lock.release()

    revoke = release  # the same act, done by the watchdog in the holder's name

    def held_by(self, owner: object) -> bool:
        return self._owner is owner

    def __enter__(self) -> None:
        self.acquire(self)
        self.switches = None

    def __exit__(self, *exc: object) -> None:
        self.release(self)


def interrupt(thread: threading.Thread) -> None:
    """Raise ``RankAbandoned`` in ``thread`` at its next Python bytecode."""
    if thread.ident is not None and thread.is_alive():
        _SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(RankAbandoned))


def clear_interrupt() -> None:
    """Let an interrupt sent to the calling thread that has not fired yet fire here, caught.

    Note [never clear an async exception]: ``PyThreadState_SetAsyncExc(id, NULL)`` drops
    the exception but, on CPython 3.11, still raises the interpreter's "async exception
    pending" flag, which only a delivered exception lowers. Left up, it sends every
    function entry and loop back-edge of every thread through the eval loop's slow path for
    the rest of the process, and a thread with a profiler or tracer (``sys.setprofile``,
    cProfile, coverage) spins for ever at its next function entry. A function call checks
    for a pending exception on entry, so two calls let one fire.
    """
    try:
        _entry()
        _entry()
    except RankAbandoned:
        pass


def _entry() -> None:
    """A function entry: where a pending async exception fires."""


def current_frames() -> dict[int, Any]:
    """``sys._current_frames()`` with the garbage collector held off: on CPython 3.11 a
    collection that starts while it holds the interpreter's thread-list lock can free an
    object whose destructor takes that lock again, and the process hangs for good (CPython
    gh-106883, fixed from 3.12 by the same measure). The watchdog calls this while the
    ranks' threads run, so it hit the test suite now and then."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return sys._current_frames()
    finally:
        if enabled:
            gc.enable()


def user_position(thread: threading.Thread, depth: int = 3) -> str | None:
    """The innermost ``depth`` frames of user code on ``thread``, innermost first
    (``a.py:9 in step <- a.py:20 in body``); ``None`` if it runs no user code yet."""
    frame = current_frames().get(thread.ident or -1)
    if frame is None:
        return None
    stack = traceback.extract_stack(frame)
    user = [f for f in stack if not is_library_file(f.filename)]  # Note [the user's frame]
    if not user:
        return None
    return " <- ".join(f"{f.filename}:{f.lineno} in {f.name}" for f in reversed(user[-depth:]))
