"""Capture a model's forward, or a whole training step, as an aten-level ``fx`` graph.

``make_fx`` traces with fake tensors (shapes only, nothing computed) after functionalize has
turned in-place ops into out-of-place ones, so every node is an aten overload the rule table
(``dtensor.ops.registry.REGISTRY``) knows, every value is written once, and each node's
``meta["val"]`` holds the shape, stride and dtype a rule needs. A training step traces
``torch.autograd.grad`` too: the backward's aten ops become nodes of the same graph, and so
does a plain SGD update when ``lr`` is given.

Inputs are flat: parameters (by qualified name), then buffers, then the call's arguments
(``input0``, ``input1``, ...; a training step's loss arguments follow as ``target0``, ...).

>>> import torch
>>> g = capture(torch.nn.Linear(4, 3), torch.randn(2, 4))
>>> g.inputs, g.outputs
(('weight', 'bias', 'input0'), ('output0',))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx

from dtensor.graph.annotate import capturing
from dtensor.graph.errors import CaptureError


@dataclass
class CapturedGraph:
    """An aten graph with names for its inputs and outputs.

    ``ties[i] = name``: output ``i`` must end in the placements input ``name`` gets (a
    gradient, or an updated parameter, laid out like its parameter)."""

    gm: fx.GraphModule
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    ties: dict[int, str] = field(default_factory=dict)
    kind: str = "forward"
    n_params: int = 0  # the first inputs that are the module's parameters (then its buffers)
    n_buffers: int = 0
    optimizer_states: int = 0  # per parameter, inputs of the graph (AdamW captured: 2)

    def placeholders(self) -> list[fx.Node]:
        return [n for n in self.gm.graph.nodes if n.op == "placeholder"]

    def name_of(self, node: fx.Node) -> str:
        """The readable name of a value: an input's name, else the node's."""
        names = getattr(self, "_names", None)
        if names is None:
            names = {n: name for n, name in zip(self.placeholders(), self.inputs)}
            self._names = names
        return names.get(node, node.name)

    def __call__(self, *flat: torch.Tensor) -> Any:
        """Run the graph on one device (the reference the tests compare against)."""
        return self.gm(*flat)


def _trace(fn: Callable[..., Any], flat: Sequence[torch.Tensor]) -> fx.GraphModule:
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.func import functionalize

    try:
        with capturing():
            gm = make_fx(fn, tracing_mode="fake")(*flat)
        if any(_mutates(n) for n in gm.graph.nodes) and not _out_of_place(gm):
            # again, out of place: the first trace ran autograd (functionalize's wrappers
            # cannot require grad), this one sees only the aten graph
            gm = make_fx(functionalize(gm, remove="mutations"),
                         tracing_mode="fake")(*(t.detach() for t in flat))
        return gm
    except Exception as e:  # noqa: BLE001 - say what could not be captured, keep the cause
        raise CaptureError(f"could not trace {getattr(fn, '__name__', fn)} into an aten graph: "
                           f"{type(e).__name__}: {e}") from e


def _out_of_place(gm: fx.GraphModule) -> bool:
    """Rewrite each in-place op on a fresh value (``mean.add_(eps)`` inside ``rms_norm``) to
    its out-of-place overload, later readers reading the new value; True if every mutation
    was of that kind: a value no op reads but the mutation, made by an op that is not a view
    (else the graph is left as it was: functionalize handles the rest).
    Cheaper than tracing again: the layers of a model repeat one such op each."""
    rewrites = []
    for node in gm.graph.nodes:
        if not _mutates(node):
            continue
        target = _functional_overload(node.target)
        base = node.args[0] if node.args else None
        if (target is None or not isinstance(base, fx.Node) or base.op != "call_function"
                or getattr(base.target, "is_view", True) or len(base.users) != 1):
            return False
        rewrites.append((node, target))
    for node, target in rewrites:
        node.target = target  # the result is the updated value; the base had no other reader
    gm.recompile()
    return True


def _functional_overload(op: Any) -> Any:
    """``aten.add_.Scalar`` -> ``aten.add.Scalar`` (None if there is none)."""
    name = getattr(op, "_schema", None) and op._schema.name.split("::")[-1]
    if not name or not name.endswith("_") or name.startswith("_"):
        return None
    packet = getattr(torch.ops.aten, name[:-1], None)
    return getattr(packet, op._overloadname, None) if packet is not None else None


def _mutates(node: fx.Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    return schema is not None and schema.is_mutable


def _state(model: torch.nn.Module) -> tuple[list[str], list[torch.Tensor], int]:
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    names = list(params) + list(buffers)
    return names, list(params.values()) + list(buffers.values()), len(params)


def capture(model: torch.nn.Module, *args: torch.Tensor) -> CapturedGraph:
    """The forward of ``model`` on example ``args`` (only their shapes and dtypes matter)."""
    from torch.func import functional_call

    names, state, n_params = _state(model)
    n_state = len(state)

    def forward(*flat: torch.Tensor) -> Any:
        tensors = dict(zip(names, flat[:n_state]))
        return functional_call(model, tensors, tuple(flat[n_state:]))

    gm = _trace(forward, state + list(args))
    outs = _output_count(gm)
    return CapturedGraph(gm, tuple(names) + tuple(f"input{i}" for i in range(len(args))),
                         tuple(f"output{i}" for i in range(outs)), n_params=n_params,
                         n_buffers=n_state - n_params)


@dataclass(frozen=True)
class AdamW:
    """The update ``torch.optim.AdamW`` makes at step ``step`` (``capture_train_step(...,
    optimizer=AdamW())``): its states ``exp_avg`` and ``exp_avg_sq`` are inputs and outputs
    of the graph."""

    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 1e-2
    step: int = 1

    def update(self, p: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(new parameter, new exp_avg, new exp_avg_sq), as torch's single-tensor AdamW."""
        b1, b2 = self.betas
        p = p * (1 - self.lr * self.weight_decay)
        m = m * b1 + g * (1 - b1)
        v = v * b2 + g * g * (1 - b2)
        denom = v.sqrt() / math.sqrt(1 - b2 ** self.step) + self.eps
        return p - (self.lr / (1 - b1 ** self.step)) * m / denom, m, v


