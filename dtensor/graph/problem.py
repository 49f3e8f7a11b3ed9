"""The inference problem: one decision per producing node, each option a rule strategy.

Note [graph sharding problem]
Every node that makes tensors (a placeholder, a constant, an aten call) is a *unit* with a
list of *options*: the placements each tensor input needs and each output then has. An aten
call's options are its rule's candidates (``dtensor.ops.propagate.candidates``, every sound
strategy, Partial inputs included: over the whole graph a Partial is not free, because the
bytes of reducing it are paid where a consumer needs it reduced). A placeholder's options are
its possible layouts (or just its immutable annotation); a call with no rule has one option,
everything Replicate (what the runtime's fallback does).

The cost of an assignment is the sum, over every edge (value -> consumer input), of the
planner's bytes to move the value from its producer's output placements to the consumer's
input placements (``plan_bytes``: the proven-minimal reshard), plus, for each graph output,
the bytes to reach its required placements: an untied output must not stay Partial; a tied
one (a gradient) must end like its parameter. A mutable hint that is overridden adds
``HINT_PENALTY``, far below one byte: hints only break ties.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx

from dtensor.graph.annotate import HINT_OP, ShardSpec
from dtensor.graph.capture import CapturedGraph
from dtensor.graph.compute import COMPUTE_WEIGHT, local_shape, op_flops
from dtensor.graph.costs import reshard_table
from dtensor.graph.errors import AnnotationError
from dtensor.ops.propagate import per_dim_strategies
from dtensor.ops.registry import GUARDS, REGISTRY, OpSpec, TensorSpec
from dtensor.placements import (Pl,
    Partial,
    Placement,
    PlacementError,
    Replicate,
    Shard,
    fmt_placements,
    has_split_rule,
    mixes_partial_families,
    normalize_placements,
)

HINT_PENALTY = 1e-6  # Note [graph sharding problem]


@dataclass(frozen=True, slots=True)
class Value:
    """One tensor of the graph: output ``index`` of ``unit``."""

    id: int
    unit: int
    index: int
    name: str
    shape: tuple[int, ...]
    itemsize: int


@dataclass(frozen=True, slots=True)
class Option:
    inputs: tuple[Pl, ...]
    outputs: tuple[Pl, ...]
    penalty: float = 0.0  # hint miss + compute_weight * FLOPs over all ranks (bytes)
    ins: tuple[int, ...] = ()  # the same placements as ids (Problem.pl_id): fast to compare
    outs: tuple[int, ...] = ()
    flops: int = 0  # FLOPs of the most loaded rank (Note [compute in the objective])


@dataclass
class Unit:
    id: int
    node: fx.Node
    kind: str  # "input", "const", "op", "hint", "fallback"
    options: list[Option]
    inputs: list[int]  # value ids, in the order of the options' inputs
    outputs: list[int]  # value ids, by output position (-1: not a tensor)
    annotated: ShardSpec | None = None
    consumers: list[tuple[int, int]] = field(default_factory=list)  # (unit, input position)


@dataclass(frozen=True, slots=True)
class Sink:
    """Graph output ``value`` must end in ``fixed``, or like placeholder unit ``tie``'s
    output, or (neither) in any placements without Partial."""

    value: int
    name: str
    fixed: Pl | None = None
    tie: int | None = None


class Problem:
    """Units, values, edges and the cost of an assignment (Note [graph sharding problem])."""

    def __init__(self, graph: CapturedGraph, mesh_shape: Sequence[int],
                 annotations: dict[str, ShardSpec] | None = None, *,
                 compute_weight: float = COMPUTE_WEIGHT) -> None:
        if not compute_weight >= 0:
            raise ValueError(f"Problem(compute_weight={compute_weight!r}): expected bytes per "
                             "FLOP >= 0 (0: bytes only)")
        self.graph = graph
        self.mesh_shape = tuple(int(m) for m in mesh_shape)
        self.compute_weight = float(compute_weight)
        self.whole_flops: dict[int, int] = {}  # unit -> FLOPs of its op on one device
        self.units: list[Unit] = []
        self.values: list[Value] = []
        self.sinks: list[Sink] = []
        self._value_of: dict[tuple[fx.Node, int], int] = {}
        self._options_of: dict[OpSpec, list[Option]] = {}
        self.pls: list[Pl] = []  # placement lists by id
        self._pl_ids: dict[Pl, int] = {}
        self._cls: list[int] = []  # value id -> its cost class
        self._vcosts: list[dict[int, int]] = []  # value id -> its class's table (below)
        self._classes: dict[tuple, int] = {}
        self._costs: list[dict[int, int]] = []  # per class: (src id << 20 | dst id) -> bytes
        self._class_info: list[tuple] = []
        self._unpartial: dict[int, int] = {}
        self._scale: list[int] = []  # value id -> its bytes over its class's canonical bytes
        annotations = _resolve(graph, dict(annotations or {}))
        for node in graph.gm.graph.nodes:
            self._add(node, annotations)
        interned: dict[int, list[Option]] = {}  # identical calls share one option list
        for u in self.units:
            key = id(u.options)
            if key not in interned:
                interned[key] = [self._interned(o) for o in u.options]
            u.options = interned[key]
            for k, v in enumerate(u.inputs):
                self.units[self.values[v].unit].consumers.append((u.id, k))
        self._add_sinks(annotations)
        self.sink_of: dict[int, list[Sink]] = {}
        for s in self.sinks:
            self.sink_of.setdefault(self.values[s.value].unit, []).append(s)
            if s.tie is not None:
                self.sink_of.setdefault(s.tie, []).append(s)
        self._partials: dict[int, list[int]] = {}
        self._neighbours: dict[tuple[int, bool], list[int]] = {}
        self._signatures: dict[int, tuple | None] = {}
        self._base_options = [u.options for u in self.units]  # without a memory price
        self.memory_weight = 0.0
        self._memory: list[list[tuple[int, int, int]]] | None = None
        self.optimizer_states = 0
        #: decisions and cost lists by (unit signature, neighbours' placements): Note
        #: [repeated units] in dtensor.graph.infer
        self.memo: dict[tuple, Any] = {}

    # -- memory (Note [memory in the objective] in dtensor.graph.memory) ------------------------
    def unit_memory(self) -> list[list[tuple[int, int, int]]]:
        if self._memory is None:
            from dtensor.graph.memory import unit_memory

            self._memory = unit_memory(self, self.optimizer_states)
        return self._memory

    def memory(self, choice: Sequence[int]):
        """Bytes the most loaded rank holds under ``choice`` (a ``Memory``)."""
        from dtensor.graph.memory import Memory

        per = self.unit_memory()
        parts = [sum(per[u.id][choice[u.id]][i] for u in self.units) for i in range(3)]
        return Memory(*parts)

    def set_memory_weight(self, weight: float, optimizer_states: int | None = None) -> None:
        """Price every byte a rank holds at ``weight`` bytes moved (each rank): options of
        units that hold more cost more. Decisions memoised before are dropped."""
        if optimizer_states is not None and optimizer_states != self.optimizer_states:
            self.optimizer_states, self._memory = optimizer_states, None
        self.memory_weight = float(weight)
        n = math.prod(self.mesh_shape)
        per = self.unit_memory() if weight else None
        shared: dict[tuple, list[Option]] = {}
        for u, base in zip(self.units, self._base_options):
            if per is None:
                u.options = base
                continue
            held = tuple(sum(m) for m in per[u.id])
            key = (id(base), held)
            if key not in shared:
                shared[key] = [Option(o.inputs, o.outputs, o.penalty + weight * n * h, o.ins,
                                      o.outs, o.flops) for o, h in zip(base, held)]
            u.options = shared[key]
        self._signatures.clear()
        self.memo.clear()

    def signature(self, uid: int) -> tuple | None:
        """What a unit's local costs depend on besides its neighbours' placements: its option
        list and each input's cost class and scale (Note [repeated units] in
        ``dtensor.graph.infer``); None for a unit with graph outputs (priced per unit)."""
        sig = self._signatures.get(uid, 0)
        if sig == 0:
            u = self.units[uid]
            sig = None if uid in self.sink_of else (
                id(u.options), tuple((self._cls[v], self._scale[v]) for v in u.inputs))
            self._signatures[uid] = sig
        return sig

    def value_key(self, vid: int) -> tuple[int, int]:
        """What a value's reshard bytes depend on: its cost class and its scale."""
        return self._cls[vid], self._scale[vid]

    def partials(self, uid: int) -> list[int]:
        """Per option of unit ``uid``, how many Partial placements its outputs hold."""
        out = self._partials.get(uid)
        if out is None:
            out = self._partials[uid] = [
                sum(isinstance(p, Partial) for pl in o.outputs for p in pl)
                for o in self.units[uid].options]
        return out

    def neighbours(self, uid: int, consumers_only: bool = False) -> list[int]:
        """Units whose cost of a decision depends on unit ``uid``'s: its consumers and the
        producers of outputs tied to it; with ``consumers_only`` False also its producers and
        the inputs its outputs are tied to."""
        key = (uid, consumers_only)
        out = self._neighbours.get(key)
        if out is None:
            u = self.units[uid]
            found = {c for c, _ in u.consumers}
            for s in self.sink_of.get(uid, ()):
                found.add(self.values[s.value].unit)
                if not consumers_only and s.tie is not None:
                    found.add(s.tie)
            if not consumers_only:
                found.update(self.values[v].unit for v in u.inputs)
            found.discard(uid)
            out = self._neighbours[key] = sorted(found)
        return out

    # -- building ------------------------------------------------------------------------------
    def _new_value(self, unit: int, index: int, node: fx.Node, meta: Any) -> int:
        v = Value(len(self.values), unit, index,
                  self.graph.name_of(node) + (f"[{index}]" if index else ""),
                  tuple(int(s) for s in meta.shape), meta.element_size())
        self.values.append(v)
        self._value_of[(node, index)] = v.id
        cls = self._class_of(v)
        canon, itemsize = self._class_info[cls]
        self._cls.append(cls)
        self._vcosts.append(self._costs[cls])
        self._scale.append(math.prod(v.shape) * v.itemsize // max(math.prod(canon), 1)
                           if math.prod(canon) else 0)
        return v.id

    def _add(self, node: fx.Node, annotations: dict[Any, ShardSpec]) -> None:
        if node.op == "output":
            return
        if node.op == "call_function" and node.target is operator.getitem:
            src, i = node.args
            if (src, i) in self._value_of:
                self._value_of[(node, 0)] = self._value_of[(src, i)]
            return
        meta = node.meta.get("val")
        metas = list(meta) if isinstance(meta, (tuple, list)) else [meta]
        uid = len(self.units)
        outs = [self._new_value(uid, i, node, m) if isinstance(m, torch.Tensor) else -1
                for i, m in enumerate(metas)]
        name = self.graph.name_of(node)
        spec = annotations.get(node)
        if spec is not None:
            spec = _checked(spec, name, self.values[outs[0]].shape, self.mesh_shape)
        if node.op in ("placeholder", "get_attr"):
            shape = self.values[outs[0]].shape
            if spec is not None and any(isinstance(p, Partial) for p in spec.placements):
                raise AnnotationError([name], f"{spec}: an input holds its whole value, it "
                                      "cannot be Partial (annotate a value computed from it)")
            kind = "input" if node.op == "placeholder" else "const"
            opts = ([Option((), (spec.placements,))] if spec is not None and not spec.mutable
                    else [Option((), (p,), _miss(spec, p)) for p in self.layouts(shape)]
                    if kind == "input" else [Option((), (self.replicate,))])
            self.units.append(Unit(uid, node, kind, opts, [], outs, spec))
            return
        if node.op != "call_function":
            raise AnnotationError([node.name], f"unexpected fx node kind {node.op!r}")
        op, inputs = self._describe(node)
        kind, opts = self._options(node, op, outs, spec)
        self.units.append(Unit(uid, node, kind, opts, inputs, outs, spec))

    def _describe(self, node: fx.Node) -> tuple[OpSpec, list[int]]:
        inputs: list[int] = []
        R = self.replicate

        def describe(a: Any) -> Any:
            if isinstance(a, fx.Node):
                vid = self._value_of[(a, 0)]
                inputs.append(vid)
                m = a.meta["val"]
                return TensorSpec(tuple(m.shape), tuple(m.stride()), m.dtype, R)
            if isinstance(a, (list, tuple)):
                return tuple(describe(x) for x in a)
            return a

        args = tuple(describe(a) for a in node.args)
        kwargs = tuple((k, describe(v)) for k, v in node.kwargs.items())
        return OpSpec(node.target, args, kwargs, self.mesh_shape), inputs

    def _options(self, node: fx.Node, op: OpSpec, outs: list[int],
                 spec: ShardSpec | None) -> tuple[str, list[Option]]:
        n_in = len(op.tensors())
        if node.target is HINT_OP:
            hint = ShardSpec.parse(node.args[1])
            hint = _checked(hint, node.name, self.values[outs[0]].shape, self.mesh_shape)
            if not hint.mutable:
                return "hint", [Option((hint.placements,), (hint.placements,))]
            return "hint", [Option((p,), (p,), _miss(hint, p))
                            for p in self.layouts(self.values[outs[0]].shape, partial=True)]
        found: list[Option] = []
        if node.target in REGISTRY:
            if op not in self._options_of:  # layers repeat their calls: rules run once
                try:
                    self._options_of[op] = self._with_flops(op, outs, strategies(op))
                except (PlacementError, ValueError, RuntimeError, NotImplementedError):
                    self._options_of[op] = []
            found = self._options_of[op]
        kind = "op"
        if not found:  # the runtime gathers and computes whole (its fallback)
            kind = "fallback"
            found = self._with_flops(op, outs, [Option((self.replicate,) * n_in,
                                                       tuple(self.replicate for _ in outs))])
        self.whole_flops[len(self.units)] = self._flops(op, outs, None)
        if spec is not None:  # an annotated intermediate: its first output
            keep = [o for o in found if o.outputs and o.outputs[0] == spec.placements]
            if spec.mutable:
                found = [Option(o.inputs, o.outputs, _miss(spec, o.outputs[0]), flops=o.flops)
                         for o in found]
            elif keep:
                found = keep
            else:
                raise AnnotationError([node.name], f"no strategy of {node.target} gives "
                                      f"{fmt_placements(spec.placements)}; annotate it with "
                                      "shard_hint instead to have it resharded")
        return kind, found

    def _with_flops(self, op: OpSpec, outs: list[int], options: list[Option]) -> list[Option]:
        return [Option(o.inputs, o.outputs, o.penalty, flops=self._flops(op, outs, o))
                for o in options]

    def _flops(self, op: OpSpec, outs: list[int], o: Option | None) -> int:
        """FLOPs of the most loaded rank running ``op`` under option ``o`` (None: one device,
        whole shapes): Note [compute in the objective]."""
        m = self.mesh_shape

        def local(shape: tuple[int, ...], pl: Pl | None) -> tuple[int, ...]:
            return tuple(shape) if pl is None else local_shape(shape, pl, m)

        tensors = op.tensors()
        ins = [local(t.shape, None if o is None else o.inputs[i]) for i, t in enumerate(tensors)]
        shapes = [self.values[v].shape for v in outs if v >= 0]
        outs_pl = [] if o is None else [p for v, p in zip(outs, o.outputs) if v >= 0]
        out_shapes = [local(s, outs_pl[i] if o is not None and i < len(outs_pl) else None)
                      for i, s in enumerate(shapes)]
        it = iter(ins)

        def sub(a: Any) -> Any:
            if isinstance(a, TensorSpec):
                return torch.Size(next(it))
            if isinstance(a, tuple):
                return tuple(sub(x) for x in a)
            return a

        args = sub(op.args)
        kwargs = {k: sub(v) for k, v in op.kwargs}
        return op_flops(op.op, args, kwargs, ins, out_shapes)

    def flops(self, choice: Sequence[int]) -> int:
        """FLOPs the most loaded rank does in a step under ``choice`` (ops summed)."""
        return sum(u.options[choice[u.id]].flops for u in self.units)

    def _add_sinks(self, annotations: dict[Any, ShardSpec]) -> None:
        out = next(n for n in self.graph.gm.graph.nodes if n.op == "output")
        flat = out.args[0] if isinstance(out.args[0], (tuple, list)) else (out.args[0],)
        by_name = {self.graph.name_of(u.node): u.id for u in self.units if u.kind == "input"}
        for i, (node, name) in enumerate(zip(flat, self.graph.outputs)):
            if not isinstance(node, fx.Node) or (node, 0) not in self._value_of:
                continue
            vid = self._value_of[(node, 0)]
            spec = annotations.get(name)
            fixed = None
            if spec is not None:
                fixed = _checked(spec, name, self.values[vid].shape, self.mesh_shape).placements
            tie = self.graph.ties.get(i)
            self.sinks.append(Sink(vid, name, fixed, by_name[tie] if tie and not fixed else None))

    # -- layouts and costs ---------------------------------------------------------------------
    @property
    def replicate(self) -> Pl:
        return (Replicate(),) * len(self.mesh_shape)

    def layouts(self, shape: tuple[int, ...], partial: bool = False) -> list[Pl]:
        """Every Shard/Replicate list (pieces not all empty), Replicate first."""
        per_dim = []
        for m in self.mesh_shape:
            opts: list[Placement] = [Replicate()]
            opts += [Shard(d) for d in range(len(shape)) if shape[d] >= m]
            if partial:
                opts.append(Partial())
            per_dim.append(opts)
        return [tuple(p) for p in itertools.product(*per_dim)]

    def pl_id(self, p: Pl) -> int:
        i = self._pl_ids.get(p)
        if i is None:
            i = self._pl_ids[p] = len(self.pls)
            self.pls.append(p)
        return i

    def _interned(self, o: Option) -> Option:
        compute = self.compute_weight * math.prod(self.mesh_shape) * o.flops
        return Option(o.inputs, o.outputs, o.penalty + compute,
                      tuple(self.pl_id(p) for p in o.inputs),
                      tuple(self.pl_id(p) for p in o.outputs), o.flops)

    def _class_of(self, v: Value) -> int:
        """Note [even dims scale]: a dim whose size divides by the whole mesh's size is cut
        at proportional places by any placements, so every step of every plan moves bytes
        proportional to it (an all_reduce's total over a group is 2 (n - 1) times its
        size, however it splits). Such dims are priced at size N (the mesh size) and the
        bytes scaled; the other dims keep their size. Values that agree on the rest share
        their plans."""
        n = math.prod(self.mesh_shape)
        canon = tuple(n if d % n == 0 and d > 0 else d for d in v.shape)
        key = canon
        c = self._classes.get(key)
        if c is None:
            c = self._classes[key] = len(self._costs)
            self._costs.append({})
            self._class_info.append((canon, 1))
        return c

    def own_cost(self, choice: Sequence[int], u: Unit, b: int) -> float:
        """Unit ``u`` under option ``b``: its penalty and the bytes to bring each input from
        its producer's chosen option (every edge is priced once, at its consumer)."""
        units, values = self.units, self.values
        opt = u.options[b]
        total = opt.penalty
        for k, vid in enumerate(u.inputs):
            v = values[vid]
            src = units[v.unit].options[choice[v.unit]].outs[v.index]
            if src != opt.ins[k]:
                total += self.bytes_ids(vid, src, opt.ins[k])
        return total

    def bytes_ids(self, vid: int, a: int, b: int) -> float:
        """Bytes to move value ``vid`` from placement id ``a`` to ``b`` (planner-minimal)."""
        if a == b:
            return 0
        r = self._vcosts[vid].get(a << 20 | b)
        if r is None:  # Note [reshard tables]
            cls = self._cls[vid]
            shape, itemsize = self._class_info[cls]
            r = self._costs[cls][a << 20 | b] = reshard_table(
                self.mesh_shape, shape, itemsize).bytes(self.pls[a], self.pls[b])
        return r * self._scale[vid]

    def bytes(self, vid: int, src: Pl, dst: Pl) -> float:
        if src == dst:
            return 0
        return self.bytes_ids(vid, self.pl_id(src), self.pl_id(dst))

    def sink_bytes(self, s: Sink, src: Pl, tie: Pl | None) -> int:
        if s.fixed is not None:
            return self.bytes(s.value, src, s.fixed)
        if s.tie is not None:
            return self.bytes(s.value, src, tie) if tie is not None else 0
        if not any(isinstance(p, Partial) for p in src):
            return 0
        return self.bytes(s.value, src, tuple(Replicate() if isinstance(p, Partial) else p
                                              for p in src))

    def sink_target(self, s: Sink, src: Pl, tie: Pl | None) -> Pl:
        if s.fixed is not None:
            return s.fixed
        if s.tie is not None and tie is not None:
            return tie
        return tuple(Replicate() if isinstance(p, Partial) else p for p in src)

    def sink_cost(self, s: Sink, src: int, tie: int) -> float:
        """``sink_bytes`` by placement ids (``tie`` -1: not known yet)."""
        if s.fixed is not None:
            return self.bytes_ids(s.value, src, self.pl_id(s.fixed))
        if s.tie is not None:
            return self.bytes_ids(s.value, src, tie) if tie >= 0 else 0
        whole = self._unpartial.get(src)
        if whole is None:
            p = self.pls[src]
            whole = self._unpartial[src] = self.pl_id(
                tuple(Replicate() if isinstance(x, Partial) else x for x in p))
        return self.bytes_ids(s.value, src, whole)

    def out_id(self, choice: Sequence[int], vid: int) -> int:
        v = self.values[vid]
        return self.units[v.unit].options[choice[v.unit]].outs[v.index]

    def cost(self, choice: Sequence[int]) -> float:
        """Total bytes (plus hint penalties) of an assignment: one option index per unit."""
        total = 0.0
        units = self.units
        for u in units:
            total += self.own_cost(choice, u, choice[u.id])
        for s in self.sinks:
            tie = self.out_id(choice, self.units[s.tie].outputs[0]) if s.tie is not None else -1
            total += self.sink_cost(s, self.out_id(choice, s.value), tie)
        return total

    def out_pl(self, choice: Sequence[int], vid: int) -> Pl:
        v = self.values[vid]
        return self.units[v.unit].options[choice[v.unit]].outputs[v.index]

    def value_named(self, name: str) -> int:
        for v in self.values:
            if v.name == name:
                return v.id
        raise AnnotationError([name], "no value of the graph has this name; values are the "
                              f"inputs {list(self.graph.inputs)} and node names")


