"""Redistribute one rank's local tensor over a real mesh: plan, compile, then run.

``redistribute_local_tensor`` asks ``planner.plan`` for the steps and compiles each, through
``COMPILERS`` keyed by step kind, into a function of the tensor alone (Note [compiled plans]).
Each compiler mirrors its counterpart in ``reference`` (the reference over all ranks'
locals) for one rank: the pieces come from ``dtensor.layout`` and nowhere else, and
collectives go through ``dtensor.comm``'s prepared collectives on the group
``mesh.group_for(step.mesh_dims)``, whose group ranks are ``layout.mesh_groups`` order. Local
steps *are* the reference's functions, applied to this rank alone.

Ranks not on the mesh hold no piece: they get their input back unchanged (like torch, whose
DTensor gives such ranks an empty local tensor and skips them).

Note [compiled plans]
A redistribute repeats: the same (placements, target, shape) on the same mesh, step after
step. The first call plans it and compiles it for this rank: each step's group, the shapes
it moves, its buffers' layout and its collective's checks are worked out once
(``comm.prepare_*``), and the ``Program`` is kept on the mesh (a mesh object is one rank's,
and it holds that rank's groups). Every later call checks the piece's shape and runs the
steps: no planning, no layout lookups, no re-validation, no dist.* layer (Note [prepared
collectives] in dtensor/comm/collectives.py). ``program_to`` keeps one more cache on the
source spec, which also holds the target spec: a DTensor's redistribute looks up one dict.

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

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

import torch
import torch.distributed as dist

from dtensor.symbolic import sizes
from dtensor.redistribute import collective_layout as cl
from dtensor.redistribute import regions
from dtensor import comm
from dtensor.comm import AsyncCollectiveTensor, Handle
from dtensor.comm.functional import tracing
from dtensor.layout import Coord, Box, box_shape, local_box, local_shape
from dtensor.redistribute.reference import STEP_FUNCTIONS as REFERENCE_STEPS
from dtensor.redistribute.reference import StepError, one_partial_op
from dtensor.mesh import DeviceMesh
from dtensor.placements import (Placement, Replicate, fmt_placements, has_block,
                                 normalize_placements)
from dtensor.redistribute.planner import Step, plan
from dtensor.spec import DTensorSpec



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
    return program(mesh, src_placements, dst_placements, global_shape)(local, async_op)


def program(mesh: DeviceMesh, src_placements: Sequence[Placement | int],
            dst_placements: Sequence[Placement | int], global_shape: Sequence[int]) -> Program:
    """This rank's compiled plan from ``src_placements`` to ``dst_placements`` (Note [compiled
    plans]), made on first use and kept on ``mesh``.

    >>> import torch, simpg
    >>> from dtensor import init_device_mesh, Shard, Replicate
    >>> def body():
    ...     mesh = init_device_mesh("cpu", (2,))
    ...     gather = program(mesh, [Shard(0)], [Replicate()], (4,))
    ...     return gather(torch.ones(2)).tolist(), gather is program(mesh, [Shard(0)],
    ...                                                           [Replicate()], (4,))
    >>> simpg.run(body, 2)[0]
    ([1.0, 1.0, 1.0, 1.0], True)
    """
    shape = global_shape if type(global_shape) is tuple else tuple(global_shape)
    key = (tuple(src_placements), tuple(dst_placements), shape)
    programs = mesh.__dict__.get("_redistribute_programs")  # Note [per-mesh caches] in mesh.py
    if programs is None:
        programs = mesh.__dict__["_redistribute_programs"] = {}
    try:
        found = programs.get(key)
    except TypeError:  # an unhashable entry: compiled each time, and the error said there
        return _compile(mesh, key[0], key[1], sizes(shape))
    if found is None:
        if len(programs) >= _MAX_PROGRAMS:  # a run of ever new shapes: start over
            programs.clear()
        found = programs[key] = _compile(mesh, key[0], key[1], sizes(shape))
    return found


_MAX_PROGRAMS = 4096  # per mesh; a program is a few closures


def program_to(spec: DTensorSpec, placements: tuple[Placement, ...]
               ) -> tuple[DTensorSpec, Program]:
    """(the spec of ``spec``'s tensor under ``placements``, this rank's program there), kept
    on ``spec`` (Note [compiled plans]). ``placements`` must be normalized already."""
    moves = spec.moves
    found = moves.get(placements)
    if found is None:
        found = moves[placements] = (spec.with_placements(placements),
                                     program(spec.mesh, spec.placements, placements,
                                             spec.shape))
    return found


class Program:
    """One rank's compiled redistribute: called with its piece (and ``async_op``), it runs
    each step's compiled function in turn (Note [compiled plans])."""

    __slots__ = ("steps", "runners", "want", "mesh", "global_shape")

    def __init__(self, steps: tuple[Step, ...], runners: tuple[Runner, ...],
                 want: tuple[int, ...] | None, mesh: DeviceMesh,
                 global_shape: tuple[int, ...]) -> None:
        self.steps, self.runners, self.want = steps, runners, want
        self.mesh, self.global_shape = mesh, global_shape

    def __call__(self, local: torch.Tensor, async_op: bool = False) -> Any:
        runners = self.runners
        if type(local) is AsyncCollectiveTensor:  # Note [async redistribute]: no data to send
            local = local.wait()
        if not runners:  # nothing to move, or not on the mesh
            return Handle.done(local) if async_op else local
        if local.shape != self.want:
            self._wrong_shape(local)
        cur = runners[0](local)
        for run in runners[1:]:
            cur = run(cur.wait())
        return cur if async_op else cur.wait()

    def _wrong_shape(self, local: torch.Tensor) -> None:
        steps, mesh = self.steps, self.mesh
        raise ValueError(
            f"redistribute {fmt_placements(steps[0].src)}->{fmt_placements(steps[-1].dst)} "
            f"of {self.global_shape} on {mesh!r}: rank {dist.get_rank()} at "
            f"{tuple(mesh.get_coordinate() or ())} holds shape {tuple(local.shape)}, "
            f"expected {self.want}")

    def __repr__(self) -> str:
        return f"Program({', '.join(map(str, self.steps)) or 'nothing to move'})"


