"""``CommDebugMode``: count the collectives dtensor issues, by kind and by module.

A drop-in for ``torch.distributed.tensor.debug.CommDebugMode`` (same names, same result
shapes) that counts what *our* runtime issues, on any backend: the entry points of
``dtensor/comm/collectives.py`` report each call here while a mode is open in the calling
rank. Counts are per rank: open the mode inside the rank's program (each simpg rank is a
thread with its own context; under torchrun each process is a rank).

>>> import torch, simpg
>>> from dtensor import Replicate, Shard, distribute_tensor, init_device_mesh
>>> def body():
...     mesh = init_device_mesh("cpu", (2,))
...     t = distribute_tensor(torch.arange(8.0), mesh, [Shard(0)])
...     with CommDebugMode() as mode:
...         t.redistribute(mesh, [Replicate()])
...     return dict(mode.get_comm_counts_by_kind())
>>> simpg.run(body, 2)
[{'all_gather': 1}, {'all_gather': 1}]

Note [recording collectives]
Each entry point of ``dtensor/comm/collectives.py``, once its arguments are checked, runs
``if _comm_log.get(): _note(...)``: when no mode is open anywhere, a collective costs one
ContextVar lookup (20 ns). The variable holds, in a
context that opened modes, the tuple of them (innermost last; every one records, as torch's
nested modes all see an op). Unset, it reads as its default, ``_OPEN``: the process-wide set of
open modes, so it is falsy (nothing to do) until some rank opens a mode. When it is truthy but
unset here, ``_note`` looks for the modes in the context that launched the current backward:
autograd runs GPU backward nodes on its own device threads, which do not share the caller's
ContextVars, but it carries the launching thread's ``contextvars.Context`` to them in ATen's
thread-local state (``torch.autograd.graph._engine_run_backward`` stashes it as "context").
On CPU, backward runs on the calling thread and the first lookup already finds the modes.

Note [counting keys]
``get_comm_counts()`` is keyed like torch's: ``torch.ops.c10d_functional`` op packets
(``all_gather_into_tensor``, ``reduce_scatter_tensor``, ``all_reduce``, ``all_to_all_single``),
so code written against torch's mode (``counts[funcol.all_reduce]``) runs unchanged; a missing
key reads 0, as in torch's defaultdict. ``get_comm_counts_by_kind()`` is the readable view, a
``Counter`` keyed by the name of the ``dtensor.comm`` function (``"all_gather"``,
``"all_to_all"``, ``"all_reduce"``, ``"reduce_scatter"``): the same names as the planner's
steps and ``simpg.trace().count()``, so the three can be compared directly. Two views, not one
dict accepting both kinds of key: such a dict would break ``in``, ``len``, ``==`` and iteration
for code that expects one or the other. ``comm_counts_by_kind(torch_mode.get_comm_counts())``
gives torch's counts the readable keys too.

What is counted is what dtensor asked for: a ``reduce_scatter`` that a backend without one runs
as an ``all_to_all`` (Note [Backend capabilities] in dtensor/comm/capabilities.py) counts
once, as a ``reduce_scatter``. Not counted: collectives outside ``dtensor/comm/collectives.py``
(``distribute_tensor``'s broadcast of the source rank's tensor; the ``all_gather_object`` of
debug checks) and anything a program issues through ``torch.distributed`` itself.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import itertools
import json
import math
import re
import threading
import weakref
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.autograd.graph import register_multi_grad_hook
from torch.nn.modules.module import register_module_forward_pre_hook
from torch.utils._pytree import tree_flatten

__all__ = ["KINDS", "CommDebugMode", "CommRecord", "ModuleTracker", "comm_counts_by_kind"]

KINDS = ("all_gather", "all_to_all", "all_reduce", "reduce_scatter")
# Which torch.ops.c10d_functional op each kind is counted as (Note [counting keys]).
_FUNCOL_NAMES = {"all_gather": "all_gather_into_tensor", "all_to_all": "all_to_all_single",
                 "all_reduce": "all_reduce", "reduce_scatter": "reduce_scatter_tensor"}

# Note [recording collectives]: the default is the process-wide set of open modes.
_OPEN: set[CommDebugMode] = set()
_comm_log: contextvars.ContextVar[Any] = contextvars.ContextVar("dtensor_comm_debug",
                                                                default=_OPEN)


# torch 2.13 stashes the context that called backward() in ATen's thread-local state
_HAS_TLS = hasattr(torch._C, "_is_key_in_tls") and hasattr(torch._C, "_get_obj_in_tls")


@functools.cache
def _ops() -> dict[str, Any]:
    """kind -> ``torch.ops.c10d_functional`` packet. Importing torch's functional collectives
    defines that namespace (30 ms), so it happens on first use, not at ``import dtensor``."""
    import torch.distributed._functional_collectives  # defines c10d_functional

    ns = torch.ops.c10d_functional
    return {kind: getattr(ns, name) for kind, name in _FUNCOL_NAMES.items()}


@functools.cache
def _kinds_by_op() -> dict[Any, str]:
    """Every op torch's CommDebugMode may report for one of our kinds -> that kind."""
    out: dict[Any, str] = {op: kind for kind, op in _ops().items()}
    native = torch.ops._c10d_functional
    out.update({getattr(native, name): kind for kind, name in _FUNCOL_NAMES.items()})
    c10d = torch.ops.c10d
    out.update({c10d.allgather_: "all_gather", c10d._allgather_base_: "all_gather",
                c10d.alltoall_: "all_to_all", c10d.alltoall_base_: "all_to_all",
                c10d.allreduce_: "all_reduce", c10d.reduce_scatter_: "reduce_scatter",
                c10d._reduce_scatter_base_: "reduce_scatter"})
    if hasattr(torch.ops._dtensor, "shard_dim_alltoall"):  # torch's Shard(i) -> Shard(j)
        out[torch.ops._dtensor.shard_dim_alltoall] = "all_to_all"
    return out