def strategies(op: OpSpec) -> list[Option]:
    """Every combination of the rule's per-mesh-dim strategies that is a valid layout: what
    ``candidates(op, dispatchable_only=False)`` offers, without pricing each against the
    call's current placements (there are none yet)."""
    tensors = op.tensors()
    seen: dict[tuple, Option] = {}
    for combo in itertools.product(*per_dim_strategies(op)):
        locals_ = {st.local for st in combo if st.local}
        if len(locals_) > 1:
            continue  # two different per-rank computations cannot both run
        if locals_ & GUARDS.keys():
            continue  # holds for some data only (Note [guarded local functions]): a plan can't
        ins = tuple(tuple(st.inputs[i] for st in combo) for i in range(len(tensors)))
        outs = tuple(tuple(st.outputs[j] for st in combo) for j in range(len(combo[0].outputs)))
        if any(mixes_partial_families(o) for o in ins + outs):
            continue
        try:
            ins = tuple(normalize_placements(p, t.ndim, len(op.mesh_shape))
                        for t, p in zip(tensors, ins))
        except PlacementError:
            continue
        seen.setdefault((ins, outs), Option(ins, outs))
    found = list(seen.values())
    return [o for o in found if _sum_partials_only(o)] or found


def _miss(spec: ShardSpec | None, p: Pl) -> float:
    return HINT_PENALTY if spec is not None and spec.placements != p else 0.0


