"""A stage's backward in two halves: the inputs' gradients now, the weights' later.

Note [input and weight backward]
Zero-bubble schedules (``ScheduleInterleavedZeroBubble``, ``ScheduleZBVZeroBubble``) send
the gradient of a stage's inputs back as soon as it exists and compute the weights'
gradients later, in what would be the bubble. Both halves are exact, and no node of the
autograd graph runs its weight work twice:

- the input half is ``autograd.backward(outputs, grads, inputs=leaves, retain_graph=True)``:
  the engine runs only the nodes on a path to the received leaves, and asks each of them
  only for the gradients those paths need (``mm``'s backward then skips the weight's
  product);
- the nodes where that part of the graph meets a branch that reaches no input (an ``mm``
  whose other operand is a parameter's transpose, an ``add`` of a bias: a *weight branch*,
  whatever leaf or custom node it ends in) are the *junctions*; a pre-hook on each records
  the gradients flowing into it during the input half;
- the weight half starts at the junctions with those gradients: each junction runs again
  for its weight inputs only, then the weight branches run once, down to the leaves they
  reach. Outputs that no input reaches (a value computed from parameters alone)
  start the weight half with their own gradients.

A junction runs in the weight half as ``autograd.grad`` from its recorded gradients to its
weight edges alone: the engine runs no node below an edge it was asked for, so the junction
runs for its weight inputs only and nothing above it runs again. The weight edges' gradients
then start one ``autograd.backward`` over the weight branches, which reach no junction (a
node below a weight edge that reached an input would itself be on the input part), down to
every leaf they reach, as the whole backward would.

Note [a shared weight branch]
Where one weight-branch node feeds two junctions (a transpose of a weight computed once and
used twice), the junction-by-junction pass would reach it through the other junction as well
and count that use twice. Such a stage's weight half asks the engine, from the outputs again
(the graph was retained), for the gradient at every weight edge at once, each edge summing
all its uses, then runs the branches from there: exact, at the cost of the input part run a
second time (its leaves untouched: ``autograd.grad`` only returns what it is asked for).

A stage whose inputs need no gradient (the first stage) sends nothing back: its whole
backward is the weight half. The graph walk is iterative (deep models have long chains) and
visits each node once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import torch
from torch.autograd.graph import GradientEdge, get_gradient_edge


@dataclass
class WeightBackward:
    """The weight half of one micro-batch's backward (Note [input and weight backward])."""

    junctions: list[tuple[Any, tuple, list]]  # (node, gradients into it, its weight edges)
    heads: list[tuple[torch.Tensor, torch.Tensor | None]]  # outputs no input reaches
    # Note [a shared weight branch]: (outputs, their gradients) to start again from
    start_over: tuple[list, list] | None = None
    edges: list[Any] | None = None  # with start_over: every junction's weight edges, once

    def run(self) -> None:
        """Accumulate the weights' gradients into their ``.grad``; drops the graph."""
        roots: list[Any] = []
        grads: list[torch.Tensor] = []

        def start(edges: list, got: tuple) -> None:
            for edge, g in zip(edges, got):
                if g is not None:
                    roots.append(edge)
                    grads.append(g)

        if self.start_over is not None:
            outs, out_grads = self.start_over
            start(self.edges, torch.autograd.grad(outs, self.edges, _or_none(out_grads),
                                                  retain_graph=True, allow_unused=True))
        for node, received, edges in self.junctions:
            # the junction again, for its weight edges only: the engine stops at them
            starts = [(GradientEdge(node, i), g) for i, g in enumerate(received)
                      if g is not None]
            start(edges, torch.autograd.grad([e for e, _ in starts], edges,
                                             [g for _, g in starts], retain_graph=True,
                                             allow_unused=True))
        for out, g in self.heads:
            roots.append(out)
            grads.append(g if g is not None else torch.ones_like(out))
        if roots:  # the weight-only branches, once, down to every leaf they reach
            torch.autograd.backward(roots, grads)
        self.junctions, self.heads, self.start_over, self.edges = [], [], None, None


def backward_input(outputs: Sequence[torch.Tensor], grads: Sequence[torch.Tensor | None],
                   leaves: Iterable[torch.Tensor]) -> WeightBackward:
    """The input half: the received ``leaves`` get their ``.grad`` from ``outputs`` (with
    ``grads``, None for a scalar loss); returns the weight half, to run later."""
    pairs = [(o, g) for o, g in zip(outputs, grads) if o.requires_grad]
    leaves = [t for t in leaves if t.requires_grad]
    outs = [o for o, _ in pairs]
    out_grads = [g for _, g in pairs]
    if not pairs:
        return WeightBackward([], [])
    if not leaves:  # nothing goes back: all of it is the weight half
        return WeightBackward([], list(pairs))
    leaf_nodes = {get_gradient_edge(t).node for t in leaves}
    heads = [o.grad_fn for o in outs]
    children, order = _graph(heads)
    to_input = _reaching(order, children, leaf_nodes)
    parents: dict[Any, int] = {}
    for node in order:
        for c in set(children[node]):
            parents[c] = parents.get(c, 0) + 1
    junctions: list[tuple[Any, list]] = []
    for node in order:
        if node in to_input:
            edges = [GradientEdge(c, nr) for c, nr in node.next_functions
                     if c is not None and c not in to_input]
            if edges:
                junctions.append((node, edges))
    shared = any(parents[e.node] > 1 for _, edges in junctions for e in edges)
    received: dict[Any, tuple] = {}
    hooks = [] if shared else [n.register_prehook(_recorder(received, n))
                               for n, _ in junctions]
    try:
        torch.autograd.backward(outs, _or_none(out_grads), inputs=leaves, retain_graph=True)
    finally:
        for h in hooks:
            h.remove()
    # an output that is a leaf itself (a value passed through the stage) has no weights
    weight_heads = [(o, g) for o, g, h in zip(outs, out_grads, heads)
                    if h is not None and h not in to_input]
    if shared:
        unique = list({e: None for _, edges in junctions for e in edges})
        return WeightBackward([], weight_heads, start_over=(outs, out_grads), edges=unique)
    return WeightBackward([(n, received[n], edges) for n, edges in junctions
                           if n in received], weight_heads)


def _or_none(grads: list) -> list | None:
    return None if all(g is None for g in grads) else grads


def _recorder(received: dict, node: Any):
    def hook(grad_outputs: tuple) -> None:
        received[node] = grad_outputs
    return hook


def _graph(heads: list) -> tuple[dict, list]:
    """Every node below ``heads``: its children, and the nodes in an order where each comes
    after all of its children (post-order)."""
    children: dict[Any, list] = {}
    order: list = []
    stack = [(h, False) for h in heads if h is not None]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if node in children:
            continue
        kids = [c for c, _ in node.next_functions if c is not None]
        children[node] = kids
        stack.append((node, True))
        stack.extend((c, False) for c in kids if c not in children)
    return children, order  # each node once: it is expanded once


def _reaching(order: list, children: dict, targets: set) -> set:
    """The nodes from which some node of ``targets`` is reachable (themselves included)."""
    found = set()
    for node in order:  # children first
        if node in targets or any(c in found for c in children[node]):
            found.add(node)
    return found
