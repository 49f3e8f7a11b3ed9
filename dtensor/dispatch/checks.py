"""Cross-rank checks that need communication (opt-in: they cost a collective)."""

from __future__ import annotations

import hashlib
from typing import Sequence

import torch
import torch.distributed as dist

from dtensor.layout import local_shape, mesh_coordinates
from dtensor.mesh import DeviceMesh
from dtensor.placements import Placement, Replicate, Shard, fmt_placements


def check_local_shapes(local: torch.Tensor, mesh: DeviceMesh, placements: Sequence[Placement],
                       shape: Sequence[int] | None) -> tuple[int, ...]:
    """Gather every rank's local shape, dtype, ``requires_grad``, layout order and (where a
    mesh dim replicates) a digest of its values; return the global shape they imply.

    Raises ``ValueError`` naming the ranks when the pieces are inconsistent with one global
    tensor under ``placements``: a piece of the wrong shape, different dtypes or
    ``requires_grad``, pieces laid out in different dim orders, or replicas that differ
    (torch's run_check overwrites them with rank 0's silently).
    """
    group = mesh.group_for(tuple(range(mesh.ndim)))
    seen: list = [None] * mesh.size()
    replicated = [m for m, p in enumerate(placements) if isinstance(p, Replicate)]
    mine = (tuple(local.shape), str(local.dtype), bool(local.requires_grad),
            tuple(local.stride()), _digest(local) if replicated else "")
    dist.all_gather_object(seen, mine, group=group)
    coords = list(mesh_coordinates(mesh.shape))
    by_coord = dict(zip(coords, seen))
    if len({v[2] for v in seen}) > 1:
        detail = ", ".join(f"{c}: {v[2]}" for c, v in by_coord.items())
        raise ValueError(f"from_local(run_check=True): ranks hold pieces with different "
                         f"requires_grad: {detail}")
    orders = _dim_orders(by_coord)
    if len(set(orders.values())) > 1:
        detail = ", ".join(f"{c}: {o}" for c, o in orders.items())
        raise ValueError(f"from_local(run_check=True): ranks lay their pieces out in different "
                         f"dim orders (outermost first, by stride): {detail}")
    _check_replicas(by_coord, replicated)
    dtypes = {v[1] for v in seen}
    if len(dtypes) > 1:
        detail = ", ".join(f"{c}: {v[1]}" for c, v in by_coord.items())
        raise ValueError(f"from_local(run_check=True): ranks hold different dtypes: {detail}")
    ndims = {len(v[0]) for v in seen}
    if len(ndims) > 1:
        detail = ", ".join(f"{c}: {v[0]}" for c, v in by_coord.items())
        raise ValueError(
            f"from_local(run_check=True): ranks hold tensors of different ndim: {detail}")
    global_shape = tuple(shape) if shape is not None else _implied_shape(by_coord, mesh, placements)
    bad = []
    for coord, (got, *_) in by_coord.items():
        want = local_shape(global_shape, mesh.shape, placements, coord)
        if got != want:
            bad.append(f"mesh coordinate {coord}: local shape {got}, expected {want}")
    if bad:
        raise ValueError(
            f"from_local(run_check=True): local pieces do not form a global tensor of shape "
            f"{global_shape} under {fmt_placements(placements)} on mesh {tuple(mesh.shape)}:\n  "
            + "\n  ".join(bad))
    return global_shape


def _dim_orders(by_coord: dict) -> dict[tuple, tuple[int, ...]]:
    """Each rank's dims from outermost to innermost by stride, over the dims longer than 1 on
    every rank (a size-1 or empty dim's stride says nothing about the layout)."""
    shapes = [v[0] for v in by_coord.values()]
    if len({len(s) for s in shapes}) > 1:
        return {}
    dims = [d for d in range(len(shapes[0])) if all(s[d] > 1 for s in shapes)]
    return {c: tuple(sorted(dims, key=lambda d: (-v[3][d], d))) for c, v in by_coord.items()}


