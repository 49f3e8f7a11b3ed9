"""Ops on a rank outside a DTensor's mesh.

Note [ranks outside the mesh]
A mesh may hold some of the world's ranks only (``DeviceMesh("cpu", [0, 3])`` in a world of
4). A rank outside it still runs the SPMD program, so it holds DTensors of that mesh, but it
holds no piece of them (its local tensor is empty, ``torch.Size([0])`` as in torch; a 0-d
output is a 0-d zero) and takes
part in no collective of the mesh: if it did, the members would wait for it or it for them.
Every op it runs on such DTensors computes nothing and returns empty pieces carrying the
global metadata (shape, dtype, placements) that the members' outputs have, so that the
program's later shape logic agrees on every rank.

An op whose result is a Python value (``torch.equal``, ``item()``) or whose output shape
depends on the data (``nonzero``) has nothing such a rank can return without the members'
data: it computes what metadata alone decides (``is_same_size``) and otherwise raises
``OutsideMeshError`` naming the op and the mesh. torch answers ``equal`` there through an
all-reduce over the whole world that every rank joins, and returns None for the other
scalars (``item()`` then fails with "Cannot cast None to number").
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree

from dtensor.mesh import MeshError
from dtensor.ops.propagate import decide
from dtensor.ops.registry import REGISTRY, OpSpec, TensorSpec
from dtensor.placements import Replicate
from dtensor.spec import DTensorSpec


class OutsideMeshError(MeshError):
    """An op a rank outside the mesh cannot answer: its result depends on the data only the
    mesh's ranks hold (Note [ranks outside the mesh])."""


def run_outside(DTensor: type, func: Any, args: tuple, kwargs: dict, dargs: tuple,
                dkwargs: tuple, mesh: Any, sources: tuple) -> Any:
    """Note [ranks outside the mesh]: the op's outputs as empty pieces (of class ``DTensor``),
    nothing computed. ``sources[j]`` is (position, name) of the argument output j writes and
    returns, or None."""
    op = OpSpec(func, dargs, dkwargs, tuple(mesh.spec.shape))
    try:
        out = meta_call(op)
    except (NotImplementedError, RuntimeError) as e:
        if "meta" not in str(e).lower():  # the op refusing its arguments, as on any rank
            raise
        raise OutsideMeshError(
            f"{func}: its result depends on the data of {mesh!r}, and this rank is outside "
            "that mesh and holds none of it: run it on the mesh's ranks only "
            "(`if mesh.get_coordinate() is not None:`)") from e
    metas = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
    if func in REGISTRY:
        placements = list(decide(op).chosen.outputs)
    else:
        placements = [(Replicate(),) * mesh.ndim] * len(metas)
    device = torch.device(mesh.device_type)
    written = {j: (args[src[0]] if src[0] < len(args) else kwargs.get(src[1]))
               for j, src in enumerate(sources) if src is not None}
    made = iter(range(len(metas)))

    def wrap(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        i = next(made)
        if i in written:
            return written[i]
        spec = DTensorSpec(mesh, tuple(placements[i]), tuple(t.shape), tuple(t.stride()),
                           t.dtype)
        # a 0-d output stays 0-d (torch's shape for it too); others hold nothing
        piece = (torch.zeros((), dtype=t.dtype, device=device) if t.dim() == 0
                 else torch.empty(0, dtype=t.dtype, device=device))
        return DTensor(piece, spec, requires_grad=False)

    return pytree.tree_map(wrap, out)


def meta_call(op: OpSpec) -> Any:
    """The op run on meta tensors of its global shapes: its outputs' metadata."""

    def meta(x: Any) -> Any:
        if isinstance(x, TensorSpec):
            return torch.empty_strided(x.shape, x.stride, dtype=x.dtype, device="meta")
        if isinstance(x, tuple):
            return [meta(v) for v in x]
        return x

    kwargs = {k: ("meta" if k == "device" and v is not None else meta(v)) for k, v in op.kwargs}
    return op.op(*[meta(a) for a in op.args], **kwargs)
