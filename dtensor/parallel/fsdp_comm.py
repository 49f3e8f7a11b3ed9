"""One all-gather and one reduce-scatter per data-parallel module, whatever its parameter count.

Note [one collective per module]
Gathering each parameter on its own costs one collective per parameter and step; latency,
not bytes, then dominates a small model (torch's FSDP2 gathers one flat buffer per module
for this reason). Here every rank packs the stored pieces of all the module's parameters
into one flat buffer, one all-gather over dp moves them (pieces may be uneven: each dp rank's
size comes from the layout), and each parameter's gathered piece is assembled from the dp
ranks' pieces at the boxes the layout gives. The reduce-scatter is the mirror image: each
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
    return Pieces(box_shape(outer), tuple(shapes), tuple(slices))


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


def gather_all(ms: Sequence[_Managed], dtype: torch.dtype | None = None) -> list[torch.Tensor]:
    """Each parameter's gathered piece (Replicate over dp), cast to ``dtype`` first (Note
    [mixed precision in fully_shard]), one all-gather per group. A parameter replicated over
    dp is its stored piece itself when no cast is needed."""
    return issue_gather(ms, dtype).wait()


class PendingGather:
    """A gather issued and not yet waited for (Note [prefetch]): ``wait()`` finishes the
    all-gathers and assembles each parameter's gathered piece. It remembers which stored
    tensors, at which versions, it read: ``is_current()`` is False once one was replaced
    (``to_empty``, ``load_state_dict``) or stepped in place (an optimizer)."""

    def __init__(self, ms: Sequence[_Managed], dtype: torch.dtype | None,
                 finish: Callable[[], list[torch.Tensor]]) -> None:
        self.ms = list(ms)
        self.dtype = dtype
        self._sources = [_version_of(m) for m in ms]
        self._finish: Callable[[], list[torch.Tensor]] | None = finish

    def is_current(self, ms: Sequence[_Managed], dtype: torch.dtype | None) -> bool:
        return (dtype == self.dtype and len(ms) == len(self.ms)
                and all(a is b for a, b in zip(ms, self.ms))
                and all(_version_of(m) == v for m, v in zip(ms, self._sources)))

    def wait(self) -> list[torch.Tensor]:
        if self._finish is None:
            raise RuntimeError("PendingGather.wait() called twice")
        out, self._finish = self._finish(), None
        return out


def _version_of(m: _Managed) -> tuple:
    """What changes when the stored parameter does: an in-place op on the DTensor bumps its
    own version counter (not always its local tensor's)."""
    local = m.param._local_tensor
    return (id(m.param), m.param._version, id(local), local._version)


def issue_gather(ms: Sequence[_Managed], dtype: torch.dtype | None = None) -> PendingGather:
    """``gather_all`` split at the collective: the all-gathers are issued now (async_op=True,
    so a real backend runs them while the caller computes), assembled on ``wait()``."""
    out: list[torch.Tensor | None] = [None] * len(ms)
    stored = [m.param._local_tensor if dtype is None else m.param._local_tensor.to(dtype)
              for m in ms]
    for i, m in enumerate(ms):
        if not is_sharded_over_dp(m):
            out[i] = stored[i]
        elif m.pieces is None:  # pieces that do not tile: on its own, at once
            spec = m.param._spec
            out[i] = redistribute_local_tensor(stored[i], m.mesh, spec.placements,
                                               compute_placements(m), spec.shape)
    with_pieces = [i for i, m in enumerate(ms) if m.pieces is not None]
    issued = []
    for idx in _groups(ms, [t.dtype for t in stored], with_pieces):
        first = ms[idx[0]]
        n = first.mesh.shape[first.dp_dim]
        mine = torch.cat([stored[i].reshape(-1) for i in idx])
        sizes = [(sum(_numel(ms[i].pieces.shapes[j]) for i in idx),) for j in range(n)]
        handle = comm.all_gather(mine, sizes, first.mesh.get_group(first.dp_dim),
                                 async_op=True)
        issued.append((idx, n, mine, handle))

    def finish() -> list[torch.Tensor]:
        for idx, n, mine, handle in issued:
            flats = handle.wait()
            offsets = [0] * n
            for i in idx:
                p = ms[i].pieces
                full = mine.new_empty(p.gathered_shape)
                for j in range(n):
                    k = _numel(p.shapes[j])
                    full[p.slices[j]] = flats[j][offsets[j]:offsets[j] + k].view(p.shapes[j])
                    offsets[j] += k
                out[i] = full
        return out  # type: ignore[return-value]

    return PendingGather(ms, dtype, finish)


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
        local = redistribute_local_tensor(local, m.mesh, placements, a[1], m.param._spec.shape)
    return a[0] + local.to(a[0].dtype), a[1]


def reduce_scatter_all(ms: Sequence[_Managed],
                       grads: Sequence[GradPiece | None]) -> list[torch.Tensor | None]:
    """Each gradient (this rank's batch's sum) averaged over dp (and the replicas) into the
    stored layout and dtype: one reduce-scatter per group of sharded parameters that have
    gradients, one all-reduce per group of parameters replicated over dp."""
    return issue_reduce_scatter(ms, grads)()


def issue_reduce_scatter(ms: Sequence[_Managed], grads: Sequence[GradPiece | None]
                         ) -> Callable[[], list[torch.Tensor | None]]:
    """``reduce_scatter_all`` split at the collective: the reduce-scatters and all-reduces
    over dp are issued now (async_op=True); calling the result waits for them and finishes
    (the all-reduce across replicas, the tp step of gradients still Partial over tp, the
    cast to the stored dtype)."""
    out: list[torch.Tensor | None] = [None] * len(ms)
    ready: list[torch.Tensor | None] = [None] * len(ms)
    pending: dict[int, tuple[Placement, ...]] = {}  # still Partial over tp after the dp step
    for i, (m, piece) in enumerate(zip(ms, grads)):
        if piece is None:
            continue
        local, tp = piece
        spec = m.param._spec
        if is_sharded_over_dp(m) and m.pieces is None:
            src = tuple(Partial("avg") if k in m.dp_dims else p for k, p in enumerate(tp))
            out[i] = redistribute_local_tensor(local, m.mesh, src, spec.placements, spec.shape)
            continue
        if tp != compute_placements(m):
            # a Partial over tp (a replicated weight used on sequence shards) commutes with
            # the dp average: reduce over dp first, then over tp on the 1/dp piece
            if any(isinstance(p, Partial) for p in tp) and all(
                    p == q or isinstance(p, Partial) for p, q in zip(tp, compute_placements(m))):
                pending[i] = tuple(spec.placements[k] if k in m.dp_dims else p
                                   for k, p in enumerate(tp))
            else:
                local = redistribute_local_tensor(local, m.mesh, tp, compute_placements(m),
                                                  spec.shape)
        ready[i] = local
    dtypes = [t.dtype if t is not None else torch.float32 for t in ready]
    has = [i for i, t in enumerate(ready) if t is not None]
    issued = []  # (handle, the group's first parameter, its indices, their shapes)
    for idx in _groups(ms, dtypes, [i for i in has if ms[i].pieces is not None]):
        first = ms[idx[0]]
        n = first.mesh.shape[first.dp_dim]
        inputs = [torch.cat([ready[i][ms[i].pieces.slices[j]].reshape(-1)  # type: ignore
                             for i in idx]) for j in range(n)]
        handle = comm.reduce_scatter(inputs, first.mesh.get_group(first.dp_dim), "avg",
                                     async_op=True)
        me = first.mesh.get_local_rank(first.dp_dim)
        issued.append((handle, first, idx, [ms[i].pieces.shapes[me] for i in idx]))
    for idx in _groups(ms, dtypes, [i for i in has if not is_sharded_over_dp(ms[i])]):
        first = ms[idx[0]]
        flat = torch.cat([ready[i].reshape(-1) for i in idx])  # type: ignore[union-attr]
        handle = comm.all_reduce(flat, first.mesh.get_group(first.dp_dim), "avg",
                                 async_op=True)
        issued.append((handle, first, idx, [ready[i].shape for i in idx]))

    def finish() -> list[torch.Tensor | None]:
        for handle, first, idx, shapes in issued:
            _unpack(_across_replicas(handle.wait(), first), idx, shapes, out)
        for i, src in pending.items():
            spec = ms[i].param._spec
            out[i] = redistribute_local_tensor(out[i], ms[i].mesh, src, spec.placements,
                                               spec.shape)
        return [None if t is None else t.to(m.param.dtype) for m, t in zip(ms, out)]

    return finish


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
