"""Eager code that follows a plan op by op: each aten call on DTensors takes the strategy the
plan chose for the matching node of the captured graph.

Note [following a plan in eager code]
A captured training step is the trace of the very aten calls the eager step makes: the
module's forward, the loss, and the backward that the autograd engine runs in the same order
(``make_fx`` traced ``torch.autograd.grad``). So the eager calls can be matched to the graph's
nodes, and each call made as the plan planned it: its DTensor arguments moved to the chosen
strategy's input placements (the plan's reshards, nothing else), the call run by the
dispatcher (which then has nothing left to move), and its result moved to the planned output
placements if the dispatcher picked another strategy among those with nothing to move.

Matching is by key, not by position: ``(op, global shapes of its tensor arguments)``, each
key a queue of the graph's nodes in graph order, a call taking the first node left. The
layers of a model repeat keys, and take their nodes in order; calls the graph does not have
(a gradient hook's ``detach``) and nodes eager code does not run (the ``ones_like`` that
seeds ``autograd.grad``) are skipped, and counted in a :class:`FollowReport`. The graph's
``detach`` nodes are not planned calls at all: they are of tensors autograd saved, which
eager code saves without a call, and a hook's ``detach`` of a gradient of the same shape
would otherwise take their strategy (a round trip of the gradient, measured). An in-place
call matches the out-of-place node that capture made of it (``add_`` -> ``add``); its
mutated argument is not moved (a moved copy would take the write, not the caller's tensor).

A ``TorchDispatchMode`` sees every call before the DTensor dispatcher does, so following needs
nothing from the runtime. Values never change, only where the bytes move: a call matched
wrongly costs bytes, never correctness.

Note [when the follower listens]
A dispatch mode lives on a per-thread stack that must nest: ``__exit__`` pops whatever is on
top, so a mode left open past its scope would be popped by the next outer mode's exit, which
stays behind. And the autograd engine runs each backward node under a copy of the state the
caller had when it called ``backward()``, restored after each node: a mode pushed during the
backward is gone at the next node, one popped is back. So the follower is pushed only in
scopes that nest:

- ``following(module)``, a context manager around the whole step (forward, loss,
  ``backward()``), as torch's ``loss_parallel``: pushed for the block, so the backward's
  copy has it too; every call of the step is followed;
- without it, around the module's forward (its pre- and post-hooks), and in each backward
  node that forward made, from the node's pre-hook to the end of the node's evaluation:
  pushed with no pop, since the engine puts back the stack it had before the node when the
  node is done. That scope also holds the sums of gradients the engine makes into the next
  nodes' inputs (after the node's post-hooks), which the plan places too. The loss between
  forward and backward, and the loss's own backward nodes, run as propagation chooses; the
  planned calls they leave unmatched are counted as not run.

Note [hints when following]
``shard_hint`` is the identity in eager code: no call to match. In the plan it is a value
of its own, moved once from its input to the hint's placements and read by its consumers
(the forward's, and the backward's that saved it). So a planned call records, per input,
the hint it reads (``PlannedOp.via``); the follower moves that input to the hint's
placements once per step, keeps the moved tensor for the hint's other readers (the same
source object), and moves on from there to the call's own placements.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import (TorchDispatchMode, _get_current_dispatch_mode,
                                           _pop_mode, _push_mode)

from dtensor.graph.errors import GraphShardingError
from dtensor.placements import Pl, fmt_placements
from dtensor.tensor import DTensor

Key = tuple[str, tuple[tuple[int, ...], ...]]


@dataclass(frozen=True)
class PlannedOp:
    """The plan's strategy for one aten call: ``op`` (``"aten.mm.default"``) on tensor
    arguments of global ``shapes``, each moved to its ``inputs`` placements, the results in
    ``outputs``. ``node``: the graph node's name, for reading; ``moves``: an argument is
    moved first (the plan has a reshard here), ``bytes`` (all ranks) by the plan's count."""

    op: str
    shapes: tuple[tuple[int, ...], ...]
    inputs: tuple[Pl, ...]
    outputs: tuple[Pl, ...]
    node: str
    moves: bool = False
    bytes: int = 0
    via: tuple[tuple[str, Pl] | None, ...] = ()  # per input: the shard_hint it reads, if any

    def __str__(self) -> str:
        ins = ", ".join(fmt_placements(p) for p in self.inputs)
        outs = " ".join(fmt_placements(p) for p in self.outputs)
        moved = f"  {self.bytes} B" if self.bytes else "  local" if self.moves else ""
        return f"{self.node} = {self.op}({ins}) -> {outs}{moved}"


@dataclass
class FollowReport:
    """What one followed step did: calls matched to the plan, DTensor calls the plan does
    not have (run as the dispatcher chose), planned calls that did not come, and matched
    calls whose result had to be moved to the planned output placements (bytes the plan
    did not count)."""

    matched: int = 0
    unplanned: Counter = field(default_factory=Counter)
    not_run: Counter = field(default_factory=Counter)
    outputs_moved: Counter = field(default_factory=Counter)
    inplace_kept: Counter = field(default_factory=Counter)

    def __str__(self) -> str:
        def top(c: Counter) -> str:
            return ", ".join(f"{k} x{n}" for k, n in c.most_common(6)) or "none"
        return (f"{self.matched} calls followed the plan; unplanned: {top(self.unplanned)}; "
                f"planned, not run: {top(self.not_run)}; results moved: "
                f"{top(self.outputs_moved)}; in-place targets left where they were: "
                f"{top(self.inplace_kept)}")


