"""Foreach ops (``aten._foreach_*``): the optimizers' and gradient clipping's path.

A foreach op is N independent ops, one per list position: ``_foreach_add_(xs, ys, alpha=a)``
is ``xs[i].add_(ys[i], alpha=a)`` for every i; a single tensor argument (the ``.Tensor``
overloads' 0-d factor, addcmul's per-position ``scalars``) and scalar lists are shared.
Position i is an elementwise op (or, for ``norm``/``max``/``powsum``, a full reduction to a
0-d tensor), so it can run on matching pieces exactly like its pointwise or reduction
counterpart; a strategy for one mesh dim gives each position its own placement.

The propagator prices the product of the strategies over mesh dims, so a rule offers only a
few: each position keeping the placement its leading tensor has now (the written list for
in-place and ``out=`` ops, so the optimizer state stays where it is), each position following
the first tensor there that is not Replicate (an out-of-place op on mixed lists slices a
Replicate operand for free instead of gathering a Shard), and everything Replicate. A position
whose placement the op cannot keep falls back to Replicate.

Note [Partial in foreach ops]
Partial survives only where the position's op is linear in the arguments carrying it, the
other tensors at that position being Replicate (``_PARTIAL`` lists them, each with its math);
as in Note [Partial in pointwise ops]:
- ``_foreach_mul_.Scalar`` keeps P(sum): c (a1 + a2) = c a1 + c a2;
- ``_foreach_add_.Scalar`` does not: (a1 + c) + (a2 + c) adds c once per rank; the mean, max
  and min of the addends do shift by c once, so P(avg)/P(max)/P(min) survive it;
- ``_foreach_lerp_`` is (1 - w) a + w b, linear in (a, b) jointly for a weight all ranks hold.

Note [foreach norms]
``_foreach_norm`` reduces a whole tensor. Over the pieces of a Shard, |x|_1 and |x|_0 are sums
of the pieces' norms (P(sum); an empty piece gives 0), |x|_inf the max of theirs (P(max)) and
|x|_-inf the min (P(min)). Max and min of zero elements are undefined (the op raises), so an
empty piece (uneven shards) instead gives the reduction's identity through a local function
(Note [local functions]): 0 for the inf-norm (norms are >= 0), inf for the -inf norm, the
dtype's lowest value for ``_foreach_max``. That is exact only when the whole tensor is not
empty (torch raises there), so without that, and for ``out=`` lists, a Shard whose pieces may
be empty needs Replicate.
The 2-norm is NOT P(sum): sqrt(s1 + s2) != sqrt(s1) + sqrt(s2), and no local value per rank
sums (or maxes) to it without knowing the others'. Its exact cheap form all-reduces p-th
powers and takes the root (torch's _NormPartial); our placements have no such kind and a rule
cannot communicate, so here the 2-norm and every other order need the whole tensor
(Replicate), and ``dtensor.decompositions.foreach_norm`` decomposes those calls before the rule runs
(Note [sharded foreach norms]). ``_foreach_powsum`` (sum of |x|^p) is a plain sum: P(sum)
for every order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from dtensor.layout import local_shape, mesh_coordinates
from dtensor.ops._common import no_empty_piece
from dtensor.ops.registry import (OpSpec, Strategy, TensorSpec, local_function,
                                  takes_split_rules,
                                  sharding_rule)
from dtensor.placements import Partial, Placement, Replicate, Shard

aten = torch.ops.aten
R = Replicate()
_SUM_AVG = ("sum", "avg")
_SHIFT = ("avg", "max", "min")  # what survives adding the same c to every addend
_ALL = ("sum", "avg", "max", "min")

# One row per (op name, overload kind): groups of arguments that may carry a Partial together,
# with the Partial kinds each allows; every other tensor at the position must be Replicate.
# The ``out=`` list of the *_out overloads takes the output's placement in every group.
Groups = tuple[tuple[tuple[str, ...], tuple[str, ...]], ...]
_SCALARS = ("Scalar", "ScalarList", "Tensor")  # a factor/shift every rank holds whole
_PARTIAL: dict[tuple[str, str], Groups] = {
    # (a1 + a2) + alpha (b1 + b2) = (a1 + alpha b1) + (a2 + alpha b2)
    **{(n, "List"): ((("self", "other"), _SUM_AVG),) for n in ("add", "sub")},
    # P(sum) + c would add c once per rank; mean/max/min of (a_k + c) are theirs + c
    **{(n, k): ((("self",), _SHIFT),) for n in ("add", "sub") for k in _SCALARS},
    # c (a1 + a2) = c a1 + c a2; (a1 + a2) / c = a1 / c + a2 / c
    **{(n, k): ((("self",), _SUM_AVG),) for n in ("mul", "div") for k in _SCALARS},
    # a product of two Partials has cross terms: one Partial factor, the other whole
    ("mul", "List"): ((("self",), _SUM_AVG), (("other",), _SUM_AVG)),
    ("div", "List"): ((("self",), _SUM_AVG),),  # 1 / (b1 + b2) is not linear in b
    ("neg", ""): ((("self",), _SUM_AVG),),
    # lerp(a, b, w) = (1 - w) a + w b: linear in (a, b) jointly when w is held whole
    **{("lerp", k): ((("self", "tensors1"), _SUM_AVG),) for k in ("Scalar", "ScalarList", "List")},
    # a + v t1 t2 is linear in (a, t1) with t2 whole, and in (a, t2) with t1 whole
    **{("addcmul", k): ((("self", "tensor1"), _SUM_AVG), (("self", "tensor2"), _SUM_AVG))
       for k in _SCALARS},
    # a + v t1 / t2 is linear in (a, t1) with t2 whole; 1 / t2 is not linear
    **{("addcdiv", k): ((("self", "tensor1"), _SUM_AVG),) for k in _SCALARS},
    # every piece is a copy of its source (or zero): any reduction of them is the copy
    ("zero", ""): ((("self",), _ALL),),
    ("clone", ""): ((("self",), _ALL),),
    ("copy", ""): ((("self", "src"), _ALL),),
    # max(max_k a_k, c) = max_k max(a_k, c), and max of two P(max) is P(max); min mirrored
    **{(n, k): ((("self",), ("max",)),) for n in ("clamp_min", "maximum")
       for k in ("Scalar", "ScalarList")},
    **{(n, "List"): ((("self", "other"), ("max",)),) for n in ("clamp_min", "maximum")},
    **{(n, k): ((("self",), ("min",)),) for n in ("clamp_max", "minimum")
       for k in ("Scalar", "ScalarList")},
    **{(n, "List"): ((("self", "other"), ("min",)),) for n in ("clamp_max", "minimum")},
}

# Note [foreach norms]: ord -> the Partial a Shard of the reduced tensor gives
_NORM_OVER_SHARD = {1.0: "sum", 0.0: "sum", math.inf: "max", -math.inf: "min"}
_REDUCTIONS = ("norm", "max", "powsum")
# _foreach_mm is N matmuls, not elementwise: left to the fallback until it gets the matmul rules
_NOT_ELEMENTWISE = ("mm",)


@dataclass(frozen=True, slots=True)
class _Call:
    """A foreach call as positions: per flattened tensor, the argument it came from."""

    slots: tuple[tuple[str, int | None], ...]  # (argument name, list position or None)
    positions: tuple[dict[str, int], ...]  # per list position: argument -> flattened index
    name: str  # op name without _foreach_ and the in-place underscore: "add", "norm"
    kind: str  # overload kind without _out: "List", "Scalar", "" ...
    lead: str  # the argument whose current placements "keep" keeps
    written: bool  # the lead is written (in-place or out=): it cannot move
    n_out: int  # tensors returned (N for a returned list, 0 for in-place and out=)

    @property
    def n(self) -> int:
        return len(self.positions)


def _call(op: OpSpec) -> _Call:
    schema = op.op._schema
    names = [a.name for a in schema.arguments]
    slots: list[tuple[str, int | None]] = []
    n = 0
    for name, v in list(zip(names, op.args)) + list(op.kwargs):
        if isinstance(v, TensorSpec):
            slots.append((name, None))
        elif isinstance(v, tuple) and any(isinstance(x, TensorSpec) for x in v):
            slots += [(name, i) for i, x in enumerate(v) if isinstance(x, TensorSpec)]
            n = max(n, len(v))
    lists = [a.name for a in schema.arguments if str(a.type) == "List[Tensor]"]
    written = [a.name for a in schema.arguments
               if a.alias_info is not None and a.alias_info.is_write]
    overload = op.op._overloadname
    kind = overload.removesuffix("_out").removesuffix("out")
    kind = "" if kind == "default" else kind
    name = schema.name.split("::")[-1].removeprefix("_foreach_").rstrip("_")
    positions: list[dict[str, int]] = [{} for _ in range(n)]
    for k, (a, pos) in enumerate(slots):
        if pos is not None:
            positions[pos][a] = k
    n_out = n if any(str(r.type) == "List[Tensor]" for r in schema.returns) else 0
    # a reduction's out= list follows from its input, so "keep" keeps the input's placements
    lead = "self" if name in _REDUCTIONS else (written[0] if written else lists[0])
    return _Call(tuple(slots), tuple(positions), name, kind, lead, bool(written), n_out)


@takes_split_rules(reads=True)  # Note [split rules in propagation]
def foreach_rule(op: OpSpec) -> list[Strategy]:
    """Strategies for one mesh dim: keep, follow (out of place only), all Replicate.

    >>> g = TensorSpec((7, 5), (5, 1), torch.float32, (Partial(),))
    >>> foreach_rule(OpSpec(aten._foreach_mul_.Scalar, ((g,), 0.5), (), (4,)))
    [Strategy(P(sum)->), Strategy(R->)]
    >>> foreach_rule(OpSpec(aten._foreach_add.Scalar, ((g,), 0.5), (), (4,)))
    [Strategy(R->R)]
    """
    call = _call(op)
    tensors = op.tensors()
    m = op.mesh_dim
    leads = [[call.lead]] if call.written else [[call.lead], None]
    found: list[Strategy] = []
    for lead in leads + [[]]:  # keep, follow (not for written lists), all Replicate
        ins: list[Placement] = [R] * len(tensors)
        outs: list[Placement] = [R] * call.n_out
        for i in range(call.n):
            at = call.positions[i]
            order = lead if lead is not None else [a for a in at if a != "out"]
            for a in order:
                if a not in at or tensors[at[a]].placements[m] == R:
                    continue
                got = _position(op, call, at, tensors, a, tensors[at[a]].placements[m])
                if got is not None:
                    for k, p in got[0].items():
                        ins[k] = p
                    if call.n_out:
                        outs[i] = got[1]
                    break
        s = Strategy(tuple(ins), tuple(outs), _local(call, tensors, ins, outs))
        if s not in found:
            found.append(s)
    return found


def _position(op: OpSpec, call: _Call, at: dict[str, int], tensors: list[TensorSpec],
              lead: str, p: Placement) -> tuple[dict[int, Placement], Placement] | None:
    """Placements of position i's tensors when its ``lead`` tensor has ``p``, and the output
    placement; None when the op cannot keep ``p`` there."""
    if call.name in _REDUCTIONS:
        return _reduction_position(op, call, at, tensors, lead, p)
    if isinstance(p, Shard):
        return _shard_position(at, tensors, lead, p)
    if isinstance(p, Partial):
        return _partial_position(call, at, tensors, lead, p)
    return None


def _shard_position(at: dict[str, int], tensors: list[TensorSpec], lead: str,
                    p: Shard) -> tuple[dict[int, Placement], Placement] | None:
    """Elementwise on matching pieces: every tensor sharded on the dim aligned with the
    output's (Replicate where it broadcasts), as in the pointwise rule."""
    shape = _broadcast([tensors[k].shape for k in at.values()])
    t = tensors[at[lead]]
    d = p.dim + len(shape) - t.ndim
    if t.shape[p.dim] != shape[d]:
        return None  # the lead broadcasts along this dim: its pieces are not the output's
    ins: dict[int, Placement] = {}
    for k in at.values():
        u = tensors[k]
        a = d - (len(shape) - u.ndim)
        # the lead's split rule: the same extent, so element i meets element i
        ins[k] = p.with_dim(a) if a >= 0 and u.shape[a] == shape[d] else R
    return ins, p.with_dim(d)


