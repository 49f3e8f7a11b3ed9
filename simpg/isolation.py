"""Each rank sees what a fresh process would see: per-rank copies of process-wide state.

Note [per-rank process state]
An unmodified torch program assumes one rank per process. On simpg its ranks are threads of
one process, so three kinds of state would leak between ranks:

1. thread-local caches keyed without the rank (DTensor's C++ sharding-propagation cache,
   c10d's group registry): each rank runs on a fresh thread (Note [a fresh thread per rank]);
2. process-wide caches keyed by a ``DeviceMesh`` (``_gen_transform_infos``, the redistribute
   planner cache, ``propagate_op_sharding``): torch's meshes compare equal across ranks, and
   some entries hold the rank's mesh coordinate. A mesh built on a simpg rank gets an
   identity of its own (``simpg.mesh_identity``), a token unique to that rank of that world
   (``_thread_id``, the field torch's own "threaded" backend sets to the thread id for the
   same reason; a thread id would be reused by the next world's threads, a token is not);
3. process-wide switches (below, ``SWITCHES``): since ranks run one at a time
   (Note [one rank runs at a time]), each rank's values are saved when it gives the CPU away
   and restored when it takes it back, as torch's CPU RNG state is. A rank starts with the
   caller's values, as a process forked from the caller would, and the caller gets its own
   back when the world ends. Values, tables and objects each need their own way of being
   made per rank (Note [values and objects]).

The limits, where simpg cannot give each rank its own copy:
- state simpg does not know of (another library's module globals, a C++ global that torch
  adds later) is shared by the ranks; ``SWITCHES`` is the list of what is swapped;
- a module first imported inside the world, by a rank, had no caller value to start from:
  the other ranks start from the importing rank's values when it first gives the CPU away.
  If it changed one by then (entered ``loss_parallel`` before its first collective),
  ``simpg.run`` warns (``IsolationWarning``). Import torch.distributed.tensor first;
- a rank's copy of an object switch (the DTensor RNG tracker) is one level deep: its
  containers and tensors are copied, what they point to further (a mesh, a group) is shared;
- worlds run side by side (``simpg.run`` from two threads): a caller's snapshot reads the
  values in force, which may be those of the other world's rank that ran last;
- code that runs without the CPU sees whichever rank's values are current: threads a rank
  starts itself (they run beside the ranks, not in turn), and ranks unwinding after the world
  failed (the world's result is the failure then).
"""

from __future__ import annotations

import copy
import operator
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import torch


# Note [values and objects]
# A switch holds either a value or an object that torch mutates in place, and each kind is
# made per rank in its own way; sharing one mutable thing between ranks is the bug to avoid.
# - A value that is replaced, never mutated (the default dtype, the redistribute flags): the
#   saved value is the value itself.
# - A table that torch mutates in place but always reaches through one attribute
#   (``DTensor._op_dispatcher._custom_op_handlers``: ``loss_parallel`` adds its handlers on
#   entry and pops them on exit): one live dict, whose contents are the running rank's. A
#   snapshot saves a copy (``Switch.copy``) and ``restore`` puts a rank's copy back into the
#   live dict, so a rank that holds the table by reference still sees its own entries.
# - An object that torch mutates in place and that the switch merely points to (the DTensor
#   RNG tracker: ``tracker.distribute_region_enabled = False``): swapping the pointer is not
#   enough when two ranks point to the same object, as every rank does to the caller's at
#   the start. A rank gets its own copy (``Switch.fork``) of any such object it still shares
#   with the world's baseline when it first takes the CPU (``own``), as a forked process has
#   its own copy of its parent's; one it makes itself is its own already. ``adopt`` keeps a
#   copy in the baseline, so the importing rank's object stays its own.


@dataclass(frozen=True)
class Switch:
    """One piece of process-wide state, saved and restored per rank.

    Note [cheap switch snapshots]: ``snapshot`` runs at every hand-over, so ``read`` is a
    C-level getter (``operator.attrgetter`` / ``methodcaller``: no Python frame) of the live
    value, and a mutable value (``copy``: DTensor's dict of custom op handlers) is copied only
    when it differs from the rank's last snapshot, which is then returned as it is.
    """

    module: str  # only touched once this module is imported
    read: Callable[[Any], Any]  # module -> the live value (not a copy)
    set: Callable[[Any, Any], None]  # (module, saved value) -> None
    fresh: Callable[[Any], bool]  # whether a value is what a fresh process has
    copy: Callable[[Any], Any] | None = None  # value -> a copy to save; None: immutable
    # an object mutated in place -> a rank's own copy of it (Note [values and objects])
    fork: Callable[[Any], Any] | None = None


def _attr(name: str, default: Any) -> tuple[Callable[[Any], Any], Callable[[Any, Any], None],
                                            Callable[[Any], bool]]:
    return (operator.attrgetter(name), (lambda m, v: setattr(m, name, v)),
            (lambda v: v is default))


_handlers = operator.attrgetter("DTensor._op_dispatcher._custom_op_handlers")


def _no_loss_handlers(value: dict) -> bool:
    loss = sys.modules.get("torch.distributed.tensor.parallel.loss")
    return loss is None or not set(value) & set(loss.customized_loss_ops)


def _set_handlers(m: Any, value: dict) -> None:
    handlers = _handlers(m)
    if handlers != value:
        handlers.clear()
        handlers.update(value)


