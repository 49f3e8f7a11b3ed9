"""One all-gather and one reduce-scatter per data-parallel module, whatever its parameter count.

Note [one collective per module]
Gathering each parameter on its own costs one collective per parameter and step; latency,
not bytes, then dominates a small model (torch's FSDP2 gathers one flat buffer per module
for this reason). Here every rank packs the stored pieces of all the module's parameters
into one flat buffer, one all-gather over dp moves them (pieces may be uneven: each dp rank's
size comes from the layout), and each parameter's gathered piece is assembled from the dp
ranks' pieces at the boxes the layout gives, a few ops per module (Note [copy-out in one
kernel]). The reduce-scatter is the mirror image: each
parameter's gradient is cut at the same boxes, the cuts for dp rank j of every parameter are
packed into piece j, and one reduce-scatter (average) hands every rank its packed pieces.
Parameters replicated over dp (``replicate``, scalars) need no gather; their gradients share
one all-reduce. Under HSDP (Note [HSDP]) the reduced flat buffer is all-reduced once more,
across the replicas.

This needs each dp rank's stored piece to lie inside this rank's gathered piece, which holds
for every layout ``fully_shard`` makes when the mesh has dim names (Note [nested dp inside
tp]); a parameter whose pieces do not tile is gathered on its own by redistribute.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

import torch

from dtensor import comm
from dtensor.layout import box_contains, box_shape, local_box
from dtensor.placements import Partial, Placement, Replicate, Shard
from dtensor.redistribute import redistribute_local_tensor

if TYPE_CHECKING:
    from dtensor.parallel.fsdp import _Managed

# a gradient's local piece and its placements on the parameter's mesh (dp dims Replicate:
# this rank's own sum; tp dims as the gradient arrived, Partial ones included)
GradPiece = tuple[torch.Tensor, tuple[Placement, ...]]


@dataclass(frozen=True)
class Pieces:
    """Where each dp rank's stored piece sits inside this rank's gathered piece."""

    gathered_shape: tuple[int, ...]
    shapes: tuple[tuple[int, ...], ...]  # per dp rank: its stored piece's shape
    slices: tuple[tuple[slice, ...], ...]  # per dp rank: where that piece goes
    dim: int  # the dim dp cuts (Note [copy-out in one kernel])

    @property
    def even(self) -> bool:
        """Equal pieces, rank j's at block j along ``dim``: the gathered piece is the (n, k)
        buffer of an all-gather, up to a permutation of dims (Note [copy-out in one kernel])."""
        n, d = len(self.shapes), self.dim
        if any(s != self.shapes[0] for s in self.shapes):
            return False
        k = self.shapes[0][d]
        return n * k == self.gathered_shape[d] and all(
            sl[d] == slice(j * k, (j + 1) * k) for j, sl in enumerate(self.slices))

    @property
    def dense(self) -> bool:
        """Rank j's piece is block j of the gathered piece's memory (dims before ``dim`` are
        1): the gathered piece viewed as (n, k) is the all-gather's buffer."""
        return self.even and _numel(self.gathered_shape[:self.dim]) == 1


def pieces_of(m: _Managed) -> Pieces | None:
    """The pieces of ``m`` on this rank's dp group, or None if they do not tile its gathered
    piece (Note [one collective per module]) or there is nothing to gather."""
    spec = m.param._spec
    mesh_shape = m.mesh.shape
    coord = m.mesh.get_coordinate()
    if coord is None or not is_sharded_over_dp(m):
        return None
    outer = local_box(spec.shape, mesh_shape, compute_placements(m), coord)
    shapes, slices = [], []
    for j in range(mesh_shape[m.dp_dim]):
        at = list(coord)
        at[m.dp_dim] = j
        box = local_box(spec.shape, mesh_shape, spec.placements, at)
        if not box_contains(outer, box):
            return None
        shapes.append(box_shape(box))
        slices.append(tuple(slice(b0 - o0, b1 - o0) for (b0, b1), (o0, _) in zip(box, outer)))
    dim = spec.placements[m.dp_dim].dim  # type: ignore[union-attr]
    return Pieces(box_shape(outer), tuple(shapes), tuple(slices), dim)