def _compile(mesh: DeviceMesh, src: tuple, dst: tuple, global_shape: tuple[int, ...]
             ) -> Program:
    coord = mesh.get_coordinate()
    if coord is None:  # not on the mesh: nothing to plan
        return Program((), (), None, mesh, global_shape)
    steps = plan(src, dst, mesh.shape, global_shape)  # the same at every itemsize
    if not steps:
        return Program((), (), None, mesh, global_shape)
    coord = tuple(coord)
    runners = tuple(_in_view(step, mesh, global_shape, coord) for step in steps)
    held = normalize_placements(src, len(global_shape), mesh.ndim)
    want = local_shape(global_shape, mesh.shape, held, coord)
    return Program(steps, runners, want, mesh, global_shape)


def _in_view(step: Step, mesh: DeviceMesh, global_shape: tuple[int, ...], coord: Coord
             ) -> Runner:
    """The step's runner on pieces in the tensor's own view: a step planned in a refined view
    (Note [block shards] in dtensor/layout.py) reshapes the piece into it and back, which
    moves no element (a piece there is the same elements in the same order)."""
    shape = step.shape(global_shape)
    run = COMPILERS[step.kind](step, _Where(mesh, mesh.shape, shape, coord))
    if step.view is None:
        return run
    groups = step.view
    refined = local_shape(shape, mesh.shape, step.src, coord)

    def merged(t: torch.Tensor) -> torch.Tensor:
        out, i = [], 0
        for g in groups:
            out.append(math.prod(t.shape[i:i + len(g)]))
            i += len(g)
        return t.reshape(out)

    return lambda t: run(t.reshape(refined)).then(merged)


# ---------------------------------------------------------------------------------------------
# One compiler per step kind; each mirrors reference.py's function of the same kind and
# returns the step as a function of this rank's piece.

Runner = Callable[[torch.Tensor], Handle[torch.Tensor]]
Compiler = Callable[[Step, _Where], Runner]


def _all_gather(step: Step, where: _Where) -> Runner:
    dim, shapes = cl.gather_layout(step, where.mesh_shape, where.global_shape,
                                   where.group(step)[0])
    # group-rank order is chunk order
    return comm.prepare_all_gather_cat(shapes, dim, where.mesh.group_for(step.mesh_dims))


