"""The ``"simpg"`` backend for ``torch.distributed.init_process_group`` and ``new_group``."""

from __future__ import annotations

import threading
import uuid
import weakref
from typing import Any

import torch.distributed as dist

from simpg.capabilities import resolve
from simpg.process_group import SimProcessGroup, group_class
from simpg.rendezvous import GroupInfo
from simpg.world import World, rank_context

# Threads you start yourself find their world through the store they pass to
# init_process_group: the first rank to arrive names the world there.
_self_started: weakref.WeakValueDictionary[str, World] = weakref.WeakValueDictionary()
_self_started_lock = threading.Lock()
_MAX_SELF_STARTED_TIMEOUT_S = 300.0  # c10d's default is 30 min: far too long to wait on a hang


def _join_self_started(opts: Any) -> tuple[World, int]:
    proposal = uuid.uuid4().hex
    world_id = opts.store.compare_set("simpg/world", "", proposal).decode()
    timeout = min(opts.timeout.total_seconds(), _MAX_SELF_STARTED_TIMEOUT_S)
    with _self_started_lock:
        world = _self_started.get(world_id)
        if world is None:
            world = _self_started[world_id] = World(
                opts.group_size, capabilities=resolve(None), timeout=timeout)
    world.join(opts.group_rank)
    rank_context.set((world, opts.group_rank))
    return world, opts.group_rank


def _create(opts: Any, backend_options: Any) -> SimProcessGroup:
    ctx = rank_context.get()
    is_default = not opts.global_ranks_in_group
    if ctx is None:
        if not is_default:
            raise RuntimeError("a simpg subgroup needs a simpg default group on this rank first")
        ctx = _join_self_started(opts)
    world, _ = ctx
    if is_default:
        if opts.group_size != world.size:
            raise ValueError(
                f"init_process_group(world_size={opts.group_size}) does not match the simpg "
                f"world of {world.size} ranks"
            )
        ranks = tuple(range(world.size))
        label = "world"
    else:
        ranks = tuple(int(r) for r in opts.global_ranks_in_group)
        label = f"ranks({','.join(map(str, ranks))})"
    group = GroupInfo(str(opts.group_id), ranks, label)
    world.rendezvous.register_group(group)
    cls = group_class(world.capabilities)  # Note [behaving as gloo]
    return cls(world, group, opts.group_rank, is_default)


def register() -> None:
    """Register the backend name ``"simpg"`` with torch.distributed (idempotent)."""
    if "SIMPG" in dist.Backend._plugins:
        return
    dist.Backend.register_backend("simpg", _create, extended_api=True, devices=["cpu", "cuda"])

