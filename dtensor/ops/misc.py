"""Convolution, ops along one dim (sort, topk, cumulative scans), dropout, copies and dtype
conversions.

Note [ops along one dim]
sort/argsort/topk/cumsum/cumprod/cummax/cummin/logcumsumexp mix every element along ``dim``,
so that dim must be whole on each rank (the dispatcher gathers it when it is sharded); every
other dim may stay sharded. cumsum is linear, so P(sum)/P(avg) pass through it; a scan's
running max would keep P(max), but its indices output would not, so no Partial there.

Note [dropout and the RNG]
native_dropout draws a mask per element. Every rank holds its own generator, and they start
and stay equal (Note [sharded RNG] in dtensor/api.py: every draw is a whole-tensor draw). So
Replicate in -> Replicate out is exact: each rank draws the mask of the whole tensor, the same
one a single device draws, and the generators advance alike. A Shard strategy would run the
op on the local piece: each rank draws only its own numel, which is neither its piece of the
single-device mask nor the same generator advance on every rank. Sharded dropout needs a
local function (draw the whole mask, keep the piece), which the dispatcher cannot run yet.
The soundness harness runs ranks one after another on one generator, so it cannot check the
Replicate strategy; tests check it with a reseeding wrapper. CPU F.dropout does not call
native_dropout: it runs bernoulli_ on an empty_like, which has no rule here on purpose: the
fallback gathers to Replicate, draws the whole mask on every rank and keeps each piece, which
is the sharded-RNG scheme exactly.

Note [Partial through a conversion]
A conversion f keeps P(sum)/P(avg) only if f(a1) + f(a2) == f(a1 + a2): the identity, or a
widening float conversion (each addend is exact in the wider type; the sum is then the wider
sum, at least as accurate). Narrowing rounds each addend (ties of n roundings), integer
conversions can wrap. P(max)/P(min) need only a non-decreasing f: any float -> float
conversion (rounding is monotone), int -> float, int -> wider int; not -> bool, not int ->
narrower int (wraps), not float -> int (out-of-range is undefined).
"""

from __future__ import annotations

import itertools

import torch

from dtensor.ops.indexing import aligned_shards, partials
from dtensor.ops.registry import OpSpec, Strategy, TensorSpec, sharding_rule, takes_split_rules
from dtensor.placements import Partial, Placement, Replicate, Shard

aten = torch.ops.aten
R = Replicate()
PSUM = Partial("sum")
LINEAR = (Partial("sum"), Partial("avg"))


# -- convolution ----------------------------------------------------------------------------
def _conv_dims(op: OpSpec, transposed_at: int) -> tuple[int, int]:
    """Weight dims of (output channels, input channels): (0, 1), or (1, 0) when transposed."""
    return (1, 0) if op.arg(transposed_at, "transposed") else (0, 1)


