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
- a module first imported inside the world, by a rank, had no caller value to start from.
  A world imports, before it starts, every switch module whose package the caller imported
  (``import_switch_modules``: torch imports context parallel's rules lazily); a module whose
  package the caller never imported is still first imported by a rank, and the other ranks
  start from that rank's values when it first gives the CPU away. If it changed one by then
  (entered ``loss_parallel`` before its first collective), ``simpg.run`` warns
  (``IsolationWarning``). Import torch.distributed.tensor first;
- a rank's copy of a table or object is one level deep: its containers and tensors are
  copied, what they point to further (a strategy function, a mesh, a group) is shared;
- worlds run side by side (``simpg.run`` from two threads): a caller's snapshot reads the
  values in force, which may be those of the other world's rank that ran last;
- code that runs without the CPU sees whichever rank's values are current: threads a rank
  starts itself (they run beside the ranks, not in turn), and ranks unwinding after the world
  failed (the world's result is the failure then).
"""

from __future__ import annotations

import copy
import importlib
import operator
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import torch


# Note [values and objects]
# A switch holds either a value or an object that torch mutates in place, and each kind is
# made per rank in its own way; sharing one mutable thing between ranks is the bug to avoid.
# - A value that is replaced, never mutated (the default dtype, the redistribute flags, a
#   function torch monkey-patches into ``torch.nn.functional``): the saved value is the
#   value itself.
# - An object or table that torch mutates in place (the DTensor RNG tracker's
#   ``distribute_region_enabled``; DTensor's custom op handlers, which ``loss_parallel``
#   fills on entry and empties on exit; the sharding propagator's strategy tables, which
#   context parallel's rules overwrite and restore): each rank gets its own copy
#   (``Switch.fork``) of any such object it still shares with the world's baseline when it
#   first takes the CPU (``own``), as a forked process has its own copy of its parent's, and
#   a hand-over only rebinds the attribute to the running rank's object. One a rank makes
#   itself (context parallel binds a new handler dict) is its own already. Two switches that
#   hold one object (context parallel keeps the handler table it found in
#   ``existing_custom_ops``) get one copy between them, so the rank's aliasing is kept.
#   ``adopt`` keeps a copy in the baseline, so the importing rank's objects stay its own.
#   Before this, a table was one live dict whose contents were swapped: context parallel,
#   which rebinds the attribute, then left one rank's entries in another's table.


@dataclass(frozen=True)
class Switch:
    """One piece of process-wide state, saved and restored per rank.

    Note [cheap switch snapshots]: ``snapshot`` runs at every hand-over, so ``read`` is a
    C-level getter (``operator.attrgetter`` / ``methodcaller``: no Python frame) of the live
    value or object, compared by identity first; nothing is copied at a hand-over.
    ``source`` says where torch keeps the state and who changes it (the inventory).
    """

    module: str  # only touched once this module is imported
    read: Callable[[Any], Any]  # module -> the live value (not a copy)
    set: Callable[[Any, Any], None]  # (module, saved value) -> None
    fresh: Callable[[Any], bool]  # whether a value is what a fresh process has
    # an object mutated in place -> a rank's own copy of it (Note [values and objects])
    fork: Callable[[Any], Any] | None = None
    source: str = ""


def _attr(name: str, default: Any = None, *,
          fresh: Callable[[Any], bool] | None = None) -> tuple[
        Callable[[Any], Any], Callable[[Any, Any], None], Callable[[Any], bool]]:
    """(read, set, fresh) of the attribute at dotted ``name`` below a module."""
    owner, _, leaf = name.rpartition(".")
    get_owner = operator.attrgetter(owner) if owner else (lambda m: m)
    return (operator.attrgetter(name), (lambda m, v: setattr(get_owner(m), leaf, v)),
            fresh or (lambda v: v is default))


def _always(value: Any) -> bool:
    return True


def _no_scoped_handlers(value: dict) -> bool:
    """No handlers of loss_parallel or context parallel: what a fresh process has."""
    for module, table in (("torch.distributed.tensor.parallel.loss", "customized_loss_ops"),
                          (_CP_ATTENTION, "custom_ops")):
        found = sys.modules.get(module)
        if found is not None and set(value) & set(getattr(found, table, ())):
            return False
    return True


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


def _fork_table(table: Any) -> Any:
    return None if table is None else copy.copy(table)


class PropagatorTable(dict):
    """A rank's copy of one of the sharding propagator's tables, counting its changes: while
    it has none it holds what the world's baseline does, which simpg.propagation_share reads
    without comparing a thousand entries."""

    changes = 0

    def __setitem__(self, key: Any, value: Any) -> None:
        self.changes += 1
        super().__setitem__(key, value)

    def __delitem__(self, key: Any) -> None:
        self.changes += 1
        super().__delitem__(key)

    def __ior__(self, other: Any) -> PropagatorTable:
        self.changes += 1
        return super().__ior__(other)

    def pop(self, *args: Any) -> Any:
        self.changes += 1
        return super().pop(*args)

    def popitem(self) -> Any:
        self.changes += 1
        return super().popitem()

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self.changes += 1
        return super().setdefault(key, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self.changes += 1
        super().update(*args, **kwargs)

    def clear(self) -> None:
        self.changes += 1
        super().clear()


def _fork_propagator_table(table: Any) -> Any:
    return None if table is None else PropagatorTable(table)


_API = "torch.distributed.tensor._api"
_CP_ATTENTION = "torch.distributed.tensor.experimental._context_parallel._attention"
_CP_RULES = "torch.distributed.tensor.experimental._context_parallel._sharding_rules"
_PROPAGATOR = "DTensor._op_dispatcher.sharding_propagator."


def _sdpa_flag(backend: str) -> Switch:
    return Switch("torch._C", operator.methodcaller(f"_get_{backend}_sdp_enabled"),
                  lambda m, v: getattr(m, f"_set_sdp_use_{backend}")(v), _always,
                  source=f"torch._C: sdpa_kernel() sets the {backend} backend on or off")


def _propagator_table(name: str, who: str) -> Switch:
    return Switch(_API, *_attr(_PROPAGATOR + name, fresh=_always),
                  fork=_fork_propagator_table, source=f"ShardingPropagator.{name}: {who}")


# The inventory of the process-wide state torch 2.13's DTensor, its parallel styles,
# loss_parallel, context parallel, the RNG tracker, the op dispatcher and the sharding
# propagator change at run time (read from their source), each with how simpg makes it per
# rank. What needs nothing (already per OS thread, or keyed by the per-rank mesh) is listed
# in PER_THREAD_ALREADY below.
SWITCHES: dict[str, Switch] = {
    "default dtype": Switch("torch", operator.methodcaller("get_default_dtype"),
                            lambda m, v: m.set_default_dtype(v), _always,
                            source="a C++ global: torch.set_default_dtype"),
    "DTensor custom op handlers": Switch(
        _API, *_attr("DTensor._op_dispatcher._custom_op_handlers", fresh=_no_scoped_handlers),
        fork=_fork_table,
        source="OpDispatcher._custom_op_handlers: loss_parallel() updates and pops it; "
               "context parallel binds a new dict and binds the old one back"),
    "DTensor RNG tracker": Switch("torch.distributed.tensor._random",
                                  *_attr("_rng_tracker", None), fork=_fork_object,
                                  source="_random._rng_tracker: manual_seed, random ops "
                                         "(distribute_region_enabled set in place)"),
    "redistribute min-cost plan flag": Switch(
        "torch.distributed.tensor._redistribute",
        *_attr("_FORCE_MIN_COST_REDISTRIBUTION_PLAN", None),
        source="use_min_cost_redistribution_plan()"),
    "redistribute transform-optimization flag": Switch(
        "torch.distributed.tensor._redistribute",
        *_attr("_DISABLE_REDISTRIBUTE_TRANSFORM_OPTIMIZATION", False),
        source="disable_redistribute_transform_optimization()"),
    "sharding strategies": _propagator_table(
        "op_strategy_funcs", "register_sharding, context parallel's _op_strategy_context"),
    "sharding strategy schema info": _propagator_table(
        "op_to_schema_info", "register_sharding, context parallel's _op_strategy_context"),
    "single-dim sharding strategies": _propagator_table(
        "op_single_dim_strategy_funcs", "register_single_dim_strategy"),
    "single-dim strategy schema info": _propagator_table(
        "op_to_schema_info_for_single_dim_strategy", "register_single_dim_strategy"),
    "sharding rules": _propagator_table("op_to_rules", "register_sharding_prop_rule"),
    "context-parallel saved op handlers": Switch(
        _CP_ATTENTION, *_attr("existing_custom_ops", fresh=_always), fork=_fork_table,
        source="_attention.existing_custom_ops: the handler table context parallel binds "
               "back on exit (the same dict as DTensor's at import)"),
    "context-parallel options": Switch(
        _CP_ATTENTION, *_attr("_cp_options", fresh=_always), fork=_fork_object,
        source="_attention._cp_options: context_parallel() sets enable_load_balance, "
               "set_rotate_method() the rotate method"),
    "context-parallel dispatch mode": Switch(
        _CP_ATTENTION, *_attr("_dispatch_mode", fresh=_always),
        source="_attention._dispatch_mode: context_parallel() and _context_parallel_shard()"),
    "context-parallel replaced functions": Switch(
        _CP_ATTENTION, *_attr("_replaced_functions", fresh=_always), fork=_fork_table,
        source="_attention._replaced_functions: the monkey-patched SDPA's original"),
    "context-parallel entered rules": Switch(
        _CP_RULES, *_attr("_cp_strategy_contexts", fresh=lambda v: not v), fork=_fork_table,
        source="_sharding_rules._cp_strategy_contexts: register_cp_sharding_rules()"),
    "context-parallel replaced rules": Switch(
        _CP_RULES, *_attr("_original_strategies", fresh=lambda v: not v), fork=_fork_table,
        source="_sharding_rules._original_strategies: register_cp_sharding_rules()"),
    "scaled_dot_product_attention": Switch(
        "torch.nn.functional", *_attr("scaled_dot_product_attention",
                                      fresh=lambda v: v is torch._C._nn.scaled_dot_product_attention),
        source="context_parallel() monkey-patches torch.nn.functional's SDPA"),
    **{f"SDPA {name} backend": _sdpa_flag(name)
       for name in ("flash", "mem_efficient", "math", "cudnn", "overrideable")},
    "SDPA backend priority": Switch(
        "torch._C", operator.methodcaller("_get_sdp_priority_order"),
        lambda m, v: m._set_sdp_priority_order(v), _always,
        source="torch._C: sdpa_kernel(..., set_priority=True)"),
}

# State torch's DTensor keeps that needs no switch on simpg, and why.
PER_THREAD_ALREADY: dict[str, str] = {
    "implicit_replication()": "a C++ thread-local (torch._C._set_dtensor_allow_implicit_"
                              "replication): each rank is its own thread",
    "the sharding propagation cache": "ShardingPropagator.propagate_op_sharding is a "
                                      "LocalLRUCache (threading.local) and the C++ fast path "
                                      "cache is per thread: Note [a fresh thread per rank]; "
                                      "below both, a world shares the decisions every rank "
                                      "would make alike (simpg.propagation_share)",
    "_gen_transform_infos, _propagate_tensor_meta_cached, the redistribute planner cache":
        "process-wide, keyed by the mesh, whose identity is the rank's own "
        "(simpg.mesh_identity)",
    "CommDebugMode, DTensor's dispatch modes": "TorchDispatchMode stacks are per thread",
    "torch's CPU generator": "saved and restored at each hand-over (simpg.scheduler)",
}


def import_switch_modules() -> None:
    """Import each switch's module whose package is imported already (torch imports some of
    them lazily, e.g. context parallel's rules on first entry), so that a world's ranks start
    from a fresh process's values instead of the first importing rank's (the limit in Note
    [per-rank process state]). Cheap once they are imported."""
    mods = sys.modules
    for module in _SWITCH_MODULES:
        if module not in mods and module.rpartition(".")[0] in mods:
            importlib.import_module(module)


def snapshot(last: dict[str, Any] | None = None) -> dict[str, Any]:
    """The current values of every switch whose module is imported; ``last`` itself if it
    holds them already (Note [cheap switch snapshots]). Saved dicts are never mutated, so
    ranks whose values agree can share one."""
    mods = sys.modules
    count, module_names, module_objects, live = _active
    if len(mods) != count or tuple(map(mods.get, module_names)) != module_objects:
        live = _look_up_live()  # a module was imported or removed since the last call
    names, reads, modules, objects = live
    values = tuple(map(_call, reads, modules))  # C-level: no Python frame per switch
    if last is not None:
        before = tuple(last.values())
        if values == before and all(map(operator.is_, objects(values), objects(before))):
            return last
    return dict(zip(names, values))


def _objects_of(names: tuple[str, ...]) -> Callable[[tuple], tuple]:
    """A C-level getter of the entries of forked switches in a tuple of ``names``' values."""
    at = [i for i, name in enumerate(names) if SWITCHES[name].fork is not None]
    if not at:
        return lambda values: ()
    if len(at) == 1:
        return lambda values: (values[at[0]],)
    return operator.itemgetter(*at)


def _look_up_live() -> tuple[tuple[str, ...], tuple[Callable[[Any], Any], ...],
                             tuple[Any, ...], Callable[[tuple], tuple]]:
    """(names, reads, modules, object getter) of the switches whose module is imported."""
    mods = sys.modules
    switches = [(name, s) for name, s in SWITCHES.items() if s.module in mods]
    names = tuple(name for name, _ in switches)
    live = (names, tuple(s.read for _, s in switches),
            tuple(mods[s.module] for _, s in switches), _objects_of(names))
    module_names = tuple({s.module: None for _, s in switches})
    _active[:] = [len(mods), module_names, tuple(map(mods.get, module_names)), live]
    return live


_call = getattr(operator, "call", lambda f, *args: f(*args))  # operator.call: Python 3.11+
# len(sys.modules) when looked, the switches' module names, those modules, what
# _look_up_live found
_active: list[Any] = [-1, (), (), ((), (), (), lambda values: ())]


def restore(saved: dict[str, Any], in_force: dict[str, Any] | None = None) -> bool:
    """Put ``saved`` in force; with ``in_force`` (the snapshot in force now), only what
    differs: values by equality, objects by identity (two ranks' equal tables are still two
    tables). Whether anything was set."""
    mods = sys.modules
    if in_force is None or in_force.keys() != saved.keys():
        for name, value in saved.items():
            s = SWITCHES[name]
            s.set(mods[s.module], value)
        return True
    changed = False
    for (name, value), now in zip(saved.items(), in_force.values()):
        # a forked table is never compared by value: two ranks' tables are two tables, and
        # comparing a thousand entries would cost more than the hand-over itself
        if value is not now and (name in _FORKED_NAMES or value != now):
            s = SWITCHES[name]
            s.set(mods[s.module], value)
            changed = True
    return changed


_SWITCH_MODULES = tuple({s.module: None for s in SWITCHES.values()})
_FORKED = tuple((name, s.fork) for name, s in SWITCHES.items() if s.fork is not None)
_FORKED_NAMES = frozenset(name for name, _ in _FORKED)


def own(saved: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    """``saved`` (a rank's switches), with a copy of its own of each object it still shares
    with the world's ``baseline`` (Note [values and objects]); ``saved`` itself if none, and
    never changed (saved dicts may be shared between ranks). Switches that share an object
    in the baseline share one copy, as they share the object in a forked process."""
    copies: dict[int, Any] = {}  # id of a baseline object -> this rank's copy of it
    for name, _ in _FORKED:
        mine, theirs = saved.get(name), baseline.get(name)
        if theirs is not None and mine is not None and mine is not theirs:
            copies.setdefault(id(theirs), mine)
    for name, fork in _FORKED:
        value = saved.get(name)
        if value is not None and value is baseline.get(name):
            mine = copies.get(id(value))
            if mine is None:
                mine = copies[id(value)] = fork(value)
            saved = {**saved, name: mine}
    return saved


# -- what could not be isolated ------------------------------------------------------------

class IsolationWarning(UserWarning):
    """Process-wide state was shared between a world's ranks (Note [per-rank process state])."""


def adopt(baseline: dict[str, Any], seen: dict[str, Any]) -> list[str]:
    """Switches in ``seen`` (a rank's snapshot) whose module was imported inside the world:
    add them to the world's ``baseline``, which the other ranks start from; return those that
    the importing rank had already changed (shared with the other ranks: the limit)."""
    changed = []
    # an object the importing rank already holds under a known switch (context parallel's
    # existing_custom_ops is the rank's handler table): the baseline's object of that switch
    known = {id(seen[name]): baseline[name] for name in baseline
             if name in seen and SWITCHES[name].fork is not None}
    for name, value in seen.items():
        if name not in baseline:
            fork = SWITCHES[name].fork  # the importing rank's object stays its own
            if fork is None:
                baseline[name] = value
            else:
                baseline[name] = known[id(value)] if id(value) in known else fork(value)
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


__all__ = ["IsolationWarning", "PER_THREAD_ALREADY", "PropagatorTable", "SWITCHES", "adopt",
           "import_switch_modules", "own", "restore", "snapshot", "warn_shared"]
