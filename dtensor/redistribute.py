"""Redistribute one rank's local tensor over a real mesh: plan, then run each step by table.

``redistribute_local_tensor`` asks ``planner.plan`` for the steps and runs each through
``EXECUTORS``, keyed by step kind. Each executor mirrors its counterpart in
``local_redistribute`` (the reference over all ranks' locals) for one rank: the pieces come
from ``dtensor.layout`` and nowhere else, and collectives go through ``dtensor.comm`` on the
group ``mesh.group_for(step.mesh_dims)``, whose group ranks are ``layout.mesh_groups`` order.
Local steps *are* the reference's functions, applied to this rank alone.

Ranks not on the mesh hold no piece: they get their input back unchanged (like torch, whose
DTensor gives such ranks an empty local tensor and skips them).

>>> import torch, simpg
>>> from dtensor.mesh import init_device_mesh
>>> from dtensor.placements import Shard, Replicate
>>> def body():
...     mesh = init_device_mesh("cpu", (4,))
...     local = torch.arange(5.0)[dist.get_rank() * 2:dist.get_rank() * 2 + 2]
...     return redistribute_local_tensor(local, mesh, [Shard(0)], [Replicate()], (5,)).tolist()
>>> simpg.run(body, 4)[3]
[0.0, 1.0, 2.0, 3.0, 4.0]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, overload

import torch
import torch.distributed as dist

from dtensor import comm
from dtensor.comm import Handle
from dtensor.layout import (Box, box_contains, box_intersect, box_numel, box_shape, local_box,
                            local_shape, mesh_groups)
from dtensor.local_redistribute import STEP_FUNCTIONS as REFERENCE_STEPS
from dtensor.local_redistribute import StepError, one_partial_op
from dtensor.mesh import DeviceMesh
from dtensor.placements import Partial, Placement, Replicate, Shard, fmt_placements
from dtensor.planner import Step, plan

Coord = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class _Where:
    """What a step needs to know about this rank: the mesh, the tensor, its coordinate."""

    mesh: DeviceMesh
    mesh_shape: tuple[int, ...]
    global_shape: tuple[int, ...]
    coord: Coord

    def members(self, step: Step) -> tuple[Coord, ...]:
        """This rank's group for ``step``, in group-rank order."""
        return _members(self.mesh_shape, step.mesh_dims, self.coord)

    def box(self, placements: tuple[Placement, ...], c: Coord | None = None) -> Box:
        return local_box(self.global_shape, self.mesh_shape, placements,
                         self.coord if c is None else c)


@overload
def redistribute_local_tensor(local: torch.Tensor, mesh: DeviceMesh,
                              src_placements: Sequence[Placement | int],
                              dst_placements: Sequence[Placement | int],
                              global_shape: Sequence[int], *,
                              async_op: Literal[False] = ...) -> torch.Tensor: ...
@overload
def redistribute_local_tensor(local: torch.Tensor, mesh: DeviceMesh,
                              src_placements: Sequence[Placement | int],
                              dst_placements: Sequence[Placement | int],
                              global_shape: Sequence[int], *,
                              async_op: Literal[True]) -> Handle[torch.Tensor]: ...
def redistribute_local_tensor(local, mesh, src_placements, dst_placements,  # noqa: E302
                              global_shape, *, async_op=False):
    """This rank's piece of the tensor under ``dst_placements``, given its piece ``local``
    under ``src_placements``. Every rank of the mesh must call it with the same arguments
    but ``local``.

    With ``async_op=True`` it returns a ``comm.Handle``: the last collective is left in
    flight, and ``wait()`` finishes it and gives the tensor (earlier steps feed the next one,
    so they finish at once).

    >>> import torch, torch.distributed as dist, simpg
    >>> from dtensor import init_device_mesh, Shard, Replicate
    >>> def body():  # an all_gather of the pieces [0, 1] and [2]
    ...     local = torch.arange(3.0).chunk(2)[dist.get_rank()]
    ...     mesh = init_device_mesh("cpu", (2,))
    ...     return redistribute_local_tensor(local, mesh, [Shard(0)], [Replicate()], (3,))
    >>> simpg.run(body, 2)
    [tensor([0., 1., 2.]), tensor([0., 1., 2.])]
    """
    global_shape = tuple(int(n) for n in global_shape)
    coord = mesh.get_coordinate()
    if coord is None:
        return Handle.done(local) if async_op else local
    where = _Where(mesh, mesh.shape, global_shape, tuple(coord))
    steps = plan(src_placements, dst_placements, mesh.shape, global_shape,
                 itemsize=local.element_size())
    if steps:
        want = local_shape(global_shape, mesh.shape, steps[0].src, where.coord)
        if tuple(local.shape) != want:
            raise ValueError(
                f"redistribute {fmt_placements(steps[0].src)}->{fmt_placements(steps[-1].dst)} "
                f"of {global_shape} on {mesh!r}: rank {dist.get_rank()} at {where.coord} holds "
                f"shape {tuple(local.shape)}, expected {want}")
    cur: Handle[torch.Tensor] = Handle.done(local)
    for step in steps:
        cur = EXECUTORS[step.kind](cur.wait(), step, where)
    return cur if async_op else cur.wait()