def is_sharded_over_dp(m: _Managed) -> bool:
    return isinstance(m.param._spec.placements[m.dp_dim], Shard)


def _groups(ms: Sequence[_Managed], dtypes: Sequence[torch.dtype],
            which: Sequence[int]) -> list[list[int]]:
    """``which`` split into runs that can share one collective: the same dp group (and
    replica group) and dtype, whichever mesh object each parameter is stored on (Note [nested
    dp inside tp] stores some on a sub-mesh with the dims moved: the same groups)."""
    out: dict[tuple, list[int]] = {}
    for i in which:
        m = ms[i]
        replicas = None if m.replicate_dim is None else m.mesh.get_group(m.replicate_dim)
        key = (id(m.mesh.get_group(m.dp_dim)), id(replicas), dtypes[i])
        out.setdefault(key, []).append(i)
    return list(out.values())


def gather_all(ms: Sequence[_Managed], dtype: torch.dtype | None = None,
               into: Sequence[torch.Tensor | None] | None = None) -> list[torch.Tensor]:
    """Each parameter's gathered piece (Replicate over dp), cast to ``dtype`` first (Note
    [mixed precision in fully_shard]), one all-gather per group. A parameter replicated over
    dp is its stored piece itself when no cast is needed. ``into``: as ``PendingGather.wait``."""
    return issue_gather(ms, dtype).wait(into)


class PendingGather:
    """A gather issued and not yet waited for (Note [prefetch]): ``wait()`` finishes the
    all-gathers and assembles each parameter's gathered piece. It remembers which stored
    tensors, at which versions, it read: ``is_current()`` is False once one was replaced
    (``to_empty``, ``load_state_dict``) or stepped in place (an optimizer)."""

    def __init__(self, ms: Sequence[_Managed], dtype: torch.dtype | None,
                 finish: Callable[..., list[torch.Tensor]]) -> None:
        self.ms = list(ms)
        self.dtype = dtype
        self._sources = [_version_of(m) for m in ms]
        self._finish: Callable[..., list[torch.Tensor]] | None = finish

    def is_current(self, ms: Sequence[_Managed], dtype: torch.dtype | None) -> bool:
        return (dtype == self.dtype and len(ms) == len(self.ms)
                and all(a is b for a, b in zip(ms, self.ms))
                and all(_version_of(m) == v for m, v in zip(ms, self._sources)))

    def wait(self, into: Sequence[torch.Tensor | None] | None = None) -> list[torch.Tensor]:
        """The gathered pieces; a parameter with pieces is written into ``into[i]`` (a
        contiguous tensor of its gathered shape and dtype) where that is given."""
        if self._finish is None:
            raise RuntimeError("PendingGather.wait() called twice")
        out, self._finish = self._finish(into), None
        return out


def _version_of(m: _Managed) -> tuple:
    """What changes when the stored parameter does: an in-place op on the DTensor bumps its
    own version counter (not always its local tensor's)."""
    local = m.param._local_tensor
    return (id(m.param), m.param._version, id(local), local._version)