def comm_counts_by_kind(counts: Mapping[Any, int]) -> Counter[str]:
    """Op-keyed counts (ours or torch's ``get_comm_counts()``) keyed by kind name instead;
    ops that are none of ``KINDS`` keep ``str(op)``.

    >>> comm_counts_by_kind({torch.ops.c10d.allreduce_: 2})
    Counter({'all_reduce': 2})
    """
    names = _kinds_by_op()
    out: Counter[str] = Counter()
    for op, n in counts.items():
        if n:
            out[names.get(op, str(op))] += n
    return out


@dataclass(frozen=True, slots=True)
class CommRecord:
    """One collective this rank issued inside a ``CommDebugMode``.

    ``path`` runs from ``"Global"`` to the innermost module (``module``) running when it was
    issued; in backward, the module whose backward was running. Bytes are this rank's:
    ``input_bytes`` what it contributed, ``output_bytes`` what it got back.

    >>> r = CommRecord("all_reduce", ("Global", "MLP"), "forward", (0, 1), ((4,),),
    ...                torch.float32, 16, 16)
    >>> (r.module, r.group_size, str(r.op))
    ('MLP', 2, 'c10d_functional.all_reduce')
    """

    kind: str
    path: tuple[str, ...]
    phase: str  # "forward" or "backward"
    group_ranks: tuple[int, ...]  # global ranks of the group, in group-rank order
    input_shapes: tuple[tuple[int, ...], ...]
    dtype: torch.dtype
    input_bytes: int
    output_bytes: int

    @property
    def module(self) -> str:
        return self.path[-1]

    @property
    def group_size(self) -> int:
        return len(self.group_ranks)

    @property
    def op(self) -> Any:
        """The ``torch.ops.c10d_functional`` packet this kind is counted as."""
        return _ops()[self.kind]

    def __str__(self) -> str:
        shapes = ", ".join(str(tuple(s)) for s in self.input_shapes)
        return (f"{self.kind} over ranks {list(self.group_ranks)}: {shapes} "
                f"{str(self.dtype).removeprefix('torch.')}, {self.input_bytes} bytes in, "
                f"{self.output_bytes} bytes out")