# ---------------------------------------------------------------------------------------------
# One executor per step kind; each mirrors local_redistribute's function of the same kind.

Executor = Callable[[torch.Tensor, Step, _Where], Handle[torch.Tensor]]


def _all_gather(t: torch.Tensor, step: Step, where: _Where) -> Handle[torch.Tensor]:
    kinds = {step.src[m] for m in step.mesh_dims}
    (p,) = kinds if len(kinds) == 1 else (None,)
    if not isinstance(p, Shard) or any(not isinstance(step.dst[m], Replicate)
                                       for m in step.mesh_dims):
        raise StepError(f"{step}: all_gather needs one S(d) -> R on every mesh dim of the group")
    members = where.members(step)
    shapes = [box_shape(where.box(step.src, c)) for c in members]
    group = where.mesh.group_for(step.mesh_dims)
    pieces = comm.all_gather(t, shapes, group, async_op=True)
    return pieces.then(lambda ps: torch.cat(ps, dim=p.dim))  # group-rank order is chunk order


def _all_to_all(t: torch.Tensor, step: Step, where: _Where) -> Handle[torch.Tensor]:
    members = where.members(step)
    table = _a2a_table(step, where.mesh_shape, where.global_shape, members)
    me = members.index(where.coord)
    have, target = where.box(step.src), where.box(step.dst)
    # To each peer j: the sub-blocks of j's new piece that this rank provides, packed flat.
    sends = [_pack(t, have, table[j][me]) if j != me else t.new_empty(0)
             for j in range(len(members))]
    sizes = [(sum(box_numel(b) for b in table[me][j]) if j != me else 0,)
             for j in range(len(members))]
    group = where.mesh.group_for(step.mesh_dims)
    received = comm.all_to_all(sends, sizes, group, async_op=True)

    def unpack(bufs: list[torch.Tensor]) -> torch.Tensor:
        new = t.new_empty(box_shape(target))
        for b in table[me][me]:  # own data first, as the reference takes it
            new[_rel(b, target)] = t[_rel(b, have)]
        for j, buf in enumerate(bufs):
            if j != me:
                _unpack(new, target, table[me][j], buf)
        return new

    return received.then(unpack)


def _all_reduce(t: torch.Tensor, step: Step, where: _Where) -> Handle[torch.Tensor]:
    op = one_partial_op(step)
    if any(not isinstance(step.dst[m], Replicate) for m in step.mesh_dims):
        raise StepError(f"{step}: all_reduce turns P(op) into R on every mesh dim of the group")
    _check_avg(op, t, step)
    return comm.all_reduce(t, where.mesh.group_for(step.mesh_dims), op,  # type: ignore[arg-type]
                           async_op=True)


def _reduce_scatter(t: torch.Tensor, step: Step, where: _Where) -> Handle[torch.Tensor]:
    op = one_partial_op(step)
    if any(not isinstance(step.dst[m], Shard) for m in step.mesh_dims):
        raise StepError(f"{step}: reduce_scatter turns P(op) into S(d) on every mesh dim")
    _check_avg(op, t, step)
    have = where.box(step.src)  # the same box on every member: the group dims are Partial
    pieces = []
    for c in where.members(step):
        target = where.box(step.dst, c)
        if not box_contains(have, target):
            raise StepError(f"{step}: rank {c} needs {target} but the group holds only {have}")
        pieces.append(t[_rel(target, have)])
    return comm.reduce_scatter(pieces, where.mesh.group_for(step.mesh_dims),
                               op, async_op=True)  # type: ignore[arg-type]