def _broadcast(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """torch.broadcast_shapes for compatible shapes, without its symbolic-shape machinery
    (a rule runs per list position; the op itself rejects incompatible shapes)."""
    n = max(len(x) for x in shapes)
    out = []
    for d in range(n):
        sizes = [x[d - n + len(x)] for x in shapes if d - n + len(x) >= 0]
        out.append(next((v for v in sizes if v != 1), 1))  # 1 broadcasts, 0 does not
    return tuple(out)


def _partial_position(call: _Call, at: dict[str, int], tensors: list[TensorSpec], lead: str,
                      p: Partial) -> tuple[dict[int, Placement], Placement] | None:
    """Note [Partial in foreach ops]."""
    for group, kinds in _PARTIAL.get((call.name, call.kind), ()):
        if p.reduce_op not in kinds or (lead not in group and lead != "out"):
            continue
        members = set(group) | {"out"}
        if p.reduce_op == "avg" and not all(_exact_avg(tensors[k]) for a, k in at.items()
                                            if a in members):
            continue  # P(avg) divides: integer pieces would round
        return {k: (p if a in members else R) for a, k in at.items()}, p
    return None


def _exact_avg(t: TensorSpec) -> bool:
    return t.dtype.is_floating_point or t.dtype.is_complex


def _reduction_position(op: OpSpec, call: _Call, at: dict[str, int], tensors: list[TensorSpec],
                        lead: str, p: Placement
                        ) -> tuple[dict[int, Placement], Placement] | None:
    """One tensor reduced whole to a 0-d tensor (Note [foreach norms]); the out= list takes
    the output's placement."""
    if lead != "self":
        return None
    t = tensors[at["self"]]
    out: Placement | None = None
    if isinstance(p, Shard):
        kind = _over_shard(call.name, op)
        if kind in ("max", "min") and not (_identity_ok(call, tensors)
                                           or _no_empty_piece_held(op, t, p)):
            kind = None  # an empty piece has no max: Note [foreach norms]
        out = Partial(kind) if kind is not None else None
    elif isinstance(p, Partial) and call.name == "max" and p.reduce_op == "max":
        out = p  # max(max(a1, a2)) = max(max(a1), max(a2))
    if out is None:
        return None
    ins: dict[int, Placement] = {at["self"]: p}
    if "out" in at:
        ins[at["out"]] = out
    return ins, out


def _identity_ok(call: _Call, tensors: list[TensorSpec]) -> bool:
    """Note [foreach norms]: empty pieces may give the identity (whole tensors not empty)."""
    return (call.name in _REDUCTIONS and not call.written
            and all(math.prod(t.shape) > 0 for t in tensors))


def _local(call: _Call, tensors: list[TensorSpec], ins: list[Placement],
           outs: list[Placement]) -> str | None:
    """The local function a reduction to P(max)/P(min) over a Shard needs (Note [foreach
    norms]), else None."""
    if call.name not in _REDUCTIONS or not _identity_ok(call, tensors):
        return None
    selves = [k for k, (a, _) in enumerate(call.slots) if a == "self"]
    if any(isinstance(ins[k], Shard) and outs[i] in _MAX_MIN for i, k in enumerate(selves)):
        return _EMPTY_PIECES
    return None


def _over_shard(name: str, op: OpSpec) -> str | None:
    if name == "powsum":
        return "sum"  # sum of |x|^p over elements: a sum over pieces, whatever p
    if name == "max":
        return "max"
    return _NORM_OVER_SHARD.get(float(op.arg(1, "ord", 2)))


_MAX_MIN = (Partial("max"), Partial("min"))
_EMPTY_PIECES = "foreach_reduce_empty_pieces"


@local_function(_EMPTY_PIECES)
def _reduce_pieces(func: Any, args: tuple, kwargs: dict, boxes: Sequence[Any]) -> list:
    """Note [foreach norms]: the op on the non-empty pieces; an empty piece gives the identity
    of the reduction its output's Partial stands for."""
    pieces = list(args[0])
    nonempty = [t for t in pieces if t.numel()]
    done = iter(func(nonempty, *args[1:], **kwargs) if nonempty else ())
    return [next(done) if t.numel() else _identity(func, t, args, kwargs) for t in pieces]


def _identity(func: Any, t: torch.Tensor, args: tuple, kwargs: dict) -> torch.Tensor:
    # the op's result on one zero has the output's dtype (norms of complex tensors are real)
    ref = func([t.new_zeros(1)], *args[1:], **kwargs)[0]
    if "_foreach_max" in str(func):
        if ref.dtype == torch.bool:
            return ref.fill_(False)
        low = -math.inf if ref.is_floating_point() else torch.iinfo(ref.dtype).min
        return ref.fill_(low)
    ord_ = float(args[1] if len(args) > 1 else kwargs.get("ord", 2))
    return ref.fill_(math.inf) if ord_ == -math.inf else ref  # |x|_inf of nothing: 0 (norms >= 0)


def foreach_overloads() -> list[object]:
    """Every ``aten._foreach_*`` overload this module gives a rule: all but _NOT_ELEMENTWISE."""
    names = sorted({s.name.split("::")[1] for s in torch._C._jit_get_all_schemas()
                    if s.name.startswith("aten::_foreach_")})
    out = []
    for name in names:
        if name.removeprefix("_foreach_").rstrip("_") in _NOT_ELEMENTWISE:
            continue
        packet = getattr(aten, name)
        out += [getattr(packet, o) for o in packet.overloads()]
    return out


sharding_rule(*foreach_overloads())(foreach_rule)


def _no_empty_piece_held(op: OpSpec, t: TensorSpec, p: Shard) -> bool:
    """No piece of ``t``'s dim ``p.dim`` is empty: under chunk's rule for any earlier mesh
    dims (``no_empty_piece``), under a split rule as ``t`` holds it."""
    if p.is_plain:
        return no_empty_piece(op, t.shape[p.dim])
    return all(local_shape(t.shape, op.mesh_shape, t.placements, c)[p.dim] > 0
               for c in mesh_coordinates(op.mesh_shape))
