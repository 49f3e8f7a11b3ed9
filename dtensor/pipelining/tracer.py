"""torch.distributed.pipelining's tracer front end: ``pipeline(module, mb_args,
split_spec=...)`` cuts a whole model into stage modules at the named submodules.

Note [cutting a traced model]
``torch.export`` (non-strict) traces one micro-batch of the model into an aten graph whose
every node records the module that ran it (``nn_module_stack``). A split point
``{"layers.2": SplitPoint.BEGINNING}`` starts a new stage at the first node run inside
``layers.2``; ``END`` starts one after the last. Each stage is a ``GraphModule`` of its own
nodes, holding its own parameters (the model's ``Parameter`` objects, under their names):

- what crosses boundary s (stage s - 1 to s) is every value made before it (or a model
  input) that a node at or after it reads, in graph order; a value read two stages later is
  passed through the stage between, so each stage only talks to its neighbours, as a
  ``PipelineStage`` does;
- the first stage takes the model's own ``(*args, **kwargs)``; the last returns the model's
  own output;
- a parameter read by two stages (weights tied across a cut) is refused by name: each
  stage owns and updates its own parameters; buffers and constants are copied to each stage
  that reads them.
"""

from __future__ import annotations

import enum
from typing import Any

import torch
import torch.fx as fx
from torch import nn
from torch.utils import _pytree as pytree

from dtensor.pipelining.stage import PipelineStage, PipeliningError


# Note [pipe_split markers]
# ``pipe_split()`` in a model's forward marks a cut, as torch's does: an operator that does
# nothing, registered with a side effect so the trace keeps it where it ran. ``pipeline``
# starts a new stage after each marker (consecutive markers make one cut) and drops the
# markers from the stage modules. torch's own marker (``torch.ops.pippy._pipe_split``,
# from ``torch.distributed.pipelining.pipe_split``) cuts the same way, so a model written
# for torch's tracer needs no change.
torch.library.define("dtensor_pipelining::pipe_split", "() -> ()")


@torch.library.impl("dtensor_pipelining::pipe_split", "BackendSelect")
def _pipe_split_eager() -> None:
    return None


@torch.library.register_fake("dtensor_pipelining::pipe_split")
def _pipe_split_fake() -> None:
    return None


_MARKER = torch.ops.dtensor_pipelining.pipe_split.default
fx.node._side_effectful_functions.add(_MARKER)  # the trace keeps it though it returns nothing
_MARKER_NAMES = frozenset({"dtensor_pipelining.pipe_split.default", "pippy._pipe_split.default"})


def pipe_split() -> None:
    """Mark a stage boundary inside ``forward`` (torch's ``pipe_split``): ``pipeline`` cuts
    the traced model here (Note [pipe_split markers]); run eagerly it does nothing.

    >>> class Two(torch.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
    ...     def forward(self, x):
    ...         x = self.a(x)
    ...         pipe_split()
    ...         return self.b(x)
    >>> pipeline(Two(), (torch.randn(2, 4),)).num_stages
    2
    """
    torch.ops.dtensor_pipelining.pipe_split()


def _is_marker(node: fx.Node) -> bool:
    return node.op == "call_function" and str(node.target) in _MARKER_NAMES


class SplitPoint(enum.Enum):
    """Where a stage starts relative to a named submodule (torch's names)."""

    BEGINNING = 1
    END = 2


class Pipe:
    """A model cut into stage modules (Note [cutting a traced model])."""

    def __init__(self, stage_modules: list[fx.GraphModule]) -> None:
        self.stage_modules = stage_modules
        self.num_stages = len(stage_modules)

    def get_stage_module(self, stage_idx: int) -> nn.Module:
        if not 0 <= stage_idx < self.num_stages:
            raise PipeliningError(f"stage {stage_idx} of a pipe of {self.num_stages} stages")
        return self.stage_modules[stage_idx]

    def build_stage(self, stage_index: int, device: torch.device | str | None = None,
                    group: Any = None, **kwargs: Any) -> PipelineStage:
        """Stage ``stage_index`` as a ``PipelineStage`` on ``group`` (torch's
        ``Pipe.build_stage``; ``kwargs`` go to ``PipelineStage``: ``mesh``,
        ``static_shapes``)."""
        return PipelineStage(self.get_stage_module(stage_index), stage_index,
                             self.num_stages, device, group=group, **kwargs)


class _First(nn.Module):
    """The first stage: the model's ``(*args, **kwargs)`` flattened as the trace took them."""

    def __init__(self, graph_module: fx.GraphModule, in_spec: pytree.TreeSpec) -> None:
        super().__init__()
        self.graph_module, self.in_spec = graph_module, in_spec

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        flat, spec = pytree.tree_flatten((args, kwargs))
        if spec != self.in_spec:
            raise PipeliningError(f"the first stage takes the inputs the model was traced "
                                  f"with: {self.in_spec}, got {spec}")
        return self.graph_module(*flat)