def _local(t: torch.Tensor, step: Step, where: _Where) -> Handle[torch.Tensor]:
    # Local steps need no other rank, so the reference's own function is run on this rank's
    # piece alone: one definition of the identity fill, rank-0-keeps and scaling.
    out = REFERENCE_STEPS[step.kind]({where.coord: t}, step, where.mesh_shape, where.global_shape)
    return Handle.done(out[where.coord])


EXECUTORS: dict[str, Executor] = {
    "all_gather": _all_gather,
    "all_to_all": _all_to_all,
    "all_reduce": _all_reduce,
    "reduce_scatter": _reduce_scatter,
    "local_slice": _local,
    "local_partial": _local,
    "local_scale": _local,
}


# ---------------------------------------------------------------------------------------------
# all_to_all bookkeeping: who sends which sub-blocks to whom


@lru_cache(maxsize=4096)
def _members(mesh_shape: tuple[int, ...], mesh_dims: tuple[int, ...],
             coord: Coord) -> tuple[Coord, ...]:
    return tuple(next(g for g in mesh_groups(mesh_shape, mesh_dims) if coord in g))


@lru_cache(maxsize=4096)
def _a2a_table(step: Step, mesh_shape: tuple[int, ...], global_shape: tuple[int, ...],
               members: tuple[Coord, ...]) -> tuple[tuple[tuple[Box, ...], ...], ...]:
    """``table[i][j]``: the disjoint boxes of member i's new piece that member j provides.

    As in the reference, each element comes from the first holder in the order
    [i itself] + the others in group-rank order, so it crosses the wire at most once.
    """
    if any(isinstance(step.src[m], Partial) or isinstance(step.dst[m], Partial)
           for m in step.mesh_dims):
        raise StepError(f"{step}: all_to_all moves S/R pieces; the group has Partial mesh dims")
    table = []
    for i, c in enumerate(members):
        missing = [local_box(global_shape, mesh_shape, step.dst, c)]
        row: list[tuple[Box, ...]] = [()] * len(members)
        for j in [i] + [k for k in range(len(members)) if k != i]:
            have = local_box(global_shape, mesh_shape, step.src, members[j])
            row[j] = tuple(x for b in missing if box_numel(x := box_intersect(b, have)))
            missing = [rest for b in missing for rest in _subtract(b, have)]
        if missing:
            raise StepError(f"{step}: rank {c} needs {missing} but its group {list(members)} "
                            f"does not hold it: expected a group spanning every mesh dim that "
                            f"splits those elements")
        table.append(tuple(row))
    return tuple(table)


def _subtract(a: Box, b: Box) -> list[Box]:
    """``a`` minus ``b`` as disjoint non-empty boxes (slab by slab, one tensor dim at a time)."""
    cut = box_intersect(a, b)
    if box_numel(cut) == 0:
        return [a] if box_numel(a) else []
    out = []
    lead = list(a)
    for d, ((a0, a1), (c0, c1)) in enumerate(zip(a, cut)):
        for lo, hi in ((a0, c0), (c1, a1)):
            if hi > lo:
                out.append(tuple(lead[:d] + [(lo, hi)] + list(a[d + 1:])))
        lead[d] = (c0, c1)
    return out


def _rel(box: Box, within: Box) -> tuple[slice, ...]:
    """Index of ``box`` inside a tensor that holds ``within``."""
    return tuple(slice(a - w0, b - w0) for (a, b), (w0, _) in zip(box, within))


def _pack(t: torch.Tensor, have: Box, boxes: tuple[Box, ...]) -> torch.Tensor:
    if not boxes:
        return t.new_empty(0)
    return torch.cat([t[_rel(b, have)].reshape(-1) for b in boxes])


def _unpack(new: torch.Tensor, target: Box, boxes: tuple[Box, ...], buf: torch.Tensor) -> None:
    at = 0
    for b in boxes:
        n = box_numel(b)
        new[_rel(b, target)] = buf[at:at + n].view(box_shape(b))
        at += n


# ---------------------------------------------------------------------------------------------
# Checks shared with the reference's semantics


def _check_avg(op: str, t: torch.Tensor, step: Step) -> None:
    if op == "avg" and not t.is_floating_point():
        raise StepError(f"{step}: Partial(avg) on {t.dtype} would round: expected a float dtype")