def _sum_partials_only(o: Option) -> bool:
    """Inputs asked to be Partial only as P(sum): other kinds would be made on purpose only to
    be reduced again (a P(max) input is kept when a rule offers nothing else)."""
    return all(p == Partial() for ins in o.inputs for p in ins if isinstance(p, Partial))


def _checked(spec: ShardSpec, name: str, shape: tuple[int, ...], mesh_shape: tuple[int, ...]
             ) -> ShardSpec:
    if not isinstance(spec, ShardSpec):
        raise AnnotationError([name], f"annotation {spec!r} is not a ShardSpec")
    try:
        ps = normalize_placements(spec.placements, len(shape), len(mesh_shape), shape=shape)
    except PlacementError as e:
        raise AnnotationError([name], f"{spec} cannot lay out this value of shape "
                              f"{tuple(shape)} on mesh {mesh_shape}: {e}") from None
    if has_split_rule(ps):  # the planner's universe is chunk Shards, R and P
        sized = ", ".join(str(p) for p in ps if isinstance(p, Shard) and not p.is_plain)
        raise AnnotationError([name], f"{spec}: whole-graph inference plans torch.chunk "
                              f"pieces only, not {sized}; annotate the Shard without sizes or "
                              f"block, "
                              f"or run eagerly, where split rules are carried (Note [split "
                              f"rules] in dtensor/layout.py)")
    return ShardSpec(ps, spec.mutable)


