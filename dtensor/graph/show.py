"""The result of inference: placements of every value, the reshards, a printout, and
``explain``: why a value got its placement.

>>> import torch
>>> from dtensor import Shard, Replicate
>>> from dtensor.graph import ShardSpec, capture_fn, infer
>>> g = capture_fn(lambda x, w: x @ w, torch.randn(8, 4), torch.randn(4, 6), names=["x", "w"])
>>> plan = infer(g, (2,), {"x": ShardSpec([Shard(0)])})
>>> plan.placements("mm"), plan.total_bytes
((Shard(dim=0),), 0)
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import fx

from dtensor.graph.infer import Solution, local_cost
from dtensor.graph.problem import Pl, Problem
from dtensor.placements import fmt_placements
from dtensor.redistribute.planner import Step, plan, plan_bytes


@dataclass(frozen=True)
class Reshard:
    """``value`` moves from ``src`` to ``dst`` before ``consumer`` reads it (``consumer`` is
    ``output <name>`` for a graph output)."""

    value: str
    consumer: str
    src: Pl
    dst: Pl
    bytes: int
    steps: tuple[Step, ...]

    def __str__(self) -> str:
        how = ", ".join(f"{s.kind}({','.join(map(str, s.mesh_dims))})" for s in self.steps)
        return (f"reshard {self.value} for {self.consumer}: {fmt_placements(self.src)} -> "
                f"{fmt_placements(self.dst)}  {how or 'local'}  {self.bytes} B")


class ShardingPlan:
    """Placements for every value of a captured graph, as inference chose them."""

    def __init__(self, problem: Problem, solution: Solution) -> None:
        self.problem = problem
        self.solution = solution
        self.graph = problem.graph
        self.mesh_shape = problem.mesh_shape
        self.reshards = self._reshards()
        self.total_bytes = sum(r.bytes for r in self.reshards)
        #: FLOPs of the most loaded rank in one run, and of one device running it all
        #: (Note [compute in the objective]); their ratio is the share each rank does
        self.flops_per_rank = problem.flops(solution.choice)
        self.whole_flops = sum(problem.whole_flops.values())

    @property
    def memory(self):
        """Bytes the most loaded rank holds in a step: parameter state (with the
        problem's ``optimizer_states``), other inputs, activations (a ``Memory``; Note
        [memory in the objective] in ``dtensor.graph.memory``)."""
        return self.problem.memory(self.solution.choice)

    # -- queries -------------------------------------------------------------------------------
    def option(self, node: fx.Node):
        """The chosen option of ``node``'s unit (None for getitem and output nodes)."""
        u = self._unit_of(node)
        return None if u is None else u.options[self.solution.choice[u.id]]

    def placements(self, name: str) -> Pl:
        """The placements value ``name`` (an input name or a node name) is produced in."""
        vid = self.problem.value_named(name)
        return self.problem.pls[self.problem.out_id(self.solution.choice, vid)]

    def output_targets(self) -> list[Pl]:
        """Where each graph output ends (Note [graph sharding problem])."""
        p, choice = self.problem, self.solution.choice
        out = []
        for s in p.sinks:
            tie = p.out_id(choice, p.units[s.tie].outputs[0]) if s.tie is not None else -1
            src = p.out_id(choice, s.value)
            out.append(p.pls[src] if s.tie is not None and tie < 0 else
                       p.sink_target(s, p.pls[src], p.pls[tie] if tie >= 0 else None))
        return out

    def _unit_of(self, node: fx.Node):
        for u in self.problem.units:
            if u.node is node:
                return u
        return None

    def _reshards(self) -> list[Reshard]:
        p, choice = self.problem, self.solution.choice
        out: list[Reshard] = []

        def add(vid: int, consumer: str, src: Pl, dst: Pl) -> None:
            if src == dst:
                return
            v = p.values[vid]
            steps = plan(src, dst, p.mesh_shape, v.shape, v.itemsize)
            out.append(Reshard(v.name, consumer, src, dst,
                               plan_bytes(steps, p.mesh_shape, v.shape, v.itemsize), steps))

        for u in p.units:
            opt = u.options[choice[u.id]]
            for k, vid in enumerate(u.inputs):
                add(vid, u.node.name, p.pls[p.out_id(choice, vid)], opt.inputs[k])
        for s, target in zip(p.sinks, self.output_targets()):
            add(s.value, f"output {s.name}", p.pls[p.out_id(choice, s.value)], target)
        return out

    def to_parallelize_plan(self, module_inputs: int | None = None):
        """The plan's layouts for the module's parameters, buffers and arguments, to apply
        to the eager module: ``plan.to_parallelize_plan().apply(model, mesh)`` (Note [plans
        in eager code] in ``dtensor.graph.eager``)."""
        from dtensor.graph.eager import eager_plan

        return eager_plan(self, module_inputs)

    # -- printing ------------------------------------------------------------------------------
    def __str__(self) -> str:
        p, choice = self.problem, self.solution.choice
        by_consumer: dict[str, list[Reshard]] = {}
        for r in self.reshards:
            by_consumer.setdefault(r.consumer, []).append(r)
        lines = [f"ShardingPlan on mesh {self.mesh_shape}: {self.total_bytes} bytes, "
                 f"{len(self.reshards)} reshards, {self.flops_per_rank} of "
                 f"{self.whole_flops} FLOPs per rank, {self.solution.method}"
                 f"{' (proven optimal)' if self.solution.exact else ''}, "
                 f"{self.solution.seconds:.2f} s"]
        for u in p.units:
            opt = u.options[choice[u.id]]
            for r in by_consumer.get(u.node.name, ()):
                lines.append(f"    {r}")
            outs = " ".join(fmt_placements(o) for o in opt.outputs)
            name = self.graph.name_of(u.node)
            if u.kind in ("input", "const"):
                lines.append(f"  {name}: {u.kind} {outs}")
                continue
            args = ", ".join(fmt_placements(i) for i in opt.inputs)
            target = getattr(u.node.target, "__name__", str(u.node.target))
            lines.append(f"  {name} = {target}({args}) -> {outs}")
        for s in p.sinks:
            for r in by_consumer.get(f"output {s.name}", ()):
                lines.append(f"    {r}")
        targets = ", ".join(f"{s.name} {fmt_placements(t)}"
                            for s, t in zip(p.sinks, self.output_targets()))
        lines.append(f"  outputs: {targets}")
        return "\n".join(lines)

    def explain(self, name: str) -> str:
        """Why value ``name`` has its placements: its annotation, or the stage of the search
        that chose it and what each alternative would cost given everything else."""
        p, choice = self.problem, self.solution.choice
        unit = p.units[p.values[p.value_named(name)].unit]
        here = fmt_placements(self.placements(name))
        spec = unit.annotated
        hint = unit.node.args[1] if unit.kind == "hint" else None
        if unit.kind == "input" and len(unit.options) == 1:
            return f"{name} is {here}: annotated immutable {spec}"
        if unit.kind == "hint" and len(unit.options) == 1:
            return f"{name} is {here}: shard_hint({hint}) in the model, immutable"
        if unit.kind == "fallback":
            return (f"{name} is {here}: {unit.node.target} has no sharding rule, so it runs "
                    "on whole inputs (the runtime's fallback)")
        now = local_cost(p, choice, unit, choice[unit.id])
        alts = sorted((local_cost(p, choice, unit, b) - now, b)
                      for b in range(len(unit.options)) if b != choice[unit.id])
        why = self.solution.stage.get(unit.id, "search")
        if spec is not None or hint is not None:
            why += f"; mutable hint {spec or hint}"
        lines = [f"{name} is {here}: chosen by {why}; the cost on its edges is "
                 f"{now:.0f} (bytes of inputs, consumers and output ties, plus its compute "
                 f"at {p.compute_weight:g} B/FLOP)"]
        if unit.kind not in ("input", "const"):
            opt = unit.options[choice[unit.id]]
            lines.append(f"  strategy: {', '.join(fmt_placements(i) for i in opt.inputs)} -> "
                         f"{' '.join(fmt_placements(o) for o in opt.outputs)}")
        for delta, b in alts[:5]:
            o = unit.options[b]
            lines.append(f"  instead {' '.join(fmt_placements(x) for x in o.outputs)}: "
                         f"{delta:+.0f}")
        if len(alts) > 5:
            lines.append(f"  ... {len(alts) - 5} more, none cheaper")
        return "\n".join(lines)
