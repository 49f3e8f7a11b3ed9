"""torch.distributed's module-level world, made per simulated rank.

Note [per-rank c10d state]
torch.distributed keeps its process groups in one module-level ``_World`` per process, and
the C++ registry of group names is process-wide too. A simulated rank is a thread, so N ranks
would share one default group. This module is the one sanctioned place (STYLE.md, point 10)
that replaces that state: ``distributed_c10d._world`` becomes a proxy that resolves, at each
access, to the state of the rank running on the current thread, and the C++ group registry is
put in its thread-isolation mode. Resolution order:

1. the rank context set by ``simpg.run`` (a ``ContextVar``, so pooled threads start clean);
2. any other thread except the main one gets its own state on first use, so threads you start
   yourself can each call ``init_process_group("simpg", ...)``;
3. the main thread keeps torch's process-wide state, so real gloo/NCCL code there is unaffected.

A thread started by a rank does not inherit that rank's process groups (case 2 applies).
"""

from __future__ import annotations

import contextvars
import threading
from typing import Any

import torch
import torch.distributed.distributed_c10d as c10d

_ProcessWorld = c10d._World


class RankC10dState(_ProcessWorld):
    """One rank's copy of every map torch keeps in module globals."""

    def __init__(self) -> None:
        super().__init__()
        self._pg_map: dict[Any, Any] = {}
        self._pg_names: dict[Any, Any] = {}
        self._pg_group_ranks: dict[Any, Any] = {}
        self._pg_backend_config: dict[Any, Any] = {}
        self._group_count = 0
        self._tags_to_pg: dict[str, list[Any]] = {}
        self._pg_to_tag: dict[Any, str] = {}

    pg_map = property(lambda self: self._pg_map)
    pg_names = property(lambda self: self._pg_names)
    pg_group_ranks = property(lambda self: self._pg_group_ranks)
    pg_backend_config = property(lambda self: self._pg_backend_config)
    tags_to_pg = property(lambda self: self._tags_to_pg)
    pg_to_tag = property(lambda self: self._pg_to_tag)

    @property
    def group_count(self) -> int:
        return self._group_count

    @group_count.setter
    def group_count(self, value: int) -> None:
        self._group_count = value


current_state: contextvars.ContextVar[RankC10dState | None] = contextvars.ContextVar(
    "simpg_c10d_state", default=None
)


def _delegate(name: str, writable: bool) -> property:
    def get(self: _PerRankWorld) -> Any:
        # a simulated rank's collective reads default_pg and pg_coalesce_state four times:
        # the rank's own state is looked up inline, without _target's frame
        state = current_state.get()
        return getattr(self._target() if state is None else state, name)

    def set_(self: _PerRankWorld, value: Any) -> None:
        setattr(self._target(), name, value)

    return property(get, set_ if writable else None)


class _PerRankWorld(_ProcessWorld):
    """Stands in for ``distributed_c10d._world``; see Note [per-rank c10d state]."""

    def __init__(self, process_world: _ProcessWorld) -> None:  # no super(): holds no state
        self._process_world = process_world

    def _target(self) -> _ProcessWorld:
        state = current_state.get()
        if state is not None:
            return state
        if threading.current_thread() is threading.main_thread():
            return self._process_world
        state = RankC10dState()
        current_state.set(state)
        return state

    default_pg = _delegate("default_pg", writable=True)
    group_count = _delegate("group_count", writable=True)
    pg_map = _delegate("pg_map", writable=False)
    pg_names = _delegate("pg_names", writable=False)
    pg_group_ranks = _delegate("pg_group_ranks", writable=False)
    pg_backend_config = _delegate("pg_backend_config", writable=False)
    tags_to_pg = _delegate("tags_to_pg", writable=False)
    pg_to_tag = _delegate("pg_to_tag", writable=False)
    pg_coalesce_state = _delegate("pg_coalesce_state", writable=False)
    comms = _delegate("comms", writable=False)
    pg_config_info = _delegate("pg_config_info", writable=False)

    def __getattr__(self, name: str) -> Any:  # attributes a later torch adds
        return getattr(self._target(), name)


_install_lock = threading.Lock()


def install() -> None:
    """Make torch.distributed's state per rank; idempotent and safe from several threads."""
    with _install_lock:
        if isinstance(c10d._world, _PerRankWorld):
            return
        c10d._world = _PerRankWorld(c10d._world)
        torch._C._distributed_c10d._set_thread_isolation_mode(True)