def issue_gather(ms: Sequence[_Managed], dtype: torch.dtype | None = None) -> PendingGather:
    """``gather_all`` split at the collective: the all-gathers are issued now (async_op=True,
    so a real backend runs them while the caller computes), assembled on ``wait()``, into
    the tensors ``wait(into)`` names where it names one (Note [copy-out in one kernel])."""
    out: list[torch.Tensor | None] = [None] * len(ms)
    for i, m in enumerate(ms):
        if m.pieces is not None:
            continue
        stored = m.param._local_tensor if dtype is None else m.param._local_tensor.to(dtype)
        if not is_sharded_over_dp(m):
            out[i] = stored
        else:  # pieces that do not tile: on its own, at once
            spec = m.param._spec
            out[i] = redistribute_local_tensor(stored, m.mesh, spec.placements,
                                               compute_placements(m), spec.shape)
    with_pieces = [i for i, m in enumerate(ms) if m.pieces is not None]
    dtypes = [dtype or m.param.dtype for m in ms]
    issued = []
    for idx in _groups(ms, dtypes, with_pieces):
        idx.sort(key=lambda i: not ms[i].pieces.dense)  # type: ignore[union-attr]
        first = ms[idx[0]]
        n = first.mesh.shape[first.dp_dim]
        group = first.mesh.get_group(first.dp_dim)
        sizes = [sum(_numel(ms[i].pieces.shapes[j]) for i in idx) for j in range(n)]
        # copy-in and cast in one op: this rank's pieces packed into one buffer
        locals_ = [ms[i].param._local_tensor.reshape(-1) for i in idx]
        even = all(ms[i].pieces.even for i in idx)  # type: ignore[union-attr]
        if even:  # one buffer: the copy-out is one split (Note [copy-out in one kernel])
            # packed straight into this rank's row of the gathered buffer, which the
            # all-gather fills in place: no separate input buffer while it is in flight
            rows = locals_[0].new_empty((n, sizes[0]), dtype=dtypes[idx[0]])
            mine = rows[group.rank()]
            torch.cat(locals_, out=mine)
            handle = comm.all_gather_in_place(rows, group, async_op=True)
        else:
            mine = locals_[0].new_empty(sum(t.numel() for t in locals_), dtype=dtypes[idx[0]])
            torch.cat(locals_, out=mine)
            handle = comm.all_gather(mine, [(k,) for k in sizes], group, async_op=True)
        issued.append((idx, n, even, mine, handle))

    def finish(into: Sequence[torch.Tensor | None] | None = None) -> list[torch.Tensor]:
        for idx, n, even, mine, handle in issued:
            fulls = [(into[i] if into is not None and into[i] is not None
                      else mine.new_empty(ms[i].pieces.gathered_shape)) for i in idx]
            pieces = [ms[i].pieces for i in idx]
            if even:
                _copy_out_even(handle.wait().view(n, -1), pieces, fulls)  # type: ignore
            else:
                _copy_out_uneven(handle.wait(), pieces, fulls)  # type: ignore[arg-type]
            for i, full in zip(idx, fulls):
                out[i] = full
        return out  # type: ignore[return-value]

    return PendingGather(ms, dtype, finish)


# Note [copy-out in one kernel]
# A module's all-gather brings each dp rank's packed pieces; every gathered parameter is put
# together from n of them. A copy per piece is n kernels per parameter and gather (n x parameters
# per module), each a launch on a device and a dispatch on the CPU. When every parameter's pieces
# are equal chunks in rank order (``Pieces.even``: a size dp divides, the common case) the
# all-gather fills one (n, S) buffer, row j rank j's packed pieces, and a parameter whose dims
# before the cut dim are 1 (``Pieces.dense``: dp cuts dim 0) is, viewed as (n, k), the buffer's
# columns of its pieces: one ``split_with_sizes_copy`` writes all such parameters (torch's FSDP2
# copy-out); ``fully_shard`` cuts dim 0 of every parameter (Note [fully_shard layout]), so that is
# all of them. A parameter cut along a later dim would be one ``cat`` of its n pieces along that
# dim. Uneven pieces keep the list all-gather (padding would move more bytes) and one
# ``_foreach_copy_`` of every piece. The copy-in is one ``cat`` into the packed buffer, cast on the
# way (Note [mixed precision in fully_shard]); a regather writes into the freed storage itself
# (``wait(into)``), not into a new tensor copied there. The reduce-scatter is the mirror image: one
# ``cat`` of the gradients viewed as (n, k) (one copy more for a later cut dim) packs its input,
# cast to reduce_dtype, and its output is cut into views; a gradient that still holds more than the
# gathered piece (Replicate over tp, where the parameter is Shard: an embedding's) enters that
# ``cat`` as a view of its box. The one-buffer collectives (all_gather_into_tensor,
# reduce_scatter_tensor) move the same bytes as the list forms; on NCCL the list forms would copy
# through a flat buffer themselves.