# Note [every rank's backward collective]
# Compiled, a collective's backward is the traced collective's own autograd formula, and
# AOTAutograd traces it only on a path from the loss to an input that requires grad. A rank
# that receives nothing in an all_to_all (it keeps its whole new piece) drops the empty
# buffer, and a rank that sends nothing sends a fresh empty tensor: on either, the path is
# cut and its compiled backward skips the reverse all_to_all the other ranks issue, in which
# it must send the gradient of what it received and get that of what it gave away. That is a
# mismatch on simpg, a hang or a wrong gradient on NCCL (an S(0)[3,5,0,2] -> S(0) move under
# inductor did it). So the send buffer is always a slice of the piece, and while tracing an
# empty receive buffer joins the result (plus its sum, 0: only -0.0 turns into 0.0), so
# every rank's backward issues the reverse exchange. Eager needs none of it: Redistribute's
# backward runs the reverse plan on every rank.
def _all_to_all(step: Step, where: _Where) -> Runner:
    g, me = where.group(step)
    if has_block(step.src + step.dst):  # Note [moves between block layouts]
        return _piece_all_to_all(step, where, g, me)
    ex = cl.exchange(step, where.mesh_shape, where.global_shape, g)[me]
    issue = comm.prepare_all_to_all_single(ex.send_sizes, ex.recv_sizes,
                                           where.mesh.group_for(step.mesh_dims))
    if ex.src_dim is not None and ex.dst_dim is not None:
        return _regular_all_to_all(ex, ex.src_dim, ex.dst_dim, issue)
    target = box_shape(ex.target)
    own = tuple((cl.rel(b, ex.target), cl.rel(b, ex.have)) for b in ex.own)
    sends = [[cl.rel(b, ex.have) for b in boxes] for j, boxes in enumerate(ex.sends) if j != me]
    receives = [(j, [(cl.rel(b, ex.target), box_shape(b)) for b in boxes])
                for j, boxes in enumerate(ex.receives) if j != me]
    recv_sizes = list(ex.recv_sizes)

    def run(t: torch.Tensor) -> Handle[torch.Tensor]:
        # To each peer j: the sub-blocks of j's new piece that this rank provides, packed flat.
        parts = [t[index].reshape(-1) for indices in sends for index in indices]
        if parts:
            send = torch.cat(parts)
        else:  # nothing to send: traced, still a slice of t (Note [every rank's backward
            # collective]); eager, no copy of t for it
            send = t.reshape(-1)[:0] if tracing(t) else t.new_empty(0)
        received = issue(send)

        def unpack(buf: torch.Tensor) -> torch.Tensor:
            new = t.new_empty(target)
            for into, outof in own:  # own data first, as the reference takes it
                new[into] = t[outof]
            pieces = buf.split(recv_sizes)
            for j, blocks in receives:
                at, part = 0, pieces[j]
                for into, shape in blocks:
                    n = math.prod(shape)
                    new[into] = part[at:at + n].view(shape)
                    at += n
            if buf.numel() == 0 and tracing(buf):  # Note [every rank's backward collective]
                new = new + buf.sum()  # the sum of nothing: 0
            return new

        return received.then(unpack)

    return run


def _piece_all_to_all(step: Step, where: _Where, g: int, me: int) -> Runner:
    """``_all_to_all`` where the pieces are products of interval sets: the same exchange, its
    parts read and written by ``regions.index`` (Note [moves between block layouts])."""
    ex = cl.piece_exchange(step, where.mesh_shape, where.global_shape, g)[me]
    issue = comm.prepare_all_to_all_single(ex.send_sizes, ex.recv_sizes,
                                           where.mesh.group_for(step.mesh_dims))
    recv_sizes = list(ex.recv_sizes)

    def run(t: torch.Tensor) -> Handle[torch.Tensor]:
        parts = [t[_on(i, t)].reshape(-1) for indices in ex.sends for i in indices]
        if parts:
            send = torch.cat(parts)
        else:  # Note [every rank's backward collective]
            send = t.reshape(-1)[:0] if tracing(t) else t.new_empty(0)

        def unpack(buf: torch.Tensor) -> torch.Tensor:
            new = t.new_empty(ex.target)
            for into, outof in ex.own:
                new[_on(into, t)] = t[_on(outof, t)]
            for j, blocks in enumerate(ex.receives):
                at, part = 0, buf.split(recv_sizes)[j]
                for into, shape in blocks:
                    n = math.prod(shape)
                    new[_on(into, t)] = part[at:at + n].view(shape)
                    at += n
            if buf.numel() == 0 and tracing(buf):  # Note [every rank's backward collective]
                new = new + buf.sum()
            return new

        return issue(send).then(unpack)

    return run


