"""Cross-rank checks that need communication (opt-in: they cost a collective)."""

from __future__ import annotations

from typing import Sequence

import torch
import torch.distributed as dist

from dtensor.layout import local_shape, mesh_coordinates
from dtensor.mesh import DeviceMesh
from dtensor.placements import Placement, Shard, fmt_placements


def check_local_shapes(local: torch.Tensor, mesh: DeviceMesh, placements: Sequence[Placement],
                       shape: Sequence[int] | None) -> tuple[int, ...]:
    """Gather every rank's local shape and dtype; return the global shape they imply.

    Raises ``ValueError`` naming each rank whose piece does not fit (its shape, the expected
    shape) when the pieces are inconsistent with one global tensor under ``placements``.
    """
    group = mesh.group_for(tuple(range(mesh.ndim)))
    seen: list = [None] * mesh.size()
    dist.all_gather_object(seen, (tuple(local.shape), str(local.dtype)), group=group)
    coords = list(mesh_coordinates(mesh.shape))
    by_coord = dict(zip(coords, seen))
    dtypes = {d for _, d in seen}
    if len(dtypes) > 1:
        detail = ", ".join(f"{c}: {d}" for c, (_, d) in by_coord.items())
        raise ValueError(f"from_local(run_check=True): ranks hold different dtypes: {detail}")
    ndims = {len(s) for s, _ in seen}
    if len(ndims) > 1:
        detail = ", ".join(f"{c}: {s}" for c, (s, _) in by_coord.items())
        raise ValueError(
            f"from_local(run_check=True): ranks hold tensors of different ndim: {detail}")
    global_shape = tuple(shape) if shape is not None else _implied_shape(by_coord, mesh, placements)
    bad = []
    for coord, (got, _) in by_coord.items():
        want = local_shape(global_shape, mesh.shape, placements, coord)
        if got != want:
            bad.append(f"mesh coordinate {coord}: local shape {got}, expected {want}")
    if bad:
        raise ValueError(
            f"from_local(run_check=True): local pieces do not form a global tensor of shape "
            f"{global_shape} under {fmt_placements(placements)} on mesh {tuple(mesh.shape)}:\n  "
            + "\n  ".join(bad))
    return global_shape


def _implied_shape(by_coord: dict, mesh: DeviceMesh,
                   placements: Sequence[Placement]) -> tuple[int, ...]:
    origin = (0,) * mesh.ndim
    shape = list(by_coord[origin][0])
    for dim in range(len(shape)):
        mesh_dims = [m for m, p in enumerate(placements) if isinstance(p, Shard) and p.dim == dim]
        if not mesh_dims:
            continue
        # the pieces along those mesh dims, other coordinates at 0, tile the dim
        shape[dim] = sum(s[dim] for c, (s, _) in by_coord.items()
                         if all(c[m] == 0 for m in range(mesh.ndim) if m not in mesh_dims))
    return tuple(shape)
