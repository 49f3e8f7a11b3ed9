"""View and shape ops: each output element is one input element moved (or a zero filled in).

Every op here keeps a Partial: moving the addends of each element moves the sum, for all four
reductions (a filled-in zero is zero on every rank, and sum/avg/max/min of zeros is zero).

A Shard survives when the sharded dim comes through whole: same size, same ``torch.chunk``
pieces. A dim that is sliced, flipped, rolled, repeated, split into outputs or concatenated
along would move elements between ranks, so these ops need that dim Replicate.

Note [view shards]
``view`` groups dims into runs whose sizes multiply to the same number, (2, 6, 4) -> (12, 4):
run (2, 6) -> (12,) and (4,) -> (4,). A Shard can only sit on a run's outermost non-1 dim,
size ``a`` on the input and ``a'`` on the output; the inner dims ride along. The input's
chunks are the output's chunks when both split evenly: ``a`` and ``a'`` divisible by the parts
(Note [nested shards] in matmul: the product of the mesh sizes up to this mesh dim), or that
side's run has nothing inside its outermost dim (then the flat chunk is that dim's chunk).
(6, 4) -> (24,) over 4 ranks: rows chunk 2, 2, 2, 0 but the flat 24 chunks 6, 6, 6, 6 = rows
1.5 each: unsound, and the rule says so because 6 % 4 != 0.

The size-taking ops (view, _unsafe_view, expand, slice_backward, select_backward) reason about
global sizes; the dispatcher and the soundness harness hand each rank its own output piece's
shape instead (Note [global size arguments] in local_args), so a Shard passes wherever the
pieces line up.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import torch

from dtensor.ops.registry import (OpSpec, Strategy, TensorSpec, local_function,
                                  takes_split_rules,
                                  sharding_rule)
from dtensor.layout import split_bounds
from dtensor.placements import REDUCE_OPS, Partial, Placement, Replicate, Shard
from dtensor.spec import contiguous_strides

aten = torch.ops.aten

_PARTIALS = tuple(Partial(k) for k in REDUCE_OPS)
_INT_PARTIALS = tuple(p for p in _PARTIALS if p.reduce_op != "avg")  # an int mean would round


def _partials(op: OpSpec) -> tuple[Partial, ...]:
    exact = all(t.dtype.is_floating_point or t.dtype.is_complex for t in op.tensors())
    return _PARTIALS if exact else _INT_PARTIALS


def _dim(d: int, ndim: int) -> int:
    """A dim argument made non-negative (a 0-d tensor accepts 0 and -1)."""
    return d % max(ndim, 1)


def _moves(op: OpSpec, n_out: int, shards: Sequence[tuple[int, int | Sequence[int]]]
           ) -> list[Strategy]:
    """R -> R, each Partial -> itself, and Shard(i) -> Shard(o) for each (i, o) given; ``o``
    may list one output dim per output of a multi-output op."""
    n_in = len(op.tensors())
    def out(p: Placement) -> tuple[Placement, ...]:
        return (p,) * n_out

    found = [Strategy((Replicate(),) * n_in, out(Replicate()))]
    for i, o in shards:
        outs = tuple(Shard(x) for x in o) if isinstance(o, (list, tuple)) else out(Shard(o))
        found.append(Strategy((Shard(i),) * n_in, outs))
    found += [Strategy((p,) * n_in, out(p)) for p in _partials(op)]
    return found


def _nested_parts(op: OpSpec) -> int:
    return math.prod(op.mesh_shape[:op.mesh_dim + 1])


# -- pure permutations of dims -----------------------------------------------------------------
@sharding_rule(aten.transpose.int, aten.transpose_.default)
@takes_split_rules  # Note [split rules in propagation]
def transpose(op: OpSpec) -> list[Strategy]:
    t = op.tensors()[0]
    a, b = _dim(op.arg(1, "dim0"), t.ndim), _dim(op.arg(2, "dim1"), t.ndim)
    swap = {a: b, b: a}
    return _moves(op, 1, [(d, swap.get(d, d)) for d in range(t.ndim)])


@sharding_rule(aten.t.default, aten.t_.default)
@takes_split_rules  # Note [split rules in propagation]
def t(op: OpSpec) -> list[Strategy]:
    n = op.tensors()[0].ndim
    return _moves(op, 1, [(d, n - 1 - d) for d in range(n)])  # 0-d and 1-d: t is the identity


@sharding_rule(aten.permute.default)
@takes_split_rules  # Note [split rules in propagation]
def permute(op: OpSpec) -> list[Strategy]:
    t = op.tensors()[0]
    dims = [_dim(d, t.ndim) for d in op.arg(1, "dims")]
    return _moves(op, 1, [(d, o) for o, d in enumerate(dims)])  # output dim o is input dims[o]


@sharding_rule(aten.unsqueeze.default, aten.unsqueeze_.default)
@takes_split_rules  # Note [split rules in propagation]
def unsqueeze(op: OpSpec) -> list[Strategy]:
    t = op.tensors()[0]
    new = op.arg(1, "dim") % (t.ndim + 1)
    return _moves(op, 1, [(d, d + (d >= new)) for d in range(t.ndim)])


@sharding_rule(aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze_.default,
               aten.squeeze_.dim, aten.squeeze_.dims)
@takes_split_rules  # Note [split rules in propagation]
def squeeze(op: OpSpec) -> list[Strategy]:
    t = op.tensors()[0]
    asked = op.arg(1, "dim", None)
    if asked is None:
        asked = range(t.ndim)
    elif isinstance(asked, int):
        asked = [asked]
    asked = {_dim(d, t.ndim) for d in asked} if t.ndim else set()
    gone = {d for d in asked if t.shape[d] == 1}
    # a squeezed size-1 dim sharded is 1 on rank 0 and 0 elsewhere: 0 does not squeeze; an
    # asked dim of size > 1 must not become 1 on a rank (it would squeeze there): even chunks
    # of at least 2 (Note [nested shards] in matmul)
    parts = _nested_parts(op)
    kept = [d for d in range(t.ndim) if d not in gone]
    ok = [d for d in kept if d not in asked or (t.shape[d] % parts == 0
                                                 and t.shape[d] // parts != 1)]
    return _moves(op, 1, [(d, kept.index(d)) for d in ok])


# -- ops that need some dim whole ----------------------------------------------------------------
def _all_but(t: TensorSpec, whole: set[int], shift: int = 0) -> list[tuple[int, int]]:
    return [(d, d + shift) for d in range(t.ndim) if d not in whole]


@sharding_rule(aten.flip.default)
def flip(op: OpSpec) -> list[Strategy]:
    t = op.tensors()[0]
    # rank 0 would hold the flip of the first chunk, not the first chunk of the flip
    return _moves(op, 1, _all_but(t, {_dim(d, t.ndim) for d in op.arg(1, "dims")}))


@sharding_rule(aten.roll.default)
def roll(op: OpSpec) -> list[Strategy]:
    t = op.tensors()[0]
    dims = op.arg(2, "dims", ())
    if not dims:  # rolls the flattened tensor: every dim moves elements across rows
        return _moves(op, 1, [])
    return _moves(op, 1, _all_but(t, {_dim(d, t.ndim) for d in dims}))


@sharding_rule(aten.slice.Tensor)
def slice_(op: OpSpec) -> list[Strategy]:
    t = op.tensors()[0]
    d = _dim(op.arg(1, "dim", 0), t.ndim)
    start, end, step = op.arg(2, "start"), op.arg(3, "end"), op.arg(4, "step", 1)
    # the whole dim (start 0, end past the size) clamps to each rank's own extent; any other
    # range is in global coordinates and would cut the wrong rows out of every chunk
    whole = start in (None, 0) and (end is None or end >= t.shape[d]) and step == 1
    return _moves(op, 1, _all_but(t, set() if whole else {d}))


@sharding_rule(aten.select.int)
def select(op: OpSpec) -> list[Strategy]:
    t = op.tensors()[0]
    d = _dim(op.arg(1, "dim"), t.ndim)
    return _moves(op, 1, [(i, i - (i > d)) for i in range(t.ndim) if i != d])


def _split_rule(op: OpSpec, d: int, n_out: int) -> list[Strategy]:
    t = op.tensors()[0]
    return _moves(op, n_out, [(i, [i] * n_out) for i in range(t.ndim) if i != d])


@sharding_rule(aten.split.Tensor)
def split(op: OpSpec) -> list[Strategy]:
    t = op.tensors()[0]
    d = _dim(op.arg(2, "dim", 0), t.ndim)
    size = op.arg(1, "split_size")
    n_out = max(1, -(-t.shape[d] // size)) if size else 1
    return _split_rule(op, d, n_out)


@sharding_rule(aten.split_with_sizes.default)
def split_with_sizes(op: OpSpec) -> list[Strategy]:
    t = op.tensors()[0]
    return _split_rule(op, _dim(op.arg(2, "dim", 0), t.ndim), len(op.arg(1, "split_sizes")))


@sharding_rule(aten.unbind.int)
def unbind(op: OpSpec) -> list[Strategy]:
    t = op.tensors()[0]
    d = _dim(op.arg(1, "dim", 0), t.ndim)
    return _moves(op, t.shape[d], [(i, [i - (i > d)] * t.shape[d])
                                  for i in range(t.ndim) if i != d])


@sharding_rule(aten.repeat.default)
def repeat(op: OpSpec) -> list[Strategy]:
    t = op.tensors()[0]
    repeats = list(op.arg(1, "repeats"))
    lead = len(repeats) - t.ndim  # repeat may add leading dims
    # a repeated sharded dim would tile each rank's chunk, not the whole dim
    return _moves(op, 1, [(d, d + lead) for d in range(t.ndim) if repeats[d + lead] == 1])


# -- several inputs ----------------------------------------------------------------------------
def _joined(op: OpSpec, out_dim_of: dict[int, int], skip: list[bool]) -> list[Strategy]:
    """All inputs placed alike (the ``skip``ped ones Replicate) -> one output."""
    n = len(skip)

    def ins(p: Placement) -> tuple[Placement, ...]:
        return tuple(Replicate() if s else p for s in skip)

    found = [Strategy((Replicate(),) * n, (Replicate(),))]
    found += [Strategy(ins(Shard(d)), (Shard(o),)) for d, o in out_dim_of.items()]
    # P + P is P; P next to R is not: the R part would be reduced over the mesh dim
    found += [Strategy((p,) * n, (p,)) for p in _partials(op) if not any(skip)]
    return found


@sharding_rule(aten.cat.default)
def cat(op: OpSpec) -> list[Strategy]:
    ts = op.tensors()
    # cat ignores 1-d empty inputs whatever the other inputs' shapes (legacy behaviour)
    skip = [t.shape == (0,) for t in ts]
    real = [t for t, s in zip(ts, skip) if not s]
    if not real:
        return _joined(op, {}, skip)
    d = _dim(op.arg(1, "dim", 0), real[0].ndim)
    # the cat dim would put rank 0's chunk of every input first: not the chunk of the result
    return _joined(op, {i: i for i in range(real[0].ndim) if i != d}, skip)


@sharding_rule(aten.stack.default)
def stack(op: OpSpec) -> list[Strategy]:
    ts = op.tensors()
    new = op.arg(1, "dim", 0) % (ts[0].ndim + 1)
    return _joined(op, {i: i + (i >= new) for i in range(ts[0].ndim)}, [False] * len(ts))


# -- ops that take the output's size (Note [global size arguments]) ------------------------------
def _resolve(sizes: Sequence[int], numel: int) -> list[int]:
    sizes = list(sizes)
    if -1 in sizes:
        rest = math.prod(s for s in sizes if s != -1)
        sizes[sizes.index(-1)] = numel // rest if rest else 0
    return sizes


def view_groups(src: Sequence[int], dst: Sequence[int]) -> list[tuple[list[int], list[int]]]:
    """Runs of dims with equal products (Note [view shards]); both shapes have numel > 0.

    >>> view_groups((2, 6, 4), (12, 4))
    [([0, 1], [0]), ([2], [1])]
    """
    groups, i, j = [], 0, 0
    while i < len(src) or j < len(dst):
        gi, go, pi, po = [], [], 1, 1
        if i < len(src):
            gi, pi, i = [i], src[i], i + 1
        if j < len(dst):
            go, po, j = [j], dst[j], j + 1
        while pi != po:
            if pi < po:
                gi.append(i)
                pi, i = pi * src[i], i + 1
            else:
                go.append(j)
                po, j = po * dst[j], j + 1
        groups.append((gi, go))
    return groups


def view_shards(src: Sequence[int], dst: Sequence[int], parts: int) -> list[tuple[int, int]]:
    """(input dim, output dim) pairs a Shard can pass through a view when the dim is split into
    ``parts`` even pieces (Note [view shards])."""
    if math.prod(src) == 0:
        return []  # nothing to move; the grouping needs non-zero sizes
    found = []
    for gi, go in view_groups(src, dst):
        if len(gi) == 1 and len(go) == 1:  # the same dim (a size-1 dim included)
            found.append((gi[0], go[0]))
            continue
        outer_i = next((d for d in gi if src[d] != 1), None)
        outer_o = next((d for d in go if dst[d] != 1), None)
        if outer_i is None or outer_o is None:
            continue
        total = math.prod(src[d] for d in gi)
        a, b = src[outer_i], dst[outer_o]
        if (a % parts == 0 or a == total) and (b % parts == 0 or b == total):
            found.append((outer_i, outer_o))
    return found


@sharding_rule(aten.view.default, aten._unsafe_view.default)
@takes_split_rules(reads=True)  # Note [views of split rules]
def view(op: OpSpec) -> list[Strategy]:
    t = op.tensors()[0]
    sizes = list(op.arg(1, "size"))
    dst = _resolve(sizes, math.prod(t.shape))
    pairs = view_shards(t.shape, dst, _nested_parts(op))
    found = _moves(op, 1, pairs) + _split_rule_views(op, t, dst) + _block_views(op, t, dst)
    # each rank reshapes its own piece: Note [a piece's own strides]
    return [dataclasses.replace(s, local="view_piece") for s in found]


# Note [views of split rules]
# ``view`` sees its input's split rule (Note [split rules] in dtensor/layout.py) and keeps the
# tensor sharded wherever each piece is still one box of the output: for a run of dims
# (Note [view shards]) whose outermost input dim ``a`` holds the rule, piece j's rows
# [lo, hi) of ``a`` are the flat range [lo * inner_in, hi * inner_in) of the run, which is rows
# [lo * inner_in / inner_out, ...) of the output run's outermost dim when every cut divides by
# the output's inner size. (B * H, D) -> (B, H, D) with pieces of whole heads groups, cut where
# chunk's rule would cut inside a group: S(0)[6, 2, 2, 2] of 12 rows with H = 2 gives
# S(0)[3, 1, 1, 1] of B = 6, no communication where chunk's pieces (3, 3, 3, 3) could not. The
# output takes explicit sizes (a balanced input's scaled pieces need not be balanced).
# Only a dim no other mesh dim cuts (a nested cut would need every outer piece to align).
def _split_rule_views(op: OpSpec, t: TensorSpec, dst: Sequence[int]) -> list[Strategy]:
    p = t.placements[op.mesh_dim]
    if not (isinstance(p, Shard) and p.sizes is not None and p.block is None) \
            or math.prod(t.shape) == 0:
        return []  # (a block's sizes cut each run: _block_views)
    if any(isinstance(q, Shard) and q.dim == p.dim
           for m, q in enumerate(t.placements) if m != op.mesh_dim):
        return []
    src = tuple(t.shape)
    n = op.mesh_dim_size
    bounds = [split_bounds(src[p.dim], n, j, p.sizes) for j in range(n)]
    for gi, go in view_groups(src, dst):
        outer_i = next((d for d in gi if src[d] != 1), None)
        outer_o = next((d for d in go if dst[d] != 1), None)
        if outer_i != p.dim or outer_o is None:
            continue
        inner_in = math.prod(src[d] for d in gi if d > outer_i)
        inner_out = math.prod(dst[d] for d in go if d > outer_o)
        cuts = [lo * inner_in for lo, _ in bounds] + [bounds[-1][1] * inner_in]
        if any(c % inner_out for c in cuts):
            return []
        if inner_in == inner_out:  # the dim comes through whole: the rule as it is
            return [Strategy((p,), (p.with_dim(outer_o),))]
        rows = [(hi - lo) * inner_in // inner_out for lo, hi in bounds]
        return [Strategy((p,), (Shard(outer_o, tuple(rows)),))]
    return []


# Note [views of block shards]
# A Shard on a dim inside a run (Note [view shards]), heads in (B, H) -> (B * H,), holds a
# part of every run of H elements of the flattened dim: ``Shard(0, block=H)`` (Note [block
# shards] in dtensor/layout.py), no communication. In general a mesh dim's cut, read in the
# run's flat order, holds [lo * u, hi * u) of every stretch of F elements: F the sharded dim's
# run (its block, or its extent) times the dims inside it, u those inner dims. The output
# keeps the cut on the outermost dim o of its run whose inner size u' divides every cut and F,
# with F // u' elements of o per run: a plain Shard(o) when that is all of o (unflattening the
# heads again), else a block of F // u'. The pieces' sizes in elements of o name the rule:
# chunk's or balanced where those give them, else explicit. Only where no other mesh dim cuts
# a dim inside the sharded one, nor the sharded dim itself unless that is a plain cut of a
# blocked dim (which the layout holds to whole runs): other pieces would have to align.
def _block_views(op: OpSpec, t: TensorSpec, dst: Sequence[int]) -> list[Strategy]:
    p = t.placements[op.mesh_dim]
    src = tuple(t.shape)
    if not isinstance(p, Shard) or math.prod(src) == 0:
        return []
    for gi, go in view_groups(src, dst):
        if p.dim not in gi:
            continue
        outer_i = next((d for d in gi if src[d] != 1), None)
        if p.block is None and p.sizes is not None and p.dim == outer_i:
            return []  # _split_rule_views keeps these
        inside = [d for d in gi if d > p.dim]
        # another mesh dim's plain cut of a blocked dim cuts whole runs (the layout checks it)
        if any(isinstance(q, Shard) and (q.dim in inside or q.dim == p.dim and (
                p.block is None or not q.is_plain))
               for m, q in enumerate(t.placements) if m != op.mesh_dim):
            return []
        u = math.prod(src[d] for d in inside)
        run = p.block if p.block is not None else src[p.dim]
        n = op.mesh_dim_size
        cuts = [split_bounds(run, n, j, p.sizes) for j in range(n)]
        flat = run * u
        for o in go:
            u_out = math.prod(dst[d] for d in go if d > o)
            per_run = flat // u_out
            if flat % u_out or per_run < 2 or dst[o] % per_run or any(
                    (a * u) % u_out or (b * u) % u_out for a, b in cuts):
                continue
            sizes = tuple((b - a) * u // u_out for a, b in cuts)
            rule = next((r for r in (None, "balanced") if all(
                split_bounds(per_run, n, j, r)[1] - split_bounds(per_run, n, j, r)[0]
                == sizes[j] for j in range(n))), sizes)
            out = Shard(o, rule, per_run if per_run < dst[o] else None)
            return [Strategy((p,), (out,))]
        return []
    return []


# Note [a piece's own strides]
# A DTensor's strides are the global tensor's; its piece has its own: a redistributed piece is
# contiguous, a kernel lays out its output from its local inputs (sdpa's output after a batch
# gather). ``reshape`` on the DTensor picks view or copy from the GLOBAL strides, so a view
# the global tensor allows may not be one the piece allows (``transpose(1, 2).reshape(...)``
# after attention). Each rank then reshapes its piece: a view where the piece allows one, else
# a copy of the same values (that piece no longer aliases its input).
@local_function("view_piece")
def _view_piece(op: object, args: tuple, kwargs: dict, boxes: Sequence[object]) -> torch.Tensor:
    x, size = args[0], args[1] if len(args) > 1 else kwargs["size"]
    return x.reshape(size)


# Note [as_strided]
# size, stride and storage_offset address storage. A DTensor's storage is the global tensor
# laid out row-major from offset 0 when its strides are the row-major ones: each rank makes
# its replica row-major (Replicate in, Replicate out; a view of the replica when it already
# is) and runs the op with the arguments as given. Other strides (a transposed DTensor) name
# a storage order no replica is guaranteed to have, so no strategy is offered and the call
# raises rather than read the wrong elements. The one call a piece can answer is the
# identity, as_strided(x, x.shape, x.stride(), 0): it is x, so any placement passes and each
# rank aliases (or, for as_strided_copy, copies) its piece.
@sharding_rule(aten.as_strided.default, aten.as_strided_copy.default)
def as_strided(op: OpSpec) -> list[Strategy]:
    t = op.tensors()[0]
    size, stride = tuple(op.arg(1, "size")), tuple(op.arg(2, "stride"))
    offset = op.arg(3, "storage_offset")
    found = []
    if tuple(t.stride) == contiguous_strides(t.shape):
        found.append(Strategy((Replicate(),), (Replicate(),), local="strided_replica"))
    if size == tuple(t.shape) and stride == tuple(t.stride) and offset in (None, 0):
        moves = [Strategy((Shard(d),), (Shard(d),)) for d in range(t.ndim)]
        moves += [Strategy((p,), (p,)) for p in _partials(op)]
        if not found:
            moves.append(Strategy((Replicate(),), (Replicate(),)))
        found += [dataclasses.replace(s, local="strided_identity") for s in moves]
    return found


@local_function("strided_replica")
def _strided_replica(op: Any, args: tuple, kwargs: dict, boxes: Sequence[object]) -> Any:
    x, size, stride = args[:3]
    offset = args[3] if len(args) > 3 else kwargs.get("storage_offset")
    x = x.contiguous()
    return op(x, size, stride, x.storage_offset() + (offset or 0))


@local_function("strided_identity")
def _strided_identity(op: Any, args: tuple, kwargs: dict, boxes: Sequence[object]) -> Any:
    x = args[0]
    return x.clone() if op is aten.as_strided_copy.default else aten.alias.default(x)


@sharding_rule(aten.expand.default)
def expand(op: OpSpec) -> list[Strategy]:
    t = op.tensors()[0]
    sizes = list(op.arg(1, "size"))
    lead = len(sizes) - t.ndim
    # a kept dim keeps its pieces (each rank expands to its own extent); a broadcast size-1
    # dim holds the same value on every rank, so it cannot be sharded on the way in
    return _moves(op, 1, [(d, d + lead) for d in range(t.ndim)
                         if sizes[d + lead] in (-1, t.shape[d]) and t.shape[d] != 1])


@sharding_rule(aten.slice_backward.default)
def slice_backward(op: OpSpec) -> list[Strategy]:
    # the gradient is scattered into zeros of input_sizes along `dim`: any other dim keeps its
    # pieces (each rank scatters into its own piece's zeros); `dim` itself must be whole
    ndim = op.tensors()[0].ndim
    dim = _dim(op.arg(2, "dim"), ndim)
    return _moves(op, 1, [(d, d) for d in range(ndim) if d != dim])


@sharding_rule(aten.select_backward.default)
def select_backward(op: OpSpec) -> list[Strategy]:
    # the gradient (without `dim`) lands at one index of `dim`; the other dims keep their pieces
    out_ndim = len(op.arg(1, "input_sizes"))
    dim = _dim(op.arg(2, "dim"), out_ndim)
    return _moves(op, 1, [(d, d + (d >= dim)) for d in range(out_ndim - 1)])