def _copy_out_even(rows: torch.Tensor, pieces: Sequence[Pieces],
                   fulls: Sequence[torch.Tensor]) -> None:
    n = rows.shape[0]
    widths = [_numel(p.shapes[0]) for p in pieces]
    starts = [sum(widths[:a]) for a in range(len(widths))]
    dense = sum(p.dense for p in pieces)  # packed first (issue_gather)
    if dense:
        torch.split_with_sizes_copy(rows[:, :sum(widths[:dense])], widths[:dense], dim=1,
                                    out=[f.view(n, w) for f, w in zip(fulls[:dense], widths)])
    for a in range(dense, len(pieces)):
        cols = rows[:, starts[a]:starts[a] + widths[a]]
        p = pieces[a]
        torch.cat([cols[j].view(p.shapes[0]) for j in range(n)], dim=p.dim, out=fulls[a])


def _copy_out_uneven(flats: Sequence[torch.Tensor], pieces: Sequence[Pieces],
                     fulls: Sequence[torch.Tensor]) -> None:
    dsts, srcs = [], []
    for j, flat in enumerate(flats):
        offset = 0
        for p, full in zip(pieces, fulls):
            k = _numel(p.shapes[j])
            dsts.append(full[p.slices[j]])
            srcs.append(flat[offset:offset + k].view(p.shapes[j]))
            offset += k
    torch._foreach_copy_(dsts, srcs)


def grad_pieces(ms: Sequence[_Managed], grads: Sequence[torch.Tensor | None],
                dtype: torch.dtype | None = None) -> list[GradPiece | None]:
    """Each gradient as autograd handed it (a plain tensor, or a DTensor on the tp mesh) as
    a local piece with its placements on the parameter's mesh, cast to ``dtype``."""
    out: list[GradPiece | None] = []
    for m, g in zip(ms, grads):
        if g is None:
            out.append(None)
            continue
        placements = list(compute_placements(m))
        local = getattr(g, "_local_tensor", g)
        if local is not g:  # a DTensor on the tp mesh
            for k, p in zip(m.tp_dims, g.placements):  # type: ignore[attr-defined]
                placements[k] = p
        out.append((local if dtype is None else local.to(dtype), tuple(placements)))
    return out


def add_grad_pieces(m: _Managed, a: GradPiece | None, b: GradPiece | None) -> GradPiece | None:
    """The sum of two gradients of ``m`` (gradient accumulation without sync)."""
    if a is None or b is None:
        return a if b is None else b
    local, placements = b
    if placements != a[1]:
        local = _move_grad(local, m, placements, a[1])
    return a[0] + local.to(a[0].dtype), a[1]


def accumulate(m: _Managed, into: GradPiece | None, piece: GradPiece | None,
               dtype: torch.dtype | None, owned: bool) -> GradPiece | None:
    """``piece`` added to ``m``'s accumulated gradient ``into`` in place (Note [gradient
    accumulation]). The first piece becomes the sum, cast to ``dtype``: as it is if ``owned``
    (no other tensor shares its memory) and contiguous, else a copy."""
    if piece is None:
        return into
    local, placements = piece
    if into is None:
        keep = owned and local.is_contiguous() and dtype in (None, local.dtype)
        return (local if keep else local.to(dtype or local.dtype, copy=True,
                                            memory_format=torch.contiguous_format)), placements
    if placements != into[1]:
        local = _move_grad(local, m, placements, into[1])
    into[0].add_(local)
    return into


def reduce_scatter_all(ms: Sequence[_Managed],
                       grads: Sequence[GradPiece | None]) -> list[torch.Tensor | None]:
    """Each gradient (this rank's batch's sum) averaged over dp (and the replicas) into the
    stored layout and dtype: one reduce-scatter per group of sharded parameters that have
    gradients, one all-reduce per group of parameters replicated over dp."""
    return issue_reduce_scatter(ms, grads)()