def _modes_here() -> tuple[CommDebugMode, ...]:
    """The modes open for the running rank (Note [recording collectives])."""
    modes = _comm_log.get()
    if modes is not _OPEN:
        return modes
    if not _OPEN or not _HAS_TLS or not torch._C._is_key_in_tls("context"):
        return ()
    launched = torch._C._get_obj_in_tls("context")  # the context that called backward()
    return launched.get(_comm_log, ()) if launched is not None else ()


def _note(kind: str, group: dist.ProcessGroup, inputs: Sequence[torch.Tensor],
          output_shapes: Sequence[Sequence[int]]) -> None:
    """Called by each ``dtensor.comm`` entry point while some mode is open somewhere."""
    modes = _modes_here()
    if not modes:
        return
    first = inputs[0]
    size = first.element_size()
    ranks = tuple(dist.get_process_group_ranks(group))
    shapes = tuple(tuple(int(d) for d in t.shape) for t in inputs)
    in_bytes = sum(t.numel() for t in inputs) * size
    out_bytes = sum(math.prod(int(d) for d in s) for s in output_shapes) * size
    for mode in modes:
        mode._add(kind, ranks, shapes, first.dtype, in_bytes, out_bytes)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Record nothing inside: for a collective ``dtensor.comm`` builds from another one that
    it has already recorded under its own kind.

    >>> with quiet():
    ...     pass
    """
    token = _comm_log.set(())
    try:
        yield
    finally:
        _comm_log.reset(token)


# ---------------------------------------------------------------------------------------------
# Module tracking.
#
# Note [module boundaries]
# Forward: a global pre-forward hook pushes the module; a forward hook added to the module
# itself, after its own hooks, pops it, so the output redistribute a parallel style does in
# its hook counts for that module (as in torch, whose tracker does the same).
# Backward: a module's backward starts when the first gradient of its outputs arrives, and
# ends when the gradients of all its inputs and all its parameters are computed
# (``register_multi_grad_hook``, "any" and "all"). The start is hooked twice, on the raw
# outputs by a forward hook put first and on the final outputs by the one put last: gradients
# reach the final outputs first when a style's hook redistributed them (its backward
# collectives are the module's), and a hook that the module's own forward hook puts on its
# raw outputs (fully_shard's re-gather before the module's backward) runs after ours. Waiting
# for the parameters' gradients makes a reduce-scatter of them (fully_shard) the module's.
# A module whose inputs and parameters need no gradient stays current until backward ends.
#
# torch's global module hooks are process-wide, but modes are per rank: one global pre-forward
# hook is installed while any mode is open, and each call is handed to the modes of the calling
# context only (a rank's modules run on that rank's thread).

_hooks_lock = threading.Lock()
_hooks: list[Any] = []  # [handle] while any mode is open


def _install_global_hooks() -> None:
    with _hooks_lock:
        if not _hooks:
            _hooks.append(register_module_forward_pre_hook(_global_pre_forward))


def _remove_global_hooks() -> None:
    with _hooks_lock:
        if _hooks and not _OPEN:
            _hooks.pop().remove()


def _global_pre_forward(module: nn.Module, args: Any) -> None:
    for mode in _modes_here():
        mode.advanced_module_tracker._pre_forward(module, args)


def _grad_tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor) and t.requires_grad]


def _in_backward() -> bool:
    return torch._C._current_graph_task_id() != -1  # per thread: the graph task running here


class ModuleTracker:
    """Which module is running, forward or backward, for one mode on one rank, and what each
    module seen holds (its type, depth, parameters and their placements).

    Names follow torch's ``ModTracker``: a root module is its class name, a child is its
    parent's name, a dot and its attribute (``"MLP.net1"``). See Note [module boundaries].

    >>> tracker = ModuleTracker()
    >>> tracker.name
    'Global'
    """

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.module_helper_dict: dict[str, dict[str, Any]] = {"Global": {"depth": 0}}
        self.module_parameters_dict: dict[str, dict[str, torch.Tensor]] = {}
        self.sharding_dict: dict[str, Any] = {}
        self.parent_dict: dict[str, list[str]] = {}
        self.module_parents_dict: dict[str, set[str]] = {"Global": set()}
        self._paths: dict[str, tuple[str, ...]] = {"Global": ("Global",)}
        self._names: weakref.WeakKeyDictionary[nn.Module, str] = weakref.WeakKeyDictionary()
        self._module_hooks: weakref.WeakKeyDictionary[nn.Module, list[Any]] = (
            weakref.WeakKeyDictionary())
        # forward: one entry per module call running, with the graph tasks whose backward
        # through that call has started (shared by the call's two output hooks)
        self._fw: list[tuple[str, set[int]]] = [("Global", set())]
        self._bw: list[str] = []
        # the module whose backward ended last in this pass: what the engine runs after it
        # (a reduce-scatter fully_shard left in flight, waited for by the next module or at
        # the end of the pass) is that module's work, not "Global"
        self._bw_last: str | None = None
        self._bw_task: int | None = None  # the graph task whose end will clear ``_bw``
        self._grad_hooks: dict[int, Any] = {}  # end-of-backward hooks not yet fired
        self._hook_ids = itertools.count()
        self._spent: list[Any] = []  # fired ones, removed outside the hook that fired them
        self._open = False

    # -- what a record needs ----------------------------------------------------------------
    @property
    def is_bw(self) -> bool:
        """Whether this thread is running a backward pass."""
        return _in_backward()

    @property
    def name(self) -> str:
        """The innermost module running now ("Global" outside every module)."""
        if _in_backward():
            return self._bw[-1] if self._bw else self._bw_last or "Global"
        return self._fw[-1][0]

    def path(self) -> tuple[str, ...]:
        """"Global", then the ancestors the current module had when it ran forward, then it."""
        name = self.name
        return self._paths.get(name, ("Global", name))

    # -- open / close -----------------------------------------------------------------------
    def __enter__(self) -> ModuleTracker:
        self._reset()
        self._open = True
        return self

    def __exit__(self, *exc: object) -> None:
        self._open = False
        for handles in list(self._module_hooks.values()):
            for handle in handles:
                handle.remove()
        for handle in [*self._grad_hooks.values(), *self._spent]:
            handle.remove()
        self._module_hooks = weakref.WeakKeyDictionary()
        self._grad_hooks, self._spent = {}, []

    # -- forward hooks -----------------------------------------------------------------------
    def _name_of(self, module: nn.Module) -> str:
        if module not in self._names:  # a root: name it and, once, all its descendants
            self._names[module] = type(module).__name__
            for prefix, sub in module.named_modules():
                if prefix:
                    self._names.setdefault(sub, f"{type(module).__name__}.{prefix}")
        return self._names[module]

    def _pre_forward(self, module: nn.Module, args: Any) -> None:
        if not self._open:
            return
        name = self._name_of(module)
        if module not in self._module_hooks:  # Note [module boundaries]
            self._module_hooks[module] = [
                module.register_forward_hook(self._raw_output, prepend=True),
                module.register_forward_hook(self._post_forward, always_call=True)]
        if _in_backward():  # a forward recomputed in backward (activation checkpointing)
            self._bw.append(name)
            return
        self._flush_spent()
        parent = self._fw[-1][0]
        path = self._paths.setdefault(name, self._paths[parent] + (name,))
        self._fw.append((name, set()))
        self._learn(module, name, parent, path)
        if torch.is_grad_enabled():
            needed = _grad_tensors(args) + [p for p in module.parameters() if p.requires_grad]
            if needed:
                key = next(self._hook_ids)
                self._grad_hooks[key] = register_multi_grad_hook(
                    needed, functools.partial(self._end_backward, name, key))

    def _raw_output(self, module: nn.Module, args: Any, output: Any) -> None:
        if self._open and not _in_backward() and self._fw[-1][0] == self._name_of(module):
            self._watch_outputs(output)

    def _post_forward(self, module: nn.Module, args: Any, output: Any) -> None:
        if not self._open:
            return
        name = self._name_of(module)
        if _in_backward():
            _remove_last(self._bw, name)
            return
        if self._fw[-1][0] == name:
            self._watch_outputs(output)
            self._fw.pop()

    def _watch_outputs(self, output: Any) -> None:
        name, started = self._fw[-1]
        outputs = _grad_tensors(output)
        if outputs:
            register_multi_grad_hook(outputs, functools.partial(
                self._start_backward, name, started), mode="any")

    # -- backward hooks ----------------------------------------------------------------------
    def _start_backward(self, name: str, started: set[int], _grad: Any) -> None:
        task = torch._C._current_graph_task_id()
        if not self._open or task in started:
            return
        started.add(task)
        # an outer module's output may be an inner one's (hooked later): keep the inner on top
        at = len(self._bw)
        while at and name in self._paths.get(self._bw[at - 1], ()) and self._bw[at - 1] != name:
            at -= 1
        self._bw.insert(at, name)
        if self._bw_task != task:  # forget what is left on the stack when this pass ends
            self._bw_task = task
            torch.autograd.Variable._execution_engine.queue_callback(self._backward_done)

    def _end_backward(self, name: str, key: int, _grads: Any) -> None:
        if not self._open:
            return
        _remove_last(self._bw, name)
        self._bw_last = name
        # a hook on a leaf (a parameter) outlives the graph: remove it, but not from inside
        # the hook call that is running it
        handle = self._grad_hooks.pop(key, None)
        if handle is not None:
            self._spent.append(handle)

    def _backward_done(self) -> None:
        self._bw.clear()
        self._bw_last = None
        self._bw_task = None
        self._flush_spent()

    def _flush_spent(self) -> None:
        for handle in self._spent:
            handle.remove()
        self._spent.clear()

    def _learn(self, module: nn.Module, name: str, parent: str, path: tuple[str, ...]) -> None:
        """Record the module's type, depth, parameters and placements (torch's layout)."""
        helper = self.module_helper_dict.setdefault(name, {})
        helper["module_type"] = str(type(module)).replace("<", "").replace(">", "")
        helper["depth"] = len(path) - 1
        for pname, param in module.named_parameters(recurse=False):
            self.module_parameters_dict.setdefault(name, {})[pname] = param.data
            # either runtime's DTensor: this module sits below dtensor.tensor (comm imports it)
            placements = getattr(param, "placements", None)
            if placements is not None:
                self.sharding_dict[f"{name}.{pname}"] = placements
                helper.setdefault("parameters", {})[pname] = str(placements)
        self.module_parents_dict.setdefault(name, set(path))
        children = self.parent_dict.setdefault(parent, [])
        if name not in children:
            children.append(name)

    # -- torch's printing helpers ------------------------------------------------------------
    def print_paramater_info(self) -> None:  # sic: torch's name
        print(self.module_parameters_dict)

    def print_sharding_info(self) -> None:
        for key, value in self.sharding_dict.items():
            print(f"{key}: {value}")


def _remove_last(stack: list[str], name: str) -> None:
    for i in range(len(stack) - 1, -1, -1):
        if stack[i] == name:
            del stack[i]
            return


# ---------------------------------------------------------------------------------------------


class CommDebugMode:
    """Count the collectives dtensor issues on this rank inside the block, by kind and by
    module, forward and backward (Notes [recording collectives], [counting keys]).

    Per-module counts include the module's descendants, and "Global" counts everything, as in
    torch. ``records`` keeps every collective (kind, module path, phase, group ranks, shapes,
    bytes). Entering clears the counts of a previous block. It sees the rank that opened it:
    open it inside each rank's program (a mode around ``simpg.run`` sees no rank).

    >>> import torch, simpg
    >>> from dtensor import Replicate, Shard, distribute_tensor, init_device_mesh
    >>> def body():
    ...     mesh = init_device_mesh("cpu", (2,))
    ...     t = distribute_tensor(torch.ones(4, 2), mesh, [Shard(0)])
    ...     with CommDebugMode() as mode:
    ...         t.sum(0).full_tensor()
    ...     funcol = torch.ops.c10d_functional
    ...     return mode.get_total_counts(), mode.get_comm_counts()[funcol.all_reduce]
    >>> simpg.run(body, 2)
    [(1, 1), (1, 1)]
    """

    def __init__(self) -> None:
        self.records: list[CommRecord] = []
        self.advanced_module_tracker = ModuleTracker()
        self._token: contextvars.Token[Any] | None = None

    # -- counts ------------------------------------------------------------------------------
    def get_total_counts(self) -> int:
        return len(self.records)

    def get_comm_counts(self) -> defaultdict[Any, int]:
        """Counts keyed by ``torch.ops.c10d_functional`` op packets; missing keys read 0."""
        out: defaultdict[Any, int] = defaultdict(int)
        for r in self.records:
            out[r.op] += 1
        return out

    def get_comm_counts_by_kind(self) -> Counter[str]:
        """Counts keyed by kind: ``"all_gather"``, ``"all_to_all"``, ``"all_reduce"``,
        ``"reduce_scatter"`` (the ``dtensor.comm`` functions; ``simpg.trace().count()``'s
        names)."""
        return Counter(r.kind for r in self.records)

    def get_module_counts(self, module: str, phase: str | None = None) -> Counter[str]:
        """Counts by kind issued while ``module`` (an fqn such as ``"MLP.net1"``, or
        ``"Global"``) or one of its descendants ran; ``phase`` "forward" or "backward" or both.
        """
        if phase not in (None, "forward", "backward"):
            raise ValueError(f"phase {phase!r}: expected 'forward', 'backward' or None")
        return Counter(r.kind for r in self.records
                       if module in r.path and (phase is None or r.phase == phase))

    @property
    def comm_module_counts(self) -> dict[str, dict[str, defaultdict[Any, int]]]:
        """torch's per-module table: fqn -> {"forward": {op: n}, "backward": {op: n}}, every
        ancestor of the issuing module included; "Global" always present."""
        out: dict[str, dict[str, defaultdict[Any, int]]] = {}
        for name in ["Global"] + [n for r in self.records for n in r.path]:
            out.setdefault(name, {"forward": defaultdict(int), "backward": defaultdict(int)})
        for r in self.records:
            for name in r.path:
                out[name][r.phase][r.op] += 1
        return out

    def get_parameter_info(self) -> dict[str, dict[str, torch.Tensor]]:
        return self.advanced_module_tracker.module_parameters_dict

    def get_sharding_info(self) -> dict[str, Any]:
        return self.advanced_module_tracker.sharding_dict

    # -- open / close ------------------------------------------------------------------------
    def __enter__(self) -> CommDebugMode:
        if self._token is not None:
            raise RuntimeError("this CommDebugMode is already open: a mode is entered once at "
                               "a time (open a new CommDebugMode to nest)")
        self.records = []
        self.advanced_module_tracker.__enter__()
        here = _comm_log.get()
        self._token = _comm_log.set((() if here is _OPEN else here) + (self,))
        _OPEN.add(self)
        _install_global_hooks()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        token, self._token = self._token, None
        if token is not None:
            _comm_log.reset(token)
        _OPEN.discard(self)
        _remove_global_hooks()
        self.advanced_module_tracker.__exit__()

    def _add(self, kind: str, ranks: tuple[int, ...], shapes: tuple[tuple[int, ...], ...],
             dtype: torch.dtype, in_bytes: int, out_bytes: int) -> None:
        tracker = self.advanced_module_tracker
        phase = "backward" if _in_backward() else "forward"
        self.records.append(CommRecord(kind, tracker.path(), phase, ranks, shapes, dtype,
                                       in_bytes, out_bytes))

    # -- reports -----------------------------------------------------------------------------
    def generate_comm_debug_tracing_table(self, noise_level: int = 3) -> str:
        """The module tree with each module's collectives, forward and backward.

        noise_level 0: module names and counts; 1: also module types and parameter
        placements; 2 and above: also each collective (shapes, dtype, group, bytes). torch's
        levels 1-3 list dispatched aten ops; we record collectives, not ops.
        """
        counts = self.comm_module_counts
        tracker = self.advanced_module_tracker
        lines: list[str] = []
        for fqn, helper in tracker.module_helper_dict.items():
            indent = "  " * (2 * helper["depth"])
            lines.append(f"{indent}{fqn}")
            if noise_level > 0:
                if "module_type" in helper:
                    lines.append(f"{indent}*module type: {helper['module_type']}")
                if "parameters" in helper:
                    lines.append(f"{indent}*Parameter List")
                    lines += [f"{indent} *{p}: {pl}" for p, pl in helper["parameters"].items()]
            inner = "  " * (2 * helper["depth"] + 2)
            for phase in ("forward", "backward"):
                phase_counts = counts.get(fqn, {}).get(phase, {})
                if not phase_counts:
                    continue
                lines.append(f"{indent}  {phase.upper()} PASS")
                lines += [f"\033[1;33m{inner}*{op}: {n}\033[0m"
                          for op, n in phase_counts.items()]
                if noise_level > 1:
                    lines += [f"\033[1;31m{inner}  {r}\033[0m" for r in self.records
                              if r.module == fqn and r.phase == phase]
        return "\n".join(lines) + "\n"

    def log_comm_debug_tracing_table_to_file(self, file_name: str = "comm_mode_log.txt",
                                             noise_level: int = 3) -> None:
        """``generate_comm_debug_tracing_table`` without its colours, written to a file."""
        table = re.sub(r"\x1B\[[0-?]*[ -/]*[@-~]", "",
                       self.generate_comm_debug_tracing_table(noise_level))
        with open(file_name, "w") as f:
            f.write(table)

    def generate_json_dump(self, file_name: str = "comm_mode_log.json",
                           noise_level: int = 3) -> None:
        """The module tree as torch's JSON (``fqn``, ``module_type``, ``parameters``,
        ``children``, ``collectives_forward``/``_backward``; the ``operations_*`` lists stay
        empty: we record collectives, not ops), plus ``records_forward``/``_backward`` with
        each collective at noise_level 2 and above."""
        with open(file_name, "w") as f:
            json.dump(self._json_tree("Global", noise_level), f, indent=4)

    def _json_tree(self, fqn: str, noise_level: int) -> dict[str, Any]:
        tracker = self.advanced_module_tracker
        helper = tracker.module_helper_dict.get(fqn, {})
        counts = self.comm_module_counts.get(fqn, {})
        node: dict[str, Any] = {
            "fqn": fqn,
            "module_type": helper.get("module_type", "") if noise_level > 0 else "",
            "parameters": (list(helper.get("parameters", {}).items())
                           if noise_level > 0 else []),
            "children": [],
        }
        for phase in ("forward", "backward"):
            node[f"collectives_{phase}"] = [(str(op), n)
                                            for op, n in counts.get(phase, {}).items()]
            node[f"operations_{phase}"] = []
            if noise_level > 1:
                node[f"records_{phase}"] = [str(r) for r in self.records
                                            if r.module == fqn and r.phase == phase]
        node["operations_checkpointing"] = []
        node["children"] = [self._json_tree(child, noise_level)
                            for child in tracker.parent_dict.get(fqn, [])]
        return node

    def __repr__(self) -> str:
        return f"CommDebugMode(get_total_counts()={self.get_total_counts()})"
