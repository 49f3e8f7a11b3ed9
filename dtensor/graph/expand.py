"""Expansion: run a ``ShardingPlan`` as an SPMD program on our DTensors.

Every rank walks the graph: each input is laid out as planned (``distribute_tensor`` of the
full value every rank holds), each call first moves its arguments to the chosen strategy's
input placements with ``redistribute`` (the planned reshards, nothing else) and then runs the
aten op on DTensors, whose dispatcher finds a strategy with nothing left to move. Outputs end
as ``output_targets`` says. The same code runs on simpg and on gloo or NCCL process groups.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import torch
from torch import fx

from dtensor.api import distribute_tensor
from dtensor.dispatch import fallback_policy
from dtensor.graph.annotate import HINT_OP
from dtensor.graph.errors import GraphShardingError
from dtensor.graph.show import ShardingPlan
from dtensor.mesh import DeviceMesh
from dtensor.tensor import DTensor


class ExpansionError(GraphShardingError):
    """The runtime could not follow the plan (a strategy the dispatcher did not take)."""


def run(plan: ShardingPlan, mesh: DeviceMesh, *inputs: torch.Tensor,
        strict: bool = True) -> Any:
    """Run the planned graph on this rank; ``inputs`` are the full values (the same on every
    rank) or DTensors (moved, differentiably), in the graph's input order. Returns the
    outputs as DTensors. ``strict``: raise if an op's result is not in its planned placements
    (else it is moved there)."""
    graph = plan.graph
    if tuple(mesh.shape) != plan.mesh_shape:
        raise ExpansionError(f"plan made for mesh {plan.mesh_shape}, run on mesh "
                             f"{tuple(mesh.shape)}")
    if len(inputs) != len(graph.inputs):
        raise ExpansionError(f"{len(inputs)} inputs for a graph of {len(graph.inputs)}: "
                             f"{', '.join(graph.inputs)}")
    env: dict[fx.Node, Any] = {}
    it = iter(inputs)
    with fallback_policy("silent"):  # ops without a rule were planned whole on purpose
        for node in graph.gm.graph.nodes:
            if node.op == "placeholder":  # a DTensor input keeps its autograd history
                env[node] = _move(next(it), mesh, plan.option(node).outputs[0])
            elif node.op == "get_attr":
                env[node] = _local(getattr(graph.gm, node.target), mesh,
                                   plan.option(node).outputs[0])
            elif node.op == "call_function":
                env[node] = _call(plan, mesh, node, env, strict)
            elif node.op == "output":
                return _outputs(plan, node, env)
    raise ExpansionError("the graph has no output node")


def _call(plan: ShardingPlan, mesh: DeviceMesh, node: fx.Node, env: dict, strict: bool) -> Any:
    if node.target is operator.getitem:
        src, i = node.args
        return env[src][i]
    opt = plan.option(node)
    wanted = iter(opt.inputs)

    def arg(a: Any) -> Any:
        if isinstance(a, fx.Node):
            return _move(env[a], mesh, next(wanted))
        if isinstance(a, (list, tuple)):
            return type(a)(arg(x) for x in a)
        return a

    args = tuple(arg(a) for a in node.args)
    kwargs = {k: arg(v) for k, v in node.kwargs.items()}
    if node.target is HINT_OP:
        return args[0]  # the move above was the hint's whole work
    out = node.target(*args, **kwargs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    fixed = []
    for t, want in zip(outs, opt.outputs):
        if not isinstance(t, torch.Tensor):
            fixed.append(t)
            continue
        if not isinstance(t, DTensor):  # a factory (arange): the same on every rank
            t = _local(t, mesh, want)
        elif tuple(t.placements) != tuple(want):
            if strict:
                raise ExpansionError(f"{node.name} = {node.target}: the runtime produced "
                                     f"{list(t.placements)}, the plan says {list(want)}")
            t = t.redistribute(mesh, want)
        fixed.append(t)
    fixed += list(outs[len(fixed):])
    return type(out)(fixed) if isinstance(out, (tuple, list)) else fixed[0]


def _move(x: Any, mesh: DeviceMesh, want: Sequence) -> Any:
    if isinstance(x, DTensor):
        return x if tuple(x.placements) == tuple(want) else x.redistribute(mesh, want)
    if isinstance(x, torch.Tensor):
        return _local(x.detach(), mesh, want)
    return x


def _local(full: torch.Tensor, mesh: DeviceMesh, placements: Sequence) -> DTensor:
    """Every rank holds ``full``: each takes its piece, nothing is sent."""
    return distribute_tensor(full, mesh, placements, src_data_rank=None)


def _outputs(plan: ShardingPlan, node: fx.Node, env: dict) -> Any:
    value = node.args[0]
    flat = list(value) if isinstance(value, (tuple, list)) else [value]
    targets = iter(plan.output_targets())
    out = []
    for n in flat:
        t = env[n] if isinstance(n, fx.Node) else n
        if isinstance(t, DTensor):
            want = next(targets)
            if tuple(t.placements) != tuple(want):
                t = t.redistribute(t.device_mesh, want)
        out.append(t)
    return tuple(out) if isinstance(value, (tuple, list)) else out[0]
