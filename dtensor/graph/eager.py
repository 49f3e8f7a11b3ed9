"""An inferred plan handed back to eager code: the user's own module, its parameters laid out
as the plan chose, its inputs placed as the plan placed them, and every aten call of its
training step made as the plan planned it.

Note [plans in eager code]
A ``ShardingPlan`` fixes every value of a captured step. ``ShardingPlan.to_parallelize_plan()``
returns an :class:`EagerPlan` of all of it: each parameter's (and buffer's) placements, each
argument's, and the strategy of every call of the step (``ops``: a :class:`PlannedOp` per
graph node, in graph order). ``EagerPlan.apply(module, mesh)`` makes them real:

- ``distribute_module`` with a partition function that lays out each parameter as planned
  (``distribute_parameter``, whose gradient hook ends each gradient laid out like its
  parameter: the plan's output ties) and a forward pre-hook that lays out plain-tensor
  arguments;
- a follower (Note [following a plan in eager code] in ``dtensor.graph.follow``) that moves
  each call's arguments to the plan's strategy before the dispatcher sees them: in the
  module's forward and backward by itself, in the whole step (the loss too) inside
  ``with following(module):`` (Note [when the follower listens]). Without it
  (``follow=False``) propagation chooses every intermediate op by op, and the step moved
  1.65x to 9.68x the plan's bytes (weight gradients left Partial and all-reduced whole
  where the plan reduce-scattered activations); with it, the plan's bytes
  (``tests/graph/test_eager.py``, ``benchmarks/bench_graph.py``).

Why not ``ColwiseParallel`` / ``RowwiseParallel`` / ``SequenceParallel`` + ``fully_shard``:
inferred plans are not made of them. The bench Llama's plan shards the attention and MLP
weights over mesh dim 0 (the batch's dim in the annotation) on their output features,
moves the batch to mesh dim 1 after the embedding and keeps activations ``[S(2),S(0)]``
(hidden over dim 0, batch over dim 1), changing layouts inside attention (all-to-alls
around the attention call) and in the loss; a style describes one mesh dim at a module's
boundary, ``fully_shard`` gathers a parameter whole over its mesh dim. Styles applied as
close as they come would make a different program with different bytes; following the
calls makes the plan's.

>>> import copy, torch, simpg, dtensor
>>> from dtensor import Shard
>>> from dtensor.graph import ShardSpec, capture, infer
>>> model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
>>> x = torch.randn(4, 8)
>>> eager = infer(capture(model, x), (2,), {"input0": ShardSpec([Shard(0)])}
...               ).to_parallelize_plan()
>>> def body():
...     mesh = dtensor.init_device_mesh("cpu", (2,))
...     return eager.apply(copy.deepcopy(model), mesh)(x).full_tensor().shape
>>> simpg.run(body, 2)[0]
torch.Size([4, 8])
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx, nn

from dtensor.api import distribute_tensor
from dtensor.graph.annotate import HINT_OP
from dtensor.graph.errors import GraphShardingError
from dtensor.graph.follow import Follower, FollowReport, PlannedOp, op_key
from dtensor.mesh import DeviceMesh
from dtensor.placements import Pl, Placement, fmt_placements
from dtensor.tensor import DTensor

_FOLLOWER = "_dtensor_graph_follower"  # the module attribute that holds its follower
# graph nodes with no eager call to match: a hint is the identity in eager code, and the
# graph's detaches are of tensors autograd saved (eager code saves them without a call);
# the eager step's own detaches (a gradient hook's) would take their strategies instead
_NOT_CALLED = (operator.getitem, HINT_OP, torch.ops.aten.detach.default)


class EagerPlanError(GraphShardingError):
    """An ``EagerPlan`` does not fit the module or mesh it is applied to."""


@dataclass(frozen=True)
class EagerPlan:
    """Layouts an inferred plan gives a module's state and arguments, and the strategy of
    each call of its step (Note [plans in eager code]). ``predicted_bytes``: what the
    whole-graph plan moves per step. A plan without ``ops`` (a ``DepthPlan``'s, whose
    full-depth graph was never captured) lays out state and arguments only."""

    mesh_shape: tuple[int, ...]
    parameters: dict[str, Pl]
    buffers: dict[str, Pl]
    inputs: tuple[Pl, ...]
    predicted_bytes: int
    ops: tuple[PlannedOp, ...] = ()

    def apply(self, module: nn.Module, mesh: DeviceMesh, *,
              src_data_rank: int | None = None, follow: bool = True) -> nn.Module:
        """Lay out ``module``'s parameters and buffers as planned on ``mesh`` and its plain
        tensor arguments at each call; with ``follow`` (and ``ops``), make each call of a
        step (forward, loss, backward) as planned. Returns ``module``, changed in place.
        ``src_data_rank``: None (every rank holds the full values and keeps its piece,
        nothing sent) or the rank whose values are scattered."""
        from dtensor.parallel import distribute_module
        from dtensor.parallel.styles import distribute_parameter

        if tuple(mesh.shape) != self.mesh_shape:
            raise EagerPlanError(f"EagerPlan made for mesh {self.mesh_shape}, applied on "
                                 f"mesh {tuple(mesh.shape)}")
        self._check_names(module)

        def partition(prefix: str, sub: nn.Module, mesh: DeviceMesh) -> None:
            for name in list(sub._parameters):
                full = f"{prefix}.{name}" if prefix else name
                if full in self.parameters:
                    distribute_parameter(sub, name, mesh, self.parameters[full], src_data_rank)
            for name, b in list(sub._buffers.items()):
                full = f"{prefix}.{name}" if prefix else name
                if b is not None and full in self.buffers:
                    sub._buffers[name] = distribute_tensor(b, mesh, self.buffers[full],
                                                           src_data_rank=src_data_rank)

        def inputs(_module: nn.Module, args: tuple, mesh: DeviceMesh) -> tuple:
            if len(args) != len(self.inputs):
                raise EagerPlanError(f"the module was called with {len(args)} arguments; the "
                                     f"plan was made for {len(self.inputs)}")
            return tuple(_placed(a, mesh, pl, src_data_rank) for a, pl in zip(args, self.inputs))

        distribute_module(module, mesh, partition, inputs)
        if follow and self.ops:
            _follow(module, Follower(self.ops))
        return module

    @staticmethod
    def report(module: nn.Module) -> FollowReport:
        """What the last followed step of ``module`` (after ``apply``) did on this rank:
        calls matched to the plan, and every call that was not."""
        follower = getattr(module, _FOLLOWER, None)
        if follower is None:
            raise EagerPlanError(f"{type(module).__name__} follows no plan: apply an EagerPlan "
                                 "with ops (ShardingPlan.to_parallelize_plan()) and follow=True")
        return follower.report

    def _check_names(self, module: nn.Module) -> None:
        have = {n for n, _ in module.named_parameters()} | {n for n, _ in module.named_buffers()}
        missing = sorted((set(self.parameters) | set(self.buffers)) - have)
        if missing:
            more = " ..." if len(missing) > 4 else ""
            raise EagerPlanError(f"the plan lays out {missing[:4]}{more}, which "
                                 f"{type(module).__name__} does not have: apply it to the "
                                 "module the graph was captured from")

    def __str__(self) -> str:
        moving = sum(1 for op in self.ops if op.moves)
        lines = [f"EagerPlan on mesh {self.mesh_shape} (the whole-graph plan moves "
                 f"{self.predicted_bytes} bytes per step; {len(self.ops)} planned calls, "
                 f"{moving} of them moving an argument)"]
        lines += [f"  input{i}: {fmt_placements(p)}" for i, p in enumerate(self.inputs)]
        lines += [f"  {n}: {fmt_placements(p)}" for n, p in self.parameters.items()]
        lines += [f"  {n} (buffer): {fmt_placements(p)}" for n, p in self.buffers.items()]
        return "\n".join(lines)

    def calls(self) -> str:
        """Every planned call, one a line, those that move an argument marked ``*`` with
        the bytes the plan counts for the move (the gradients' moves to their parameters'
        layouts, at the end of the step, are the plan's other bytes)."""
        return "\n".join(f"{'*' if op.moves else ' '} {op}" for op in self.ops)


def _follow(module: nn.Module, follower: Follower) -> None:
    """Follow the plan in ``module``'s forward and in the backward nodes that forward makes
    (Note [when the follower listens]); inside ``following`` the whole step is already."""
    object.__setattr__(module, _FOLLOWER, follower)
    first_node = [0]

    def opened(_module: nn.Module, _args: tuple) -> None:
        if not follower.in_step:
            follower.reset()
            first_node[0] = torch._C._autograd._get_sequence_nr()
            follower.push()

    def forwarded(_module: nn.Module, _args: tuple, output: Any) -> None:
        if follower.in_step:
            return
        follower.pop()
        nodes = _nodes_since(output, first_node[0])
        for node in nodes:
            node.register_prehook(lambda _grads: follower.push_for_node())
        if nodes:
            nodes[0].register_prehook(lambda _grads: _at_end_of_backward(follower.close))
        else:
            follower.close()

    module.register_forward_pre_hook(opened)
    module.register_forward_hook(forwarded, always_call=True)


def _at_end_of_backward(fn: Any) -> None:
    torch.autograd.Variable._execution_engine.queue_callback(fn)


def _nodes_since(output: Any, first: int) -> list[Any]:
    """The autograd nodes behind ``output`` made since sequence number ``first`` (this
    forward's), the output's first; leaves (``AccumulateGrad``) left out."""
    flat = output if isinstance(output, (tuple, list)) else (output,)
    todo = [t.grad_fn for t in flat if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    seen: set[int] = set()
    out = []
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen or not hasattr(node, "_sequence_nr"):
            continue
        seen.add(id(node))
        if type(node).__name__ == "AccumulateGrad" or node._sequence_nr() < first:
            continue
        out.append(node)
        todo.extend(n for n, _ in node.next_functions)
    return out


@contextlib.contextmanager
def following(module: nn.Module) -> Iterator[None]:
    """Follow the plan applied to ``module`` in every call of the step inside: forward,
    loss and ``backward()`` (Note [when the follower listens]). Without it the module's
    forward and its backward are followed, the loss between them not.

    >>> # with following(model):
    >>> #     loss_fn(model(x), y).backward()
    """
    follower = getattr(module, _FOLLOWER, None)
    if follower is None:
        raise EagerPlanError(f"{type(module).__name__} follows no plan: apply an EagerPlan "
                             "with ops (ShardingPlan.to_parallelize_plan()) and follow=True")
    if follower.in_step:
        raise EagerPlanError("following(module) is already open for this module")
    follower.reset()
    follower.push()
    follower.in_step = True
    try:
        yield
    finally:
        follower.in_step = False
        follower.pop()
        follower.close()


def _placed(x: Any, mesh: DeviceMesh, pl: Sequence[Placement], src: int | None) -> Any:
    if isinstance(x, DTensor):
        return x if tuple(x.placements) == tuple(pl) else x.redistribute(mesh, pl)
    if isinstance(x, torch.Tensor):
        return distribute_tensor(x, mesh, pl, src_data_rank=src)
    return x


def eager_plan(plan: Any, module_inputs: int | None = None) -> EagerPlan:
    """The :class:`EagerPlan` of a ``ShardingPlan`` (``ShardingPlan.to_parallelize_plan``).
    ``module_inputs``: how many of the graph's ``input<i>`` values are the module's
    arguments (default: all of them; a training step's ``target<i>`` are the loss's)."""
    graph = plan.graph
    args = [n for n in graph.inputs if n.startswith("input") and n[5:].isdigit()]
    if module_inputs is not None:
        args = args[:module_inputs]
    params = graph.inputs[:graph.n_params]
    buffers = graph.inputs[graph.n_params:graph.n_params + graph.n_buffers]
    return EagerPlan(plan.mesh_shape, {n: plan.placements(n) for n in params},
                     {n: plan.placements(n) for n in buffers},
                     tuple(plan.placements(n) for n in args), plan.total_bytes,
                     planned_ops(plan))


def planned_ops(plan: Any) -> tuple[PlannedOp, ...]:
    """A :class:`PlannedOp` for every aten call of ``plan``'s graph, in graph order; a call
    is known by its op and its tensor arguments' global shapes (Note [following a plan in
    eager code])."""
    p = plan.problem
    units = {u.node: u for u in p.units}
    moved: dict[str, int] = {}
    for r in plan.reshards:
        moved[r.consumer] = moved.get(r.consumer, 0) + r.bytes
    choice = plan.solution.choice
    out = []
    for node in plan.graph.gm.graph.nodes:
        unit = units.get(node)
        if (node.op != "call_function" or unit is None or node.target in _NOT_CALLED
                or not hasattr(node.target, "_schema")):
            continue
        args = _arg_nodes(list(node.args) + list(node.kwargs.values()))
        if args is None:
            continue
        opt = unit.options[choice[unit.id]]
        moves = any(p.pls[p.out_id(choice, vid)] != want
                    for vid, want in zip(unit.inputs, opt.inputs))
        via = tuple(_hinted(a, units, choice) for a in args)
        out.append(PlannedOp(op_key(node.target), tuple(tuple(a.meta["val"].shape) for a in args),
                             tuple(opt.inputs), tuple(opt.outputs), node.name, moves,
                             moved.get(node.name, 0), via if any(via) else ()))
    return tuple(out)


def _hinted(arg: fx.Node, units: dict, choice: list[int]) -> tuple[str, Pl] | None:
    """(the hint, its placements) when ``arg`` is a ``shard_hint``'s value (Note [hints
    when following])."""
    unit = units.get(arg)
    if arg.target is not HINT_OP or unit is None:
        return None
    return arg.name, tuple(unit.options[choice[unit.id]].inputs[0])


def _arg_nodes(args: list[Any]) -> list[fx.Node] | None:
    """The tensor-valued nodes among ``args``, flattened in order (as the options' inputs
    are); None if an argument node is not a tensor."""
    out: list[fx.Node] = []

    def walk(a: Any) -> bool:
        if isinstance(a, (list, tuple)):
            return all(walk(x) for x in a)
        if isinstance(a, fx.Node):
            if not isinstance(a.meta.get("val"), torch.Tensor):
                return False
            out.append(a)
        return True

    return out if walk(args) else None