def pipeline(module: nn.Module, mb_args: tuple, mb_kwargs: dict | None = None,
             split_spec: dict[str, SplitPoint] | None = None) -> Pipe:
    """Trace ``module`` on one micro-batch (``mb_args``, ``mb_kwargs``) and cut it at
    ``split_spec`` and at every ``pipe_split()`` its forward ran (Note [cutting a traced
    model], Note [pipe_split markers])."""
    split_spec = split_spec or {}
    names = dict(module.named_modules())
    for fqn, point in split_spec.items():
        if fqn not in names or not fqn:
            raise PipeliningError(f"split_spec names {fqn!r}, which is not a submodule of "
                                  f"{type(module).__name__}")
        if not isinstance(point, SplitPoint):
            raise PipeliningError(f"split_spec[{fqn!r}] is {point!r}: expected "
                                  f"SplitPoint.BEGINNING or SplitPoint.END")
    exported = torch.export.export(module, tuple(mb_args), mb_kwargs or {}, strict=False)
    gm = exported.module()
    in_spec = pytree.tree_flatten((tuple(mb_args), mb_kwargs or {}))[1]
    nodes, marked = [], []  # compute nodes; where a pipe_split() starts a stage among them
    for n in gm.graph.nodes:
        if _is_marker(n):
            marked.append(len(nodes))
        elif n.op not in ("placeholder", "output", "get_attr") and not (
                n.op == "call_module" and n.target == "_guards_fn"):
            nodes.append(n)
    if not split_spec and not marked:
        raise PipeliningError("pipeline found no cut: give split_spec (e.g. {'layers.2': "
                              "SplitPoint.BEGINNING}) or call pipe_split() in forward where a "
                              "stage should end")
    stage_of = _stages(nodes, split_spec, marked)
    n_stages = max(stage_of.values(), default=0) + 1
    params = {name for name, _ in gm.named_parameters()}
    _refuse_shared_parameters(gm, stage_of, params)
    return Pipe([_stage_module(gm, s, n_stages, stage_of, in_spec) for s in range(n_stages)])


def _inside(node: fx.Node, fqn: str) -> bool:
    stack = node.meta.get("nn_module_stack") or {}
    return any(path == fqn or path.startswith(fqn + ".") for path, _ in stack.values())


def _stages(nodes: list[fx.Node], split_spec: dict[str, SplitPoint], marked: list[int]
            ) -> dict[fx.Node, int]:
    """Each compute node's stage: a cut before the first node inside a BEGINNING point, after
    the last node inside an END point, and at each marked position."""
    cuts = {at for at in marked if 0 < at < len(nodes)}  # node positions a stage starts at
    for fqn, point in split_spec.items():
        inside = [i for i, n in enumerate(nodes) if _inside(n, fqn)]
        if not inside:
            raise PipeliningError(f"split point {fqn!r}: no operation of the traced forward "
                                  f"ran inside it")
        at = inside[0] if point is SplitPoint.BEGINNING else inside[-1] + 1
        if 0 < at < len(nodes):
            cuts.add(at)
    stage, out = 0, {}
    for i, n in enumerate(nodes):
        stage += i in cuts
        out[n] = stage
    return out


def _refuse_shared_parameters(gm: fx.GraphModule, stage_of: dict[fx.Node, int],
                              params: set[str]) -> None:
    for n in gm.graph.nodes:
        if n.op == "get_attr" and n.target in params:
            readers = sorted({stage_of[u] for u in n.users if u in stage_of})
            if len(readers) > 1:
                raise PipeliningError(
                    f"parameter {n.target!r} is read by stages {readers}: a stage owns and "
                    f"updates its own parameters (weights tied across a cut are not "
                    f"supported); move the split points so one stage holds every use")


def _stage_module(gm: fx.GraphModule, s: int, n_stages: int, stage_of: dict[fx.Node, int],
                  in_spec: pytree.TreeSpec) -> nn.Module:
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    output = next(n for n in gm.graph.nodes if n.op == "output")

    def made_before(v: fx.Node, boundary: int) -> bool:
        return v.op == "placeholder" or (v in stage_of and stage_of[v] < boundary)

    def crossing(boundary: int) -> list[fx.Node]:
        """The values boundary ``boundary`` carries (placeholders at boundary 0)."""
        if boundary == 0:
            return placeholders
        readers = [n for n in stage_of if stage_of[n] >= boundary] + [output]
        values = {v for r in readers for v in r.all_input_nodes if made_before(v, boundary)}
        return sorted(values, key=order.__getitem__)

    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for v in crossing(s):
        env[v] = graph.placeholder(v.name)
    for n in gm.graph.nodes:
        if n.op == "get_attr" and any(stage_of.get(u) == s for u in n.users):
            env[n] = graph.get_attr(n.target)
        elif stage_of.get(n) == s:
            env[n] = graph.node_copy(n, env.__getitem__)
    if s == n_stages - 1:
        graph.output(pytree.tree_map_only(fx.Node, env.__getitem__, output.args[0]))
    else:
        outs = crossing(s + 1)
        for v in outs:
            if not isinstance(v.meta.get("val"), torch.Tensor):
                raise PipeliningError(f"the cut after stage {s} carries {v.name!r}, which is "
                                      f"not a tensor: only tensors cross stage boundaries")
        graph.output(tuple(env[v] for v in outs))
    module = fx.GraphModule(gm, graph, class_name=f"Stage{s}")
    args_spec, kwargs_spec = in_spec.children()
    plain_args = kwargs_spec.num_leaves == 0 and all(c.num_children == 0
                                                     for c in args_spec.children())
    # positional tensors only: the flat inputs are the arguments, the names stay the model's
    return module if s > 0 or plain_args else _First(module, in_spec)