def _no_empty_chunks(size: int, mesh_shape: tuple[int, ...]) -> bool:
    """Whether ``size`` splits into non-empty chunks however the mesh dims nest on it (the
    rule sees one mesh dim; the candidate may shard the same dim on others too)."""
    def ok(n: int, parts: tuple[int, ...]) -> bool:
        if not parts:
            return n > 0
        step = -(-n // parts[0])
        sizes = [min(step, n - i * step) for i in range(parts[0])]
        return all(s > 0 and ok(s, parts[1:]) for s in sizes)

    return all(ok(size, sub) for r in range(1, len(mesh_shape) + 1)
               for sub in itertools.combinations(mesh_shape, r))


@sharding_rule(aten.convolution.default)
def convolution(op: OpSpec) -> list[Strategy]:
    tensors = op.tensors()
    x = tensors[0]
    has_bias = len(tensors) == 3
    wo, wi = _conv_dims(op, 6)

    def b(p: Placement) -> tuple[Placement, ...]:  # the bias's placement, when there is one
        return (p,) if has_bias else ()

    out = [Strategy((R, R) + b(R), (R,))]
    out.append(Strategy((Shard(0), R) + b(R), (Shard(0),)))  # images convolve alone
    w = tensors[1]
    # channel shards: the kernel rejects a weight with 0 output channels, and a rank with 0
    # input channels takes another path; so only sizes every rank gets a piece of
    if op.arg(8, "groups") == 1 and _no_empty_chunks(w.shape[wo], op.mesh_shape):
        # output channel o needs only filter o (and bias o)
        out.append(Strategy((R, Shard(wo)) + b(Shard(0)), (Shard(1),)))
        # a sum over input channels: each rank sums its channels; the bias must then be
        # P(sum) too, else it would be added once per rank
    if op.arg(8, "groups") == 1 and _no_empty_chunks(w.shape[wi], op.mesh_shape):
        out.append(Strategy((Shard(1), Shard(wi)) + b(PSUM), (PSUM,)))
    for p in partials(x, LINEAR):  # conv(x, w) + b is linear in (x, b) and in (w, b)
        out.append(Strategy((p, R) + b(p), (p,)))
        out.append(Strategy((R, p) + b(p), (p,)))
    return out


@sharding_rule(aten.convolution_backward.default)
def convolution_backward(op: OpSpec) -> list[Strategy]:
    grad, x, w = op.tensors()
    mask = tuple(bool(m) for m in op.arg(10, "output_mask"))
    wo, wi = _conv_dims(op, 7)

    def strat(ins: tuple[Placement, ...], gi: Placement, gw: Placement, gb: Placement
              ) -> Strategy:  # outputs the mask leaves out are not returned
        return Strategy(ins, tuple(p for p, m in zip((gi, gw, gb), mask) if m))

    out = [strat((R, R, R), R, R, R)]
    # images alone: grad_input by image; grad_weight/bias sum over images -> P(sum)
    out.append(strat((Shard(0), Shard(0), R), Shard(0), PSUM, PSUM))
    groups = op.arg(9, "groups")
    # a rank with no images returns grad_bias shaped by bias_sizes, a GLOBAL size: sharded
    # grad_bias only where every rank has images (or grad_bias is not asked for)
    bias_ok = not mask[2] or _no_empty_chunks(x.shape[0], op.mesh_shape)
    if groups == 1 and bias_ok and _no_empty_chunks(w.shape[wo], op.mesh_shape):
        # output channels (see convolution): grad_input sums over them -> P(sum); filter o's
        # grads alone
        out.append(strat((Shard(1), R, Shard(wo)), PSUM, Shard(wo), Shard(0)))
    if groups == 1 and _no_empty_chunks(w.shape[wi], op.mesh_shape):
        # input channels: grad_input channel c and filter column c alone; bias needs all
        out.append(strat((R, Shard(1), Shard(wi)), Shard(1), Shard(wi), R))
    for p in partials(grad, LINEAR):
        out.append(strat((p, R, R), p, p, p))  # every grad is linear in grad_output
        # grad_weight is linear in the input; grad_input and grad_bias do not read it
        out.append(strat((R, p, R), R, p, R))
        # grad_input is linear in the weight; grad_weight and grad_bias do not read it
        out.append(strat((R, R, p), p, R, R))
    return out


# -- ops along one dim ----------------------------------------------------------------------
def _along_dim(x: TensorSpec, dim: int, n_out: int) -> list[Strategy]:
    """Note [ops along one dim]: Replicate, or sharded on any dim but ``dim``."""
    d0 = dim % x.ndim if x.ndim else 0
    return [Strategy((R,), (R,) * n_out)] + [Strategy((Shard(d),), (Shard(d),) * n_out)
                                              for d in range(x.ndim) if d != d0]


@sharding_rule(aten.sort.default, aten.sort.stable)
def sort(op: OpSpec) -> list[Strategy]:
    return _along_dim(op.tensors()[0], op.arg(1, "dim", -1), 2)


@sharding_rule(aten.argsort.default, aten.argsort.stable)
def argsort(op: OpSpec) -> list[Strategy]:
    return _along_dim(op.tensors()[0], op.arg(1, "dim", -1), 1)


@sharding_rule(aten.topk.default)
def topk(op: OpSpec) -> list[Strategy]:
    return _along_dim(op.tensors()[0], op.arg(2, "dim", -1), 2)


@sharding_rule(aten.cummax.default, aten.cummin.default)
def cummax(op: OpSpec) -> list[Strategy]:
    return _along_dim(op.tensors()[0], op.arg(1, "dim"), 2)


@sharding_rule(aten.cumprod.default, aten.logcumsumexp.default)
def cumprod(op: OpSpec) -> list[Strategy]:
    return _along_dim(op.tensors()[0], op.arg(1, "dim"), 1)


@sharding_rule(aten.cumsum.default)
def cumsum(op: OpSpec) -> list[Strategy]:
    x = op.tensors()[0]
    out = _along_dim(x, op.arg(1, "dim"), 1)
    if op.kwarg("dtype") is None and x.dtype.is_floating_point:
        # linear: a running sum of addends is the addend of the running sum. Integers are
        # left out: cumsum promotes them to int64, where addends no longer wrap like the sum
        out += [Strategy((p,), (p,)) for p in LINEAR]
    return out


# -- dropout --------------------------------------------------------------------------------
@sharding_rule(aten.native_dropout.default)
def native_dropout(op: OpSpec) -> list[Strategy]:
    x = op.tensors()[0]
    if op.arg(2, "train") is False:  # the identity, and an all-True mask
        out = [Strategy((R,), (R, R))] + [Strategy((Shard(d),), (Shard(d),) * 2)
                                           for d in range(x.ndim)]
        return out + [Strategy((p,), (p, R)) for p in partials(x)]
    return [Strategy((R,), (R, R))]  # Note [dropout and the RNG]


@sharding_rule(aten.native_dropout_backward.default)
def native_dropout_backward(op: OpSpec) -> list[Strategy]:
    grad, mask = op.tensors()
    out = [Strategy((R, R), (R,))] + [Strategy((Shard(d), Shard(d)), (Shard(d),))
                                      for d in range(grad.ndim)]  # grad * mask * scale
    return out + [Strategy((p, R), (p,)) for p in partials(grad, LINEAR)]  # linear in grad


# -- copies and conversions -----------------------------------------------------------------
_FLOAT_BITS = {torch.float16: 16, torch.bfloat16: 16, torch.float32: 32, torch.float64: 64}
_INTS = {torch.uint8: (8, False), torch.int8: (8, True), torch.int16: (16, True),
         torch.int32: (32, True), torch.int64: (64, True)}  # bits, signed


def _widens_float(src: torch.dtype, dst: torch.dtype) -> bool:
    """Every value of src is exact in dst (f16 and bf16 hold different value sets)."""
    return (src in _FLOAT_BITS and dst in _FLOAT_BITS
            and _FLOAT_BITS[src] < _FLOAT_BITS[dst] and _FLOAT_BITS[src] < 64)


def _keeps(src: torch.dtype, dst: torch.dtype, p: Partial) -> bool:
    """Note [Partial through a conversion]."""
    if src == dst:
        return True
    if p.reduce_op in ("sum", "avg"):
        return _widens_float(src, dst)
    if dst in _FLOAT_BITS:  # rounding to the nearest float is non-decreasing
        return src in _FLOAT_BITS or src in _INTS
    if src in _INTS and dst in _INTS:  # no wrap: wider, and never signed -> unsigned
        (sb, ss), (db, ds) = _INTS[src], _INTS[dst]
        return sb < db and (ds or not ss)
    return False


def _out_partials(src: TensorSpec, dst: torch.dtype) -> list[Partial]:
    exact = dst.is_floating_point or dst.is_complex
    return [p for p in partials(src) if _keeps(src.dtype, dst, p)
            and (p.reduce_op != "avg" or exact)]


@sharding_rule(aten._to_copy.default)
@takes_split_rules  # Note [split rules in propagation]
def to_copy(op: OpSpec) -> list[Strategy]:
    x = op.tensors()[0]
    dst = op.kwarg("dtype") or x.dtype
    out = [Strategy((R,), (R,))] + [Strategy((Shard(d),), (Shard(d),)) for d in range(x.ndim)]
    return out + [Strategy((p,), (p,)) for p in _out_partials(x, dst)]


@sharding_rule(aten.copy_.default, aten.copy.default)
@takes_split_rules  # Note [split rules in propagation]
def copy(op: OpSpec) -> list[Strategy]:
    """self takes src's values (broadcast, converted to self's dtype); copy_ keeps self's
    placements (the dispatcher pins a written argument)."""
    x, src = op.tensors()
    out = [Strategy((R, R), (R,))]
    out += [Strategy((Shard(d),) + aligned_shards([src], x.shape, d), (Shard(d),))
            for d in range(x.ndim)]
    if tuple(src.shape) == tuple(x.shape):  # a broadcast src would be a Partial of copies
        out += [Strategy((p, p), (p,)) for p in _out_partials(src, x.dtype)
                if p in partials(x)]
    # a Replicate src written on every rank: avg/max/min of n copies is the copy, sum is not
    out += [Strategy((p, R), (p,)) for p in partials(x) if p.reduce_op != "sum"]
    return out