def issue_reduce_scatter(ms: Sequence[_Managed], grads: Sequence[GradPiece | None],
                         dtype: torch.dtype | None = None
                         ) -> Callable[[], list[torch.Tensor | None]]:
    """``reduce_scatter_all`` split at the collective: the reduce-scatters and all-reduces
    over dp are issued now (async_op=True); calling the result waits for them and finishes
    (the all-reduce across replicas, the tp step of gradients still Partial over tp, the
    cast to the stored dtype). ``dtype``: what to reduce in (the gradients are cast on the
    way into the packed buffer, one op per group)."""
    out: list[torch.Tensor | None] = [None] * len(ms)
    ready: list[torch.Tensor | None] = [None] * len(ms)
    pending: dict[int, tuple[Placement, ...]] = {}  # still Partial over tp after the dp step
    targets = [torch.float32] * len(ms)  # the dtype each gradient is reduced in
    for i, (m, piece) in enumerate(zip(ms, grads)):
        if piece is None:
            continue
        local, tp = piece
        spec = m.param._spec
        targets[i] = dtype or local.dtype
        if is_sharded_over_dp(m) and m.pieces is None:
            src = tuple(Partial("avg") if k in m.dp_dims else p for k, p in enumerate(tp))
            out[i] = redistribute_local_tensor(local.to(targets[i]), m.mesh, src,
                                               spec.placements, spec.shape)
            continue
        if tp != compute_placements(m):
            # a Partial over tp of a weight replicated over tp (used on sequence shards)
            # commutes with the dp average: reduce over dp first, then over tp on the 1/dp
            # piece. Not where tp shards it: dp's pieces lie inside the tp piece there (Note
            # [nested dp inside tp]), so the gradient is cut to it first (_cut)
            if any(isinstance(p, Partial) for p in tp) and all(
                    p == q or (isinstance(p, Partial) and isinstance(q, Replicate))
                    for p, q in zip(tp, compute_placements(m))):
                pending[i] = tuple(spec.placements[k] if k in m.dp_dims else p
                                   for k, p in enumerate(tp))
            else:
                local = _cut(local, m, tp)
        ready[i] = local
    has = [i for i, t in enumerate(ready) if t is not None]
    issued = []  # (handle, the group's first parameter, its indices, their shapes)
    for idx in _groups(ms, targets, [i for i in has if ms[i].pieces is not None]):
        first = ms[idx[0]]
        n = first.mesh.shape[first.dp_dim]
        group = first.mesh.get_group(first.dp_dim)
        if all(ms[i].pieces.even for i in idx):  # type: ignore[union-attr]
            # one (n, S) buffer, row j dp rank j's pieces, built by one cat (Note [copy-out
            # in one kernel], mirrored): one reduce-scatter of one buffer, the same bytes
            rows = _cat([_as_rows(ready[i], ms[i].pieces, n)  # type: ignore[arg-type]
                         for i in idx], 1, targets[idx[0]])
            handle = comm.reduce_scatter_cat(rows.view(-1), [rows.shape[1]] * n, 0, group,
                                             "avg", async_op=True)
        else:
            # uneven: the list form (padding would move more bytes), its n inputs cut from
            # one buffer packed by one cat
            cuts = [ready[i][ms[i].pieces.slices[j]].reshape(-1)  # type: ignore[index]
                    for j in range(n) for i in idx]
            sizes = [sum(c.numel() for c in cuts[j * len(idx):(j + 1) * len(idx)])
                     for j in range(n)]
            inputs = list(_cat(cuts, 0, targets[idx[0]]).split(sizes))
            handle = comm.reduce_scatter(inputs, group, "avg", async_op=True)
        me = first.mesh.get_local_rank(first.dp_dim)
        issued.append((handle, first, idx, [ms[i].pieces.shapes[me] for i in idx]))
    for idx in _groups(ms, targets, [i for i in has if not is_sharded_over_dp(ms[i])]):
        first = ms[idx[0]]
        flat = _cat([ready[i].reshape(-1) for i in idx], 0, targets[idx[0]])  # type: ignore
        handle = comm.all_reduce(flat, first.mesh.get_group(first.dp_dim), "avg",
                                 async_op=True)
        issued.append((handle, first, idx, [ready[i].shape for i in idx]))

    def finish() -> list[torch.Tensor | None]:
        for handle, first, idx, shapes in issued:
            flat = _across_replicas(handle.wait(), first)
            stored = {ms[i].param.dtype for i in idx}
            if len(stored) == 1 and not any(i in pending for i in idx):
                flat = flat.to(stored.pop())  # one cast per group, not one per parameter
            _unpack(flat, idx, shapes, out)
        for i, src in pending.items():
            spec = ms[i].param._spec
            out[i] = redistribute_local_tensor(out[i], ms[i].mesh, src, spec.placements,
                                               spec.shape)
        return [None if t is None else t.to(m.param.dtype) for m, t in zip(ms, out)]

    return finish