def _fork_object(obj: Any) -> Any:
    """A copy of ``obj`` whose mutable attributes (containers, tensors) are copies too, as in a
    forked process; modules, devices and other immutable attributes are shared."""
    if obj is None:
        return None
    new = copy.copy(obj)
    state = getattr(new, "__dict__", None)
    if state is not None:
        for name, value in state.items():
            if isinstance(value, (dict, list, set)):
                state[name] = copy.copy(value)
            elif isinstance(value, torch.Tensor):
                state[name] = value.clone()
    return new


SWITCHES: dict[str, Switch] = {
    "default dtype": Switch("torch", operator.methodcaller("get_default_dtype"),  # C++ global
                            lambda m, v: m.set_default_dtype(v), lambda v: True),
    # loss_parallel() adds its handlers here and removes them on exit
    "DTensor custom op handlers": Switch("torch.distributed.tensor._api", _handlers,
                                         _set_handlers, _no_loss_handlers, copy=dict),
    # an object: ranks mutate their tracker in place (distribute_region_enabled)
    "DTensor RNG tracker": Switch("torch.distributed.tensor._random",
                                  *_attr("_rng_tracker", None), fork=_fork_object),
    "redistribute min-cost plan flag": Switch(
        "torch.distributed.tensor._redistribute",
        *_attr("_FORCE_MIN_COST_REDISTRIBUTION_PLAN", None)),
    "redistribute transform-optimization flag": Switch(
        "torch.distributed.tensor._redistribute",
        *_attr("_DISABLE_REDISTRIBUTE_TRANSFORM_OPTIMIZATION", False)),
}


def snapshot(last: dict[str, Any] | None = None) -> dict[str, Any]:
    """The current values of every switch whose module is imported; ``last`` itself if it
    holds them already (Note [cheap switch snapshots]). Saved dicts are never mutated, so
    ranks whose values agree can share one."""
    mods = sys.modules
    count, module_names, module_objects, live = _active
    if len(mods) != count or tuple(map(mods.get, module_names)) != module_objects:
        live = _look_up_live()  # a module was imported or removed since the last call
    names, reads, modules, copies = live
    values = tuple(map(_call, reads, modules))  # C-level: no Python frame per switch
    if last is not None and values == tuple(last.values()):
        return last
    return {name: v if copy is None else copy(v) for name, v, copy in zip(names, values, copies)}


def _look_up_live() -> tuple[tuple[str, ...], tuple[Callable[[Any], Any], ...],
                             tuple[Any, ...], tuple[Callable[[Any], Any] | None, ...]]:
    """(names, reads, modules, copies) of the switches whose module is imported."""
    mods = sys.modules
    switches = [(name, s) for name, s in SWITCHES.items() if s.module in mods]
    live = (tuple(name for name, _ in switches), tuple(s.read for _, s in switches),
            tuple(mods[s.module] for _, s in switches), tuple(s.copy for _, s in switches))
    module_names = tuple({s.module: None for _, s in switches})
    _active[:] = [len(mods), module_names, tuple(map(mods.get, module_names)), live]
    return live


_call = getattr(operator, "call", lambda f, *args: f(*args))  # operator.call: Python 3.11+
# len(sys.modules) when looked, the switches' module names, those modules, what
# _look_up_live found
_active: list[Any] = [-1, (), (), ((), (), (), ())]


def restore(saved: dict[str, Any]) -> None:
    mods = sys.modules
    for name, value in saved.items():
        s = SWITCHES[name]
        s.set(mods[s.module], value)


_FORKED = tuple((name, s.fork) for name, s in SWITCHES.items() if s.fork is not None)


def own(saved: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    """``saved`` (a rank's switches), with a copy of its own of each object it still shares
    with the world's ``baseline`` (Note [values and objects]); ``saved`` itself if none, and
    never changed (saved dicts may be shared between ranks)."""
    for name, fork in _FORKED:
        value = saved.get(name)
        if value is not None and value is baseline.get(name):
            saved = {**saved, name: fork(value)}
    return saved


# -- what could not be isolated ------------------------------------------------------------

class IsolationWarning(UserWarning):
    """Process-wide state was shared between a world's ranks (Note [per-rank process state])."""


def adopt(baseline: dict[str, Any], seen: dict[str, Any]) -> list[str]:
    """Switches in ``seen`` (a rank's snapshot) whose module was imported inside the world:
    add them to the world's ``baseline``, which the other ranks start from; return those that
    the importing rank had already changed (shared with the other ranks: the limit)."""
    changed = []
    for name, value in seen.items():
        if name not in baseline:
            fork = SWITCHES[name].fork  # the importing rank's object stays its own
            baseline[name] = value if fork is None else fork(value)
            if not SWITCHES[name].fresh(value):
                changed.append(name)
    return changed


def warn_shared(names: list[str]) -> None:
    """Warn (from the caller of simpg.run) about switches the ranks shared."""
    if names:
        modules = sorted({SWITCHES[name].module for name in names})
        warnings.warn(f"{', '.join(modules)} was first imported inside a simpg world and the "
                      f"importing rank changed {', '.join(sorted(set(names)))} before its first "
                      "collective: the other ranks started from its values, not a fresh "
                      "process's (Note [per-rank process state]); import it before simpg.run",
                      IsolationWarning, stacklevel=3)


__all__ = ["IsolationWarning", "SWITCHES", "adopt", "own", "restore", "snapshot", "warn_shared"]
