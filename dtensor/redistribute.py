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
from typing import Literal, overload

import torch
import torch.distributed as dist

from dtensor import collective_layout as cl
from dtensor import comm
from dtensor.comm import Handle
from dtensor.layout import Box, box_numel, box_shape, local_box, local_shape
from dtensor.local_redistribute import STEP_FUNCTIONS as REFERENCE_STEPS
from dtensor.local_redistribute import StepError, one_partial_op
from dtensor.mesh import DeviceMesh
from dtensor.placements import Placement, Replicate, fmt_placements
from dtensor.planner import Step, plan

Coord = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class _Where:
    """What a step needs to know about this rank: the mesh, the tensor, its coordinate."""

    mesh: DeviceMesh
    mesh_shape: tuple[int, ...]
    global_shape: tuple[int, ...]
    coord: Coord

    def group(self, step: Step) -> tuple[int, int]:
        """(index of this rank's group for ``step``, this rank's group rank):
        ``collective_layout`` keys what a group moves by the index."""
        return cl.position(self.mesh_shape, step.mesh_dims, self.coord)

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
    dim, shapes = cl.gather_layout(step, where.mesh_shape, where.global_shape,
                                   where.group(step)[0])
    # group-rank order is chunk order
    return comm.all_gather_cat(t, shapes, dim, where.mesh.group_for(step.mesh_dims),
                               async_op=True)


def _all_to_all(t: torch.Tensor, step: Step, where: _Where) -> Handle[torch.Tensor]:
    g, me = where.group(step)
    ex = cl.exchange(step, where.mesh_shape, where.global_shape, g)[me]
    group = where.mesh.group_for(step.mesh_dims)
    if ex.src_dim is not None and ex.dst_dim is not None:
        return _regular_all_to_all(t, ex, ex.src_dim, ex.dst_dim, group)
    # To each peer j: the sub-blocks of j's new piece that this rank provides, packed flat.
    send = torch.cat([_pack(t, ex.have, boxes) for j, boxes in enumerate(ex.sends) if j != me]
                     or [t.new_empty(0)])
    received = comm.all_to_all_single(send, ex.send_sizes, ex.recv_sizes, group, async_op=True)

    def unpack(buf: torch.Tensor) -> torch.Tensor:
        new = t.new_empty(box_shape(ex.target))
        for b in ex.own:  # own data first, as the reference takes it
            new[cl.rel(b, ex.target)] = t[cl.rel(b, ex.have)]
        for j, (boxes, part) in enumerate(zip(ex.receives, buf.split(ex.recv_sizes))):
            if j != me:
                _unpack(new, ex.target, boxes, part)
        return new

    return received.then(unpack)


def _regular_all_to_all(t: torch.Tensor, ex: cl.Exchange, a: int, b: int,
                        group: dist.ProcessGroup) -> Handle[torch.Tensor]:
    """S(a) -> S(b) in one copy each way (Note [one buffer per collective] in comm.py): the
    block for each member travels with dim a first."""
    n = len(ex.cut)
    if all(k == ex.cut[0] for k in ex.cut):
        blocks = t.unflatten(b, (n, ex.cut[0]))  # member axis at b; a moves one on if after
        a_at = a if a < b else a + 1
        order = [b, a_at] + [d for d in range(t.dim() + 1) if d not in (b, a_at)]
        send = blocks.permute(order).reshape(-1)
    else:  # uneven cut: one view per member
        send = torch.cat([blk.movedim(a, 0).reshape(-1) for blk in t.split(ex.cut, b)])
    received = comm.all_to_all_single(send, ex.send_sizes, ex.recv_sizes, group, async_op=True)
    shape = box_shape(ex.target)
    moved = (shape[a],) + shape[:a] + shape[a + 1:]
    return received.then(lambda buf: buf.view(moved).movedim(0, a).contiguous())


def _all_reduce(t: torch.Tensor, step: Step, where: _Where) -> Handle[torch.Tensor]:
    op = one_partial_op(step)
    if any(not isinstance(step.dst[m], Replicate) for m in step.mesh_dims):
        raise StepError(f"{step}: all_reduce turns P(op) into R on every mesh dim of the group")
    _check_avg(op, t, step)
    return comm.all_reduce(t, where.mesh.group_for(step.mesh_dims), op,  # type: ignore[arg-type]
                           async_op=True)


def _reduce_scatter(t: torch.Tensor, step: Step, where: _Where) -> Handle[torch.Tensor]:
    op = one_partial_op(step)
    layout = cl.scatter_layout(step, where.mesh_shape, where.global_shape, where.group(step)[0])
    _check_avg(op, t, step)
    group = where.mesh.group_for(step.mesh_dims)
    if layout.dim is not None:  # the new pieces are consecutive slabs of the old one
        return comm.reduce_scatter_cat(t, layout.sizes, layout.dim, group, op,  # type: ignore
                                       async_op=True)
    return comm.reduce_scatter([t[i] for i in layout.index], group, op,  # type: ignore
                               async_op=True)


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
# Packing an irregular all_to_all's boxes (collective_layout.Exchange says which)


def _pack(t: torch.Tensor, have: Box, boxes: tuple[Box, ...]) -> torch.Tensor:
    if not boxes:
        return t.new_empty(0)
    return torch.cat([t[cl.rel(b, have)].reshape(-1) for b in boxes])


def _unpack(new: torch.Tensor, target: Box, boxes: tuple[Box, ...], buf: torch.Tensor) -> None:
    at = 0
    for b in boxes:
        n = box_numel(b)
        new[cl.rel(b, target)] = buf[at:at + n].view(box_shape(b))
        at += n


# ---------------------------------------------------------------------------------------------
# Checks shared with the reference's semantics


def _check_avg(op: str, t: torch.Tensor, step: Step) -> None:
    if op == "avg" and not t.is_floating_point():
        raise StepError(f"{step}: Partial(avg) on {t.dtype} would round: expected a float dtype")