def _cut(local: torch.Tensor, m: _Managed, placements: tuple[Placement, ...]) -> torch.Tensor:
    """A gradient piece in ``placements`` as the gathered layout's piece: where it only cuts
    (Replicate to Shard over tp: an embedding's gradient, whole over the vocabulary), the
    view of this rank's box, read by the packing ``cat`` with no copy of its own; else
    redistributed (a copy)."""
    target = compute_placements(m)
    spec = m.param._spec
    coord = m.mesh.get_coordinate()
    if coord is None or any(p != q and not (isinstance(p, Replicate) and isinstance(q, Shard))
                            for p, q in zip(placements, target)):
        return _move_grad(local, m, placements, target)
    held = local_box(spec.shape, m.mesh.shape, placements, coord)
    box = local_box(spec.shape, m.mesh.shape, target, coord)
    return local[tuple(slice(b0 - h0, b1 - h0) for (b0, b1), (h0, _) in zip(box, held))]


# Note [gradients in another tp layout]
# A gradient piece says Replicate on the dp dims (compute_placements) while each dp rank holds
# its own batch's gradient: nothing is replicated there until the reduce-scatter. Moved to
# another tp layout as written, the planner may use that "replica" (slice over dp,
# reduce-scatter over tp, all-gather over dp: fewer bytes when tp is the larger dim), which
# mixes the dp ranks' gradients. What the pieces are is Partial("avg") over dp (the
# reduce-scatter takes their mean), so the move is planned on that: any plan is then right.
def _move_grad(local: torch.Tensor, m: _Managed, src: tuple[Placement, ...],
               dst: tuple[Placement, ...]) -> torch.Tensor:
    """A gradient piece of ``m`` moved between two layouts that agree on the dp dims (Note
    [gradients in another tp layout])."""
    dp = {k for k in (m.dp_dim, m.replicate_dim)
          if k is not None and isinstance(src[k], Replicate) and dst[k] == src[k]}

    def truth(placements: tuple[Placement, ...]) -> tuple[Placement, ...]:
        return tuple(Partial("avg") if k in dp else p for k, p in enumerate(placements))

    return redistribute_local_tensor(local, m.mesh, truth(src), truth(dst), m.param._spec.shape)


def _cat(tensors: Sequence[torch.Tensor], dim: int, dtype: torch.dtype) -> torch.Tensor:
    """``torch.cat`` cast to ``dtype`` in the same op (Note [mixed precision in fully_shard])."""
    if all(t.dtype == dtype for t in tensors):
        return torch.cat(tensors, dim)
    shape = list(tensors[0].shape)
    shape[dim] = sum(t.shape[dim] for t in tensors)
    return torch.cat(tensors, dim, out=tensors[0].new_empty(shape, dtype=dtype))


def _as_rows(grad: torch.Tensor, p: Pieces, n: int) -> torch.Tensor:
    """``grad`` (the gathered shape, ``p.even``) as (n, k): row j the piece dp rank j keeps; a
    view when ``p.dense``, else one copy."""
    if p.dense:
        return grad.reshape(n, -1)
    return grad.unflatten(p.dim, (n, p.shapes[0][p.dim])).movedim(p.dim, 0).reshape(n, -1)


def _across_replicas(flat: torch.Tensor, m: _Managed) -> torch.Tensor:
    """Note [HSDP]: the average over the replicas of an already dp-averaged buffer."""
    if m.replicate_dim is None:
        return flat
    return comm.all_reduce(flat, m.mesh.get_group(m.replicate_dim), "avg")


def _unpack(flat: torch.Tensor, idx: list[int], shapes: Sequence[Sequence[int]],
            out: list[torch.Tensor | None]) -> None:
    offset = 0
    for i, shape in zip(idx, shapes):
        out[i] = flat[offset:offset + _numel(shape)].view(tuple(shape))
        offset += _numel(shape)


def compute_placements(m: _Managed) -> tuple[Placement, ...]:
    """The gathered layout: Replicate over dp, the parameter's own placements elsewhere."""
    return tuple(Replicate() if i == m.dp_dim else p
                 for i, p in enumerate(m.param._spec.placements))


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
