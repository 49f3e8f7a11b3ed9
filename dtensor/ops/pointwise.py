"""Pointwise ops, found through ``torch.Tag.pointwise``: broadcasting, scalars, Partial.

Per mesh dim, a pointwise op can run on matching pieces: all inputs Replicate, or the output
sharded on dim d with each input sharded on the dim aligned with d (Replicate where the input
broadcasts along d). Partial inputs are allowed only where the op is linear:

Note [Partial in pointwise ops]
- add/sub of two P(sum) (or two P(avg)) is P: (a1+a2) + (b1+b2) = (a1+b1) + (a2+b2).
  P(sum) + R is not P(sum): R would be added once per rank. A Python scalar likewise.
- neg, and mul/div by a Replicate or scalar factor, keep P(sum)/P(avg): c*(a1+a2) = c*a1 + c*a2.
- mul of two Partials is not linear: (a1+a2)(b1+b2) has cross terms.
- P(avg)/P(max)/P(min) + a scalar c stay Partial: mean/max/min of (a_i + c) is theirs + c.
- floor/trunc division is not linear, so ``div(..., rounding_mode=...)`` keeps no Partial.
- P(max)/P(min) survive only order-preserving maps; none others are claimed here yet.

Elementwise ops the tag misses have their own rules here: floor_divide, prelu's kernel and its
backward, glu and its backward (_safe_softmax: ``norms``). floor_divide and _prelu_kernel are
elementwise with broadcasting: matching pieces (``broadcast_shards``). Neither is linear:
floor(a1/b) + floor(a2/b) != floor((a1+a2)/b), and prelu(a1) + prelu(a2) != prelu(a1 + a2)
when the signs differ; no Partial passes.
"""

from __future__ import annotations

import torch

from dtensor.ops._common import LINEAR, broadcast_shards, linear_partials
from dtensor.ops.indexing import aligned_shards
from dtensor.ops.registry import (REGISTRY, OpSpec, Strategy, TensorSpec, sharding_rule,
                                  takes_split_rules)
from dtensor.placements import Partial, Placement, Replicate, Shard

aten = torch.ops.aten
R = Replicate()

# linear in every tensor argument jointly (sum of Partials stays Partial)
_JOINTLY_LINEAR = {"add", "sub", "neg", "positive"}
# linear in one argument when the others are Replicate or scalars: {name: argument positions}
_LINEAR_IN = {"mul": (0, 1), "div": (0,), "true_divide": (0,), "neg": (0,)}
# a Python scalar operand added to a Partial would be counted once per rank
_ADDS_SCALAR = {"add", "sub", "rsub"}


def _out_shape(op: OpSpec) -> tuple[int, ...]:
    shapes = [t.shape for t in op.tensors()]
    return tuple(torch.broadcast_shapes(*shapes)) if shapes else ()


def _aligned_dim(t: TensorSpec, out_ndim: int, out_dim: int, out_size: int) -> int | None:
    """The input dim that lines up with output dim ``out_dim``, unless it broadcasts."""
    d = out_dim - (out_ndim - t.ndim)
    if d < 0 or t.shape[d] != out_size:
        return None
    return d


@takes_split_rules  # Note [split rules in propagation]
def pointwise_rule(op: OpSpec) -> list[Strategy]:
    tensors = op.tensors()
    out_shape = _out_shape(op)
    n_out = _num_outputs(op)
    strategies = [Strategy(tuple(Replicate() for _ in tensors), (Replicate(),) * n_out)]
    for d, size in enumerate(out_shape):
        ins: list[Placement] = []
        for t in tensors:
            a = _aligned_dim(t, len(out_shape), d, size)
            ins.append(Shard(a) if a is not None else Replicate())
        strategies.append(Strategy(tuple(ins), (Shard(d),) * n_out))
    strategies.extend(_partial_strategies(op, tensors, n_out))
    return strategies


def _partial_strategies(op: OpSpec, tensors: list[TensorSpec], n_out: int) -> list[Strategy]:
    name = op.op._schema.name.split("::")[-1].rstrip("_")
    has_scalar = any(isinstance(a, (int, float, complex)) and not isinstance(a, bool)
                     for a in op.args[1:])
    out: list[Strategy] = []
    if op.kwarg("rounding_mode") is not None:
        return out  # floor/trunc division is not linear: floor(a1/c) + floor(a2/c) != floor(a/c)
    if name in ("add", "sub") and has_scalar and len(tensors) == 1:
        # shifting every addend by c shifts their mean, max and min by c (not their sum)
        out += [Strategy((Partial(k),), (Partial(k),) * n_out) for k in ("avg", "max", "min")]
    for kind in ("sum", "avg"):
        p = Partial(kind)
        if name in _JOINTLY_LINEAR and not (name in _ADDS_SCALAR and has_scalar):
            if all(t.ndim > 0 or len(tensors) == 1 for t in tensors):
                out.append(Strategy(tuple(p for _ in tensors), (p,) * n_out))
        for pos in _LINEAR_IN.get(name, ()):
            if pos < len(tensors):
                ins = tuple(p if i == pos else Replicate() for i in range(len(tensors)))
                out.append(Strategy(ins, (p,) * n_out))
    return out


