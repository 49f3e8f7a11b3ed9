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

This needs each dp rank's stored piece to lie inside this rank's gathered piece, which holds
unless tensor parallelism shards the same dim that dp shards (a 1-d column-wise bias, Note
[fully_shard layout]); such a parameter is gathered on its own by redistribute.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import torch

from dtensor import comm
from dtensor.layout import box_contains, box_shape, local_box
from dtensor.placements import Partial, Placement, Replicate
from dtensor.redistribute import redistribute_local_tensor

if TYPE_CHECKING:
    from dtensor.parallel.fsdp import _Managed


@dataclass(frozen=True)
class Pieces:
    """Where each dp rank's stored piece sits inside this rank's gathered piece."""

    gathered_shape: tuple[int, ...]
    shapes: tuple[tuple[int, ...], ...]  # per dp rank: its stored piece's shape
    slices: tuple[tuple[slice, ...], ...]  # per dp rank: where that piece goes


def pieces_of(m: _Managed) -> Pieces | None:
    """The pieces of ``m`` on this rank's dp group, or None if they do not tile its gathered
    piece (Note [one collective per module])."""
    spec = m.param._spec
    mesh_shape = m.mesh.shape
    coord = m.mesh.get_coordinate()
    if coord is None:
        return None
    compute = tuple(Replicate() if i == m.dp_dim else p for i, p in enumerate(spec.placements))
    outer = local_box(spec.shape, mesh_shape, compute, coord)
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


def _groups(ms: Sequence[_Managed]) -> dict[tuple, list[int]]:
    """Indices of the parameters that can share one collective: same mesh, dp dim, dtype."""
    out: dict[tuple, list[int]] = {}
    for i, m in enumerate(ms):
        if m.pieces is not None:
            out.setdefault((id(m.mesh), m.dp_dim, m.param.dtype), []).append(i)
    return out


def gather_all(ms: Sequence[_Managed]) -> list[torch.Tensor]:
    """Each parameter's gathered piece (Replicate over dp), one all-gather per group."""
    out: list[torch.Tensor | None] = [None] * len(ms)
    for i, m in enumerate(ms):
        if m.pieces is None:  # nested on the dp dim: on its own
            spec = m.param._spec
            out[i] = redistribute_local_tensor(m.param._local_tensor, m.mesh, spec.placements,
                                               compute_placements(m), spec.shape)
    for idx in _groups(ms).values():
        first = ms[idx[0]]
        n = first.mesh.shape[first.dp_dim]
        mine = torch.cat([ms[i].param._local_tensor.reshape(-1) for i in idx])
        sizes = [(sum(_numel(ms[i].pieces.shapes[j]) for i in idx),) for j in range(n)]
        flats = comm.all_gather(mine, sizes, first.mesh.get_group(first.dp_dim))
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


def reduce_scatter_all(ms: Sequence[_Managed],
                       grads: Sequence[torch.Tensor | None]) -> list[torch.Tensor | None]:
    """Each gradient (a gathered-layout piece holding this rank's batch's sum, the tp dims in
    ``tp_placements[i]``) averaged over dp into the stored layout: one reduce-scatter per
    group of parameters that have gradients."""
    out: list[torch.Tensor | None] = [None] * len(ms)
    ready: list[torch.Tensor | None] = [None] * len(ms)
    pending: dict[int, tuple[Placement, ...]] = {}  # still Partial over tp after the dp step
    for i, (m, g) in enumerate(zip(ms, grads)):
        if g is None:
            continue
        local, tp = _local_grad(m, g)
        spec = m.param._spec
        if m.pieces is None:
            src = tuple(Partial("avg") if k == m.dp_dim else p for k, p in enumerate(tp))
            out[i] = redistribute_local_tensor(local, m.mesh, src, spec.placements, spec.shape)
            continue
        if tp != compute_placements(m):
            # a Partial over tp (a replicated weight used on sequence shards) commutes with
            # the dp average: reduce over dp first, then over tp on the 1/dp piece
            if any(isinstance(p, Partial) for p in tp) and all(
                    p == q or isinstance(p, Partial) for p, q in zip(tp, compute_placements(m))):
                pending[i] = tuple(p if k != m.dp_dim else spec.placements[k]
                                   for k, p in enumerate(tp))
            else:
                local = redistribute_local_tensor(local, m.mesh, tp, compute_placements(m),
                                                  spec.shape)
        ready[i] = local
    for idx in _groups(ms).values():
        idx = [i for i in idx if ready[i] is not None]
        if not idx:
            continue
        first = ms[idx[0]]
        n = first.mesh.shape[first.dp_dim]
        inputs = [torch.cat([ready[i][ms[i].pieces.slices[j]].reshape(-1)  # type: ignore
                             for i in idx]) for j in range(n)]
        group = first.mesh.get_group(first.dp_dim)
        mine = comm.reduce_scatter(inputs, group, "avg")
        me = first.mesh.get_local_rank(first.dp_dim)
        offset = 0
        for i in idx:
            shape = ms[i].pieces.shapes[me]
            out[i] = mine[offset:offset + _numel(shape)].view(shape)
            offset += _numel(shape)
    for i, src in pending.items():
        spec = ms[i].param._spec
        out[i] = redistribute_local_tensor(out[i], ms[i].mesh, src, spec.placements, spec.shape)
    return out


def compute_placements(m: _Managed) -> tuple[Placement, ...]:
    """The gathered layout: Replicate over dp, the parameter's own placements elsewhere."""
    return tuple(Replicate() if i == m.dp_dim else p
                 for i, p in enumerate(m.param._spec.placements))


def _local_grad(m: _Managed, grad: torch.Tensor) -> tuple[torch.Tensor, tuple[Placement, ...]]:
    """The gradient's local piece and its placements on ``m.mesh`` (dp: Replicate, i.e. this
    rank's own sum; tp dims: as the gradient arrived, Partial ones included)."""
    placements = list(compute_placements(m))
    local = getattr(grad, "_local_tensor", grad)
    if local is not grad:  # a DTensor on the tp mesh
        others = [k for k in range(m.mesh.ndim) if k != m.dp_dim]
        for k, p in zip(others, grad.placements):  # type: ignore[attr-defined]
            placements[k] = p
    return local, tuple(placements)


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