def capture_train_step(model: torch.nn.Module, loss_fn: Callable[..., torch.Tensor],
                       args: Sequence[torch.Tensor], loss_args: Sequence[torch.Tensor] = (),
                       *, lr: float | None = None, optimizer: AdamW | None = None
                       ) -> CapturedGraph:
    """Forward, ``loss_fn(model(*args), *loss_args)``, backward, and with ``lr`` an SGD
    update: outputs ``loss`` then one ``grad:<name>`` (or ``new:<name>``) per parameter,
    each tied to its parameter's placements. With ``optimizer=AdamW(...)`` the AdamW update
    instead: inputs ``exp_avg:<name>`` and ``exp_avg_sq:<name>`` follow the targets, outputs
    ``new:<name>``, then ``new_exp_avg:<name>`` and ``new_exp_avg_sq:<name>`` tied to them.

    >>> import torch
    >>> g = capture_train_step(torch.nn.Linear(4, 3), lambda y: y.sum(), [torch.randn(2, 4)])
    >>> g.outputs, g.ties
    (('loss', 'grad:weight', 'grad:bias'), {1: 'weight', 2: 'bias'})
    """
    from torch.func import functional_call

    if lr is not None and optimizer is not None:
        raise CaptureError("capture_train_step: give lr (plain SGD) or optimizer, not both")
    names, state, n_params = _state(model)
    n_state, n_args, n_loss = len(state), len(args), len(loss_args)
    pnames = names[:n_params]

    def step(*flat: torch.Tensor) -> Any:
        tensors = dict(zip(names, flat[:n_state]))
        out = functional_call(model, tensors, tuple(flat[n_state:n_state + n_args]))
        loss = loss_fn(out, *flat[n_state + n_args:n_state + n_args + n_loss])
        params = list(flat[:n_params])
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        grads = [torch.zeros_like(p) if g is None else g for p, g in zip(params, grads)]
        if optimizer is not None:
            states = flat[n_state + n_args + n_loss:]
            new = [optimizer.update(p, g, m, v) for p, g, m, v in
                   zip(params, grads, states[:n_params], states[n_params:])]
            return (loss, *(n[0] for n in new), *(n[1] for n in new), *(n[2] for n in new))
        if lr is None:
            return (loss, *grads)
        return (loss, *(p - lr * g for p, g in zip(params, grads)))

    flat = [s.detach().requires_grad_(i < n_params) for i, s in enumerate(state)]
    moments = ([torch.zeros_like(p) for _ in range(2) for p in state[:n_params]]
               if optimizer is not None else [])
    gm = _trace(step, flat + list(args) + list(loss_args) + moments)
    prefix = "grad" if lr is None and optimizer is None else "new"
    inputs = (tuple(names) + tuple(f"input{i}" for i in range(n_args))
              + tuple(f"target{i}" for i in range(n_loss)))
    outputs = ("loss",) + tuple(f"{prefix}:{n}" for n in pnames)
    ties = {i + 1: n for i, n in enumerate(pnames)}
    if optimizer is not None:
        for kind in ("exp_avg", "exp_avg_sq"):
            inputs += tuple(f"{kind}:{n}" for n in pnames)
            ties.update({len(outputs) + i: f"{kind}:{n}" for i, n in enumerate(pnames)})
            outputs += tuple(f"new_{kind}:{n}" for n in pnames)
    return CapturedGraph(gm, inputs, outputs, ties, kind="train_step", n_params=n_params,
                         n_buffers=n_state - n_params,
                         optimizer_states=2 if optimizer is not None else 0)


def capture_fn(fn: Callable[..., Any], *args: torch.Tensor,
               names: Sequence[str] | None = None) -> CapturedGraph:
    """Any function of tensors; inputs named by ``names`` (default ``input0``, ...)."""
    names = tuple(names) if names is not None else tuple(f"input{i}" for i in range(len(args)))
    if len(names) != len(args):
        raise CaptureError(f"capture_fn: {len(names)} names {names} for {len(args)} inputs")
    gm = _trace(fn, list(args))
    return CapturedGraph(gm, names, tuple(f"output{i}" for i in range(_output_count(gm))))


def _output_count(gm: fx.GraphModule) -> int:
    out = next(n for n in gm.graph.nodes if n.op == "output")
    value = out.args[0]
    return len(value) if isinstance(value, (tuple, list)) else 1