def _digest(t: torch.Tensor) -> str:
    data = t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() \
        if t.numel() else b""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _check_replicas(by_coord: dict, replicated: list[int]) -> None:
    """Ranks whose coordinates differ only along Replicate mesh dims hold the same piece."""
    if not replicated:
        return
    groups: dict[tuple, list] = {}
    for coord, v in by_coord.items():
        key = tuple(c for m, c in enumerate(coord) if m not in replicated)
        groups.setdefault(key, []).append((coord, v[4]))
    for members in groups.values():
        if len({d for _, d in members}) > 1:
            first = members[0][1]
            differ = [c for c, d in members if d != first]
            raise ValueError(
                f"from_local(run_check=True): the pieces at mesh coordinates "
                f"{[c for c, _ in members]} must be equal replicas (Replicate on mesh dims "
                f"{replicated}), but {differ} differ from {members[0][0]}: a plain tensor that "
                f"differs across ranks is not replicated")


def _implied_shape(by_coord: dict, mesh: DeviceMesh,
                   placements: Sequence[Placement]) -> tuple[int, ...]:
    origin = (0,) * mesh.ndim
    shape = list(by_coord[origin][0])
    for dim in range(len(shape)):
        mesh_dims = [m for m, p in enumerate(placements) if isinstance(p, Shard) and p.dim == dim]
        if not mesh_dims:
            continue
        # the pieces along those mesh dims, other coordinates at 0, tile the dim
        shape[dim] = sum(v[0][dim] for c, v in by_coord.items()
                         if all(c[m] == 0 for m in range(mesh.ndim) if m not in mesh_dims))
    return tuple(shape)


def measured_sizes(local: torch.Tensor, mesh: DeviceMesh,
                   placements: Sequence[Placement]) -> list[Placement]:
    """``placements`` with each ``Shard(d, sizes="measured")`` given the sizes of dim ``d``
    every rank holds along its mesh dim (one small all_gather over the mesh). Raises where
    the pieces cannot be one explicit rule: another mesh dim cuts ``d`` too, or the sizes
    differ between the groups of that mesh dim."""
    if mesh.get_coordinate() is None:
        raise ValueError("DTensor.from_local: Shard(d, sizes='measured') on a rank outside "
                         "the mesh: nothing to measure; give the sizes")
    out = list(placements)
    group = mesh.group_for(tuple(range(mesh.ndim)))
    seen: list = [None] * mesh.size()
    dist.all_gather_object(seen, (tuple(mesh.get_coordinate()), tuple(local.shape)),
                           group=group)
    for m, p in enumerate(placements):
        if not (isinstance(p, Shard) and p.sizes == "measured"):
            continue
        d = p.dim % max(local.dim(), 1)
        if any(isinstance(q, Shard) and q.dim % max(local.dim(), 1) == d
               for k, q in enumerate(placements) if k != m):
            raise ValueError(f"DTensor.from_local: Shard({p.dim}, sizes='measured') on mesh "
                             f"dim {m}, but another mesh dim cuts dim {p.dim} too: measured "
                             f"sizes need dim {p.dim} cut by one mesh dim; give the sizes")
        by_group: dict[tuple, list[int]] = {}
        for coord, shape in seen:
            rest = coord[:m] + coord[m + 1:]
            by_group.setdefault(rest, [0] * mesh.shape[m])[coord[m]] = shape[d]
        found = set(map(tuple, by_group.values()))
        if len(found) > 1:
            detail = "; ".join(f"{rest}: {sizes}" for rest, sizes in sorted(by_group.items()))
            raise ValueError(f"DTensor.from_local: Shard({p.dim}, sizes='measured') on mesh "
                             f"dim {m} finds different sizes in its groups (other mesh "
                             f"coordinates: sizes): {detail}; one rule needs the same sizes "
                             f"in every group")
        out[m] = Shard(p.dim, found.pop())
    return out