def _on(index: tuple, t: torch.Tensor) -> tuple:
    """``index`` (``regions.index``: slices, or runs made index tensors on ``t``'s device)."""
    if isinstance(index, regions.IndexRuns):
        return regions.index_tensors(index, t.device)
    return index


def _regular_all_to_all(ex: cl.Exchange, a: int, b: int, issue: comm.Prepared) -> Runner:
    """S(a) -> S(b) in one copy each way (Note [one buffer per collective] in
    dtensor/comm/collectives.py): the block for each member travels with dim a first."""
    n, cut = len(ex.cut), list(ex.cut)
    shape = box_shape(ex.target)
    moved = (shape[a],) + shape[:a] + shape[a + 1:]
    even = all(k == cut[0] for k in cut)
    a_at = a if a < b else a + 1  # where a is once the member axis sits at b

    def run(t: torch.Tensor) -> Handle[torch.Tensor]:
        if even:
            blocks = t.unflatten(b, (n, cut[0]))
            order = [b, a_at] + [d for d in range(t.dim() + 1) if d not in (b, a_at)]
            send = blocks.permute(order).reshape(-1)
        else:  # uneven cut: one view per member
            send = torch.cat([blk.movedim(a, 0).reshape(-1) for blk in t.split(cut, b)])
        return issue(send).then(lambda buf: buf.view(moved).movedim(0, a).contiguous())

    return run


def _all_reduce(step: Step, where: _Where) -> Runner:
    op = one_partial_op(step)
    if any(not isinstance(step.dst[m], Replicate) for m in step.mesh_dims):
        raise StepError(f"{step}: all_reduce turns P(op) into R on every mesh dim of the group")
    reduce = comm.prepare_all_reduce(where.mesh.group_for(step.mesh_dims), op)  # type: ignore
    return _checking_avg(op, step, reduce)


def _reduce_scatter(step: Step, where: _Where) -> Runner:
    op = one_partial_op(step)
    layout = cl.scatter_layout(step, where.mesh_shape, where.global_shape, where.group(step)[0])
    group = where.mesh.group_for(step.mesh_dims)
    if layout.dim is not None:  # the new pieces are consecutive slabs of the old one
        have = local_shape(where.global_shape, where.mesh_shape, step.src, where.coord)
        scatter = comm.prepare_reduce_scatter_cat(layout.sizes, layout.dim, have, group,
                                                  op)  # type: ignore[arg-type]
        return _checking_avg(op, step, scatter)

    def cut(t: torch.Tensor) -> Handle[torch.Tensor]:
        return comm.reduce_scatter([t[i] for i in layout.index], group, op,  # type: ignore
                                   async_op=True)

    return _checking_avg(op, step, cut)


def _local(step: Step, where: _Where) -> Runner:
    # Local steps need no other rank, so the reference's own function is run on this rank's
    # piece alone: one definition of the identity fill, rank-0-keeps and scaling.
    fn, coord = REFERENCE_STEPS[step.kind], where.coord
    mesh_shape, global_shape = where.mesh_shape, where.global_shape

    def run(t: torch.Tensor) -> Handle[torch.Tensor]:
        return Handle.done(fn({coord: t}, step, mesh_shape, global_shape)[coord])

    return run


COMPILERS: dict[str, Compiler] = {
    "all_gather": _all_gather,
    "all_to_all": _all_to_all,
    "all_reduce": _all_reduce,
    "reduce_scatter": _reduce_scatter,
    "local_slice": _local,
    "local_partial": _local,
    "local_scale": _local,
}


# ---------------------------------------------------------------------------------------------
# Checks shared with the reference's semantics


def _checking_avg(op: str, step: Step, run: Runner) -> Runner:
    """``run``, refusing Partial(avg) on a tensor that is not floating point."""
    if op != "avg":
        return run

    def checked(t: torch.Tensor) -> Handle[torch.Tensor]:
        if not t.is_floating_point():
            raise StepError(f"{step}: Partial(avg) on {t.dtype} would round: expected a float "
                            f"dtype")
        return run(t)

    return checked