def _resolve(graph: CapturedGraph, annotations: dict[str, ShardSpec]) -> dict[Any, ShardSpec]:
    """Annotations keyed by node (inputs by name or node name, other values by node name) or
    by output name; raises naming unknown values and values annotated twice differently."""
    nodes = {n.name: n for n in graph.gm.graph.nodes if n.op != "output"}
    nodes.update({name: n for name, n in zip(graph.inputs, graph.placeholders())})
    out: dict[Any, ShardSpec] = {}
    keys: dict[Any, str] = {}
    unknown = []
    for k, spec in annotations.items():
        if not isinstance(spec, ShardSpec):
            raise AnnotationError([k], f"annotation {spec!r} is not a ShardSpec")
        target = nodes.get(k, k if k in graph.outputs else None)
        if target is None:
            unknown.append(k)
            continue
        if target in out and out[target] != spec:
            raise AnnotationError([keys[target], k], f"one value annotated twice: "
                                  f"{out[target]} and {spec}")
        out[target], keys[target] = spec, k
    if unknown:
        shown = ", ".join(graph.inputs[:6]) + (", ..." if len(graph.inputs) > 6 else "")
        raise AnnotationError(sorted(unknown), f"not a value of the graph: expected an input "
                              f"({shown}), an output ({', '.join(graph.outputs[:4])}...) "
                              "or a node name")
    return out