def _num_outputs(op: OpSpec) -> int:
    return sum(1 for r in op.op._schema.returns if "Tensor" in str(r.type))


# -- elementwise ops the pointwise tag misses (registered before the tag sweep below) ----------
sharding_rule(aten.floor_divide.default, aten.floor_divide.Scalar,
              aten._prelu_kernel.default)(broadcast_shards)


@sharding_rule(aten._prelu_kernel_backward.default)
def prelu_kernel_backward(op: OpSpec) -> list[Strategy]:
    """``(g, x, w) -> (g * (x > 0 ? 1 : w), g * (x > 0 ? 0 : x))``, both elementwise over the
    broadcast shape (autograd sums grad_w down to w's shape afterwards): matching pieces, and
    linear in g."""
    tensors = op.tensors()
    shape = tuple(torch.broadcast_shapes(*(t.shape for t in tensors)))
    found = [Strategy((R, R, R), (R, R))]
    found += [Strategy(aligned_shards(tensors, shape, d), (Shard(d), Shard(d)))
              for d in range(len(shape))]
    return found + linear_partials(op, 0, LINEAR, [True, True])


def _glu_dim(op: OpSpec, pos: int, ndim: int) -> int:
    return op.arg(pos, "dim", -1) % max(ndim, 1)


@sharding_rule(aten.glu.default)
def glu(op: OpSpec) -> list[Strategy]:
    """glu(x, dim) = a * sigmoid(b), a and b the halves of x along ``dim``: element i of the
    output reads elements i and i + n/2 of ``dim``, so ``dim`` stays whole (a chunk's halves
    are not the halves' chunks); every other dim shards. a * sigmoid(b) is not linear."""
    t = op.tensors()[0]
    dim = _glu_dim(op, 1, t.ndim)
    return [Strategy((R,), (R,))] + [Strategy((Shard(d),), (Shard(d),))
                                     for d in range(t.ndim) if d != dim]


@sharding_rule(aten.glu_backward.default)
def glu_backward(op: OpSpec) -> list[Strategy]:
    """``(g, x, dim)``: [g * sigmoid(b), g * a * sigmoid(b) * (1 - sigmoid(b))] along ``dim``:
    ``dim`` whole, other dims shard alike in g and x; linear in g."""
    x = op.tensors()[1]
    dim = _glu_dim(op, 2, x.ndim)
    found = [Strategy((R, R), (R,))]
    found += [Strategy((Shard(d), Shard(d)), (Shard(d),)) for d in range(x.ndim) if d != dim]
    return found + linear_partials(op, 0, LINEAR)


# -- every op tagged pointwise -----------------------------------------------------------------
def _is_pointwise(op: object) -> bool:
    return torch.Tag.pointwise in getattr(op, "tags", ())


def register_pointwise_ops() -> int:
    """Register the rule for every aten overload tagged pointwise (explicit exceptions
    below); returns how many were registered."""
    count = 0
    for name in dir(aten):
        packet = getattr(aten, name, None)
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        for overload_name in packet.overloads():
            op = getattr(packet, overload_name)
            if not _is_pointwise(op) or op in REGISTRY or _excluded(op):
                continue
            REGISTRY.register([op], pointwise_rule)
            count += 1
    return count


def _excluded(op: object) -> bool:
    schema = op._schema  # type: ignore[attr-defined]
    # random ops draw per element: sharding them needs the sharded RNG (own rule)
    if any(s in schema.name for s in ("rand", "bernoulli", "dropout", "normal", "uniform")):
        return True
    # ops whose outputs are not all tensors shaped like the broadcast result
    return not all("Tensor" in str(r.type) for r in schema.returns) or not schema.returns


def register_elementwise_prims() -> int:
    """The prims made elementwise (torch._prims builds them with its elementwise meta
    function; few carry the pointwise tag: erfcx, ndtri, the bessel functions... do not) and
    those tagged pointwise take the same rule; returns how many were registered."""
    from torch._prims import _prim_elementwise_meta

    count = 0
    prims = torch.ops.prims
    for name in dir(prims):
        packet = getattr(prims, name, None)
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        for overload_name in packet.overloads():
            op = getattr(packet, overload_name)
            meta = getattr(getattr(op, "prim_meta_impl", None), "func", None)
            elementwise = meta is _prim_elementwise_meta or _is_pointwise(op)
            if not elementwise or op in REGISTRY or _excluded(op):
                continue
            REGISTRY.register([op], pointwise_rule)
            count += 1
    return count


REGISTERED = register_pointwise_ops() + register_elementwise_prims()
