"""Moving a DTensor to another mesh (Note [cross-mesh moves]).

Note [cross-mesh moves]
``x.redistribute(device_mesh=other, placements=...)`` and ``distribute_tensor(x, other, ...)``
move a DTensor between two meshes: pipeline stages, or a job that resumes on other ranks. The
meshes may be disjoint, overlap, or hold the same ranks in another shape. Every rank of the
world computes the same plan from the two layouts (no metadata is exchanged):

1. A Partial source is reduced on its own mesh first (to Replicate on those mesh dims), and a
   Partial target is reached on the target mesh after the move (no communication: one rank
   keeps the value), so the move itself carries plain pieces.
2. The source pieces of distinct boxes partition the tensor (replicas hold the same box).
   Each target rank needs its box; for every source box meeting it, the part is copied
   locally when the target rank holds that box itself, else received from one holder
   (holders take turns by target rank, spreading the sends).
3. Each rank posts its sends and receives point to point on the world group, waits, and
   assembles its piece.

So each target rank receives exactly the elements of its box that it does not hold: the least
any move can, which tests check element by element against brute force. Ranks in neither mesh
take no part and get an empty piece, as a rank outside a mesh does. The move is
differentiable: the gradient makes the reverse move, which every rank of the two meshes takes
part in when it runs backward through it (an SPMD program does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from dtensor.layout import Box, box_intersect, box_numel, local_box, mesh_coordinates
from dtensor.mesh import DeviceMesh
from dtensor.placements import Partial, Placement, Replicate
from dtensor.spec import DTensorSpec, contiguous_strides


@dataclass(frozen=True)
class Transfer:
    """``box`` (global bounds) goes from global rank ``src`` to global rank ``dst``
    (``src == dst``: a local copy)."""

    src: int
    dst: int
    box: Box


def mesh_boxes(mesh: DeviceMesh, placements: Sequence[Placement],
               shape: Sequence[int]) -> dict[int, Box]:
    """Global rank -> the box of the tensor it holds on ``mesh``."""
    ranks = mesh.mesh.flatten().tolist()
    return {rank: local_box(shape, mesh.shape, placements, coord)
            for rank, coord in zip(ranks, mesh_coordinates(mesh.shape))}


def plan_move(src: dict[int, Box], dst: dict[int, Box]) -> list[Transfer]:
    """The transfers that give every target rank its box from the source ranks' boxes
    (Note [cross-mesh moves], step 2). ``src``'s boxes must partition the tensor up to
    replicas (no Partial)."""
    holders: dict[Box, list[int]] = {}
    for rank, box in sorted(src.items()):
        if box_numel(box):
            holders.setdefault(box, []).append(rank)
    out = []
    for rank, want in sorted(dst.items()):
        if not box_numel(want):
            continue
        for box, ranks in holders.items():
            part = box_intersect(box, want)
            if not box_numel(part):
                continue
            sender = rank if rank in ranks else ranks[rank % len(ranks)]
            out.append(Transfer(sender, rank, part))
    return out


def _without_partial(placements: Sequence[Placement]) -> tuple[Placement, ...]:
    return tuple(Replicate() if isinstance(p, Partial) else p for p in placements)


def _region(piece: torch.Tensor, own: Box, part: Box) -> torch.Tensor:
    """The part ``part`` (global bounds) of a piece that holds ``own``."""
    return piece[tuple(slice(a - o, b - o) for (a, b), (o, _) in zip(part, own))]


def move_local(local: torch.Tensor, src_mesh: DeviceMesh, src_placements: Sequence[Placement],
               dst_mesh: DeviceMesh, dst_placements: Sequence[Placement],
               shape: Sequence[int]) -> torch.Tensor:
    """This rank's target piece, from its source piece (empty when not in a mesh)."""
    me = dist.get_rank()
    src = mesh_boxes(src_mesh, src_placements, shape)
    dst = mesh_boxes(dst_mesh, dst_placements, shape)
    transfers = plan_move(src, dst)
    own = src.get(me)
    works, received = [], []
    out = None
    if me in dst:
        want = dst[me]
        out = local.new_empty(tuple(b - a for a, b in want))
    for t in transfers:
        if t.src == me and t.dst != me:
            works.append(dist.isend(_region(local, own, t.box).contiguous(), t.dst))
        elif t.dst == me and t.src != me:
            buf = local.new_empty(tuple(b - a for a, b in t.box))
            works.append(dist.irecv(buf, t.src))
            received.append((t.box, buf))
        elif t.dst == me:  # a local copy
            _region(out, dst[me], t.box).copy_(_region(local, own, t.box))
    for w in works:
        w.wait()
    for box, buf in received:
        _region(out, dst[me], box).copy_(buf)
    return out if out is not None else local.new_empty((0,))


def _wrap(cls: type, local: torch.Tensor, mesh: DeviceMesh, placements: tuple[Placement, ...],
          shape: tuple[int, ...], requires_grad: bool = False) -> Any:
    """A leaf of ``cls`` (the DTensor class, which this layer sits below) from this rank's
    piece."""
    spec = DTensorSpec(mesh, tuple(placements), tuple(shape), contiguous_strides(shape),
                       local.dtype)
    return cls(local, spec, requires_grad=requires_grad)


class _CrossMeshMove(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Any, mesh: DeviceMesh, placements: tuple[Placement, ...]) -> Any:
        spec = x._spec
        ctx.cls = type(x)
        ctx.source = (spec.mesh, spec.placements)
        ctx.target = (mesh, placements)
        local = move_local(x._local_tensor, spec.mesh, spec.placements, mesh, placements,
                           spec.shape)
        return _wrap(ctx.cls, local, mesh, placements, spec.shape)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        mesh, placements = ctx.target
        src_mesh, src_placements = ctx.source
        if mesh.get_coordinate() is not None:
            grad = grad.redistribute(mesh, placements)
        local = move_local(grad._local_tensor, mesh, placements, src_mesh, src_placements,
                           grad._spec.shape)
        return _wrap(ctx.cls, local, src_mesh, src_placements, grad._spec.shape), None, None


def move_to_mesh(x: Any, mesh: DeviceMesh, placements: tuple[Placement, ...]) -> Any:
    """``x`` on ``mesh`` in ``placements`` (normalized), Note [cross-mesh moves]."""
    spec = x._spec
    plain = _without_partial(spec.placements)
    if spec.mesh.get_coordinate() is not None and plain != spec.placements:
        x = x.redistribute(spec.mesh, plain)  # step 1: reduce a Partial where it lives
    elif plain != spec.placements:  # a rank outside the source mesh: only the spec changes
        x = _wrap(type(x), x._local_tensor, spec.mesh, plain, spec.shape, x.requires_grad)
    target = _without_partial(placements)
    moved = _CrossMeshMove.apply(x, mesh, target)
    if target != tuple(placements) and mesh.get_coordinate() is not None:
        moved = moved.redistribute(mesh, placements)
    return moved