def op_key(op: Any) -> str:
    """``aten.add.Tensor`` for ``aten.add_.Tensor`` and ``aten.add.Tensor`` alike (capture
    made in-place calls out-of-place)."""
    schema = op._schema
    namespace, name = schema.name.split("::")
    if schema.is_mutable and name.endswith("_") and not name.startswith("_"):
        name = name[:-1]
    return f"{namespace}.{name}.{op._overloadname}"


def _tensors(args: Iterable[Any]) -> Iterator[torch.Tensor]:
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from _tensors(a)
        elif isinstance(a, torch.Tensor):
            yield a


class Follower(TorchDispatchMode):
    """Runs DTensor calls as ``ops`` planned them (Note [following a plan in eager code]).
    One per module and rank. ``reset`` starts a step; the mode is pushed and popped in
    properly nested scopes only (``push``/``pop``, Note [when the follower listens])."""

    def __init__(self, ops: Iterable[PlannedOp]) -> None:
        super().__init__()
        self.ops = tuple(ops)
        self.report = FollowReport()
        self._queues: dict[Key, deque[PlannedOp]] = {}
        self._hints: dict[str, tuple[torch.Tensor, DTensor]] = {}  # hint -> (source, moved)
        self._closed = True
        self.in_step = False  # inside ``following``: pushed for the whole step

    def reset(self) -> None:
        """A new step: every planned call waits for its match again."""
        self.report = FollowReport()
        self._queues = {}
        self._hints = {}
        for op in self.ops:
            self._queues.setdefault((op.op, op.shapes), deque()).append(op)
        self._closed = False

    def close(self) -> None:
        """The step ended: count the planned calls that never came."""
        if self._closed:
            return
        self._closed = True
        self._hints = {}  # the moved hint values go with the step
        for queue in self._queues.values():
            for op in queue:
                self.report.not_run[op.op] += 1

    def push(self) -> None:
        """Onto this thread's dispatch-mode stack. Not ``__enter__``: that also flips
        process-wide flags (``is_in_torch_dispatch_mode``, which torch.compile reads), which
        rank threads entering and leaving out of order would leave wrong."""
        _push_mode(self)

    def push_for_node(self) -> None:
        """Listen for the rest of the backward node being evaluated: its call and the sums
        of its gradients into the next nodes' inputs, which the engine makes after the
        node's post-hooks. The engine restores the dispatch-mode stack it had before the
        node when the node's evaluation ends (Note [when the follower listens]), so this
        push has no pop. Inside ``following`` the follower is on the stack already."""
        if not self.in_step:
            _push_mode(self)

    def pop(self) -> None:
        """Leave the dispatch-mode stack; the follower must be on top (a mode opened inside
        its scope must be closed inside it, as for any mode)."""
        if _get_current_dispatch_mode() is not self:
            raise GraphShardingError(
                "the plan's follower is not the innermost dispatch mode where its scope "
                f"ends (found {_get_current_dispatch_mode()!r}): close a mode opened inside "
                "the step (or the module's forward) before the step ends")
        _pop_mode()

    # -- one call ---------------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not any(issubclass(t, DTensor) for t in types):
            return func(*args, **kwargs)
        tensors = list(_tensors(list(args) + list(kwargs.values())))
        key = (op_key(func), tuple(tuple(t.shape) for t in tensors))
        queue = self._queues.get(key)
        if not queue or len(queue[0].inputs) != len(tensors):
            self.report.unplanned[key[0]] += 1
            return func(*args, **kwargs)
        planned = queue.popleft()
        self.report.matched += 1
        written = _written_args(func)
        wanted = iter(zip(planned.inputs, planned.via or [None] * len(planned.inputs)))

        def move(a: Any, position: int | None) -> Any:
            if isinstance(a, (list, tuple)):
                return type(a)(move(x, None) for x in a)
            if not isinstance(a, torch.Tensor):
                return a
            want, hint = next(wanted)
            if not isinstance(a, DTensor) or a.device_mesh.ndim != len(want):
                return a  # a plain tensor, or a DTensor on another mesh: not the plan's
            if hint is not None:
                a = self._through_hint(a, *hint)
            if tuple(a.placements) == want:
                return a
            if position in written:
                self.report.inplace_kept[planned.op] += 1
                return a
            with torch.no_grad():
                return a.redistribute(a.device_mesh, want)

        args = tuple(move(a, i) for i, a in enumerate(args))
        kwargs = {k: move(v, k) for k, v in kwargs.items()}
        out = func(*args, **kwargs)
        if written:
            return out  # the result is the written argument itself
        return self._place_outputs(planned, out)

    def _through_hint(self, a: DTensor, hint: str, placements: Pl) -> DTensor:
        """``a`` as the value of ``hint`` (Note [hints when following])."""
        held = self._hints.get(hint)
        if held is not None and held[0] is a:
            return held[1]
        moved = a
        if tuple(a.placements) != placements:
            with torch.no_grad():
                moved = a.redistribute(a.device_mesh, placements)
        self._hints[hint] = (a, moved)
        return moved

    def _place_outputs(self, planned: PlannedOp, out: Any) -> Any:
        outs = out if isinstance(out, (tuple, list)) else (out,)
        fixed = []
        for t, want in zip(outs, planned.outputs):
            if isinstance(t, DTensor) and tuple(t.placements) != want:
                self.report.outputs_moved[planned.op] += 1
                with torch.no_grad():
                    t = t.redistribute(t.device_mesh, want)
            fixed.append(t)
        fixed += list(outs[len(fixed):])
        if isinstance(out, (tuple, list)):
            return type(out)(fixed)
        return fixed[0]


def _written_args(func: Any) -> set[int | str]:
    """Positions (and keyword names) of the arguments ``func`` writes to."""
    out: set[int | str] = set()
    for i, a in enumerate(func._schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            out.add(a.name if a.kwarg_only else i)
    return out
