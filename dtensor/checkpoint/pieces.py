"""Planning of boxes, pure: which box of each tensor a rank holds, whether it is the one
writer of that box, how a box is cut into checksummed chunks, and which chunks a reading
rank needs. No I/O, no communication.

>>> chunk_boxes(((0, 4), (0, 4)), itemsize=4, chunk_bytes=16)
[((0, 2), (0, 2)), ((0, 2), (2, 4)), ((2, 4), (0, 2)), ((2, 4), (2, 4))]
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from dtensor.checkpoint.errors import UnsupportedValueError
from dtensor.layout import (Box, box_intersect, box_numel, local_box, local_shape,
                            mesh_coordinates, pieces)
from dtensor.placements import Partial, Placement, PlacementError, Replicate, Shard, has_block
from dtensor.tensor import DTensor

# Note [chunks]
# A writer cuts its box into chunks of at most CHUNK_BYTES, each stored as one safetensors
# entry with its own crc32. A reader reads whole chunks (a checksum can only be checked over
# the bytes it covers), so the chunk is the unit of read amplification: chunks are cut by
# halving the longest side, roughly square, so a rank that needs a column range of a
# row-sharded piece reads about that range, not every full row. 128 KiB: small against the
# pieces of a resharded model state (benchmarks/bench_checkpoint.py reads 1.01x what the
# target holds; 1 MiB chunks read 2.6x there), large enough that the per-chunk costs (a
# header entry, one preadv, 4 bytes of crc in the metadata) stay well under 1%.
CHUNK_BYTES = 128 << 10


@dataclass(frozen=True)
class TensorView:
    """One rank's view of one tensor of the state."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    placements: tuple[Placement, ...]  # () for a plain tensor
    mesh_shape: tuple[int, ...]  # () for a plain tensor
    coordinate: tuple[int, ...] | None  # on the tensor's mesh; None: holds nothing
    replica_zero: bool  # first of its replicas: coordinate 0 on every mesh dim not sharding it

    @property
    def distributed(self) -> bool:
        return bool(self.mesh_shape)

    def box(self) -> Box:
        """The box of the global tensor this rank holds (the whole tensor if plain)."""
        if not self.distributed:
            return tuple((0, n) for n in self.shape)
        assert self.coordinate is not None
        return local_box(self.shape, self.mesh_shape, self.placements, self.coordinate)

    def boxes(self) -> list[tuple[Box, tuple[slice, ...]]]:
        """The boxes of the global tensor this rank holds, each with where it sits in the
        piece: one box, or for block shards one per run (Note [block shards] in
        dtensor/layout.py; ``[]`` where the piece is empty)."""
        if not self.distributed or not has_block(self.placements):
            box = self.box()
            return [(box, tuple(slice(0, b - a) for a, b in box))]
        assert self.coordinate is not None
        per_dim = []
        for intervals in pieces(self.shape, self.mesh_shape, self.placements, self.coordinate):
            at, spans = 0, []
            for a, b in intervals:
                if b > a:
                    spans.append(((a, b), slice(at, at + b - a)))
                    at += b - a
            per_dim.append(spans)
        return [(tuple(iv for iv, _ in combo), tuple(sl for _, sl in combo))
                for combo in itertools.product(*per_dim)]

    def holds_value(self) -> bool:
        """False where a loaded Partial(sum) piece must be zero (Note [loading into Partial])."""
        assert self.coordinate is not None or not self.distributed
        return all(not (isinstance(p, Partial) and p.reduce_op == "sum") or c == 0
                   for p, c in zip(self.placements, self.coordinate or ()))


# Note [loading into Partial]
# A target placement Partial(op) is filled so that reducing it gives the saved value: for
# sum, coordinate 0 of that mesh dim holds the value and the others zeros; for avg, max and
# min every rank holds the value. Saving reduces Partial first (Note [saving Partial]).


def view_of(t: torch.Tensor, key: str) -> tuple[TensorView, torch.Tensor | None]:
    """(this rank's view, its local piece or None) of a plain tensor, our DTensor, or
    torch.distributed.tensor's DTensor (read through its public attributes)."""
    if isinstance(t, DTensor):
        mesh = t.device_mesh
        coord = mesh.get_coordinate()
        root, root_dims = mesh.root_mesh()
        root_coord = root.get_coordinate()
        sharding = {root_dims[m] for m, p in enumerate(t.placements) if isinstance(p, Shard)}
        first = root_coord is not None and first_replica(root_coord, sharding)
        view = TensorView(tuple(t.shape), t.dtype, tuple(t.placements), tuple(mesh.shape),
                          None if coord is None else tuple(coord), first)
        return view, (t._local_tensor if coord is not None else None)
    if hasattr(t, "device_mesh") and hasattr(t, "placements") and hasattr(t, "_local_tensor"):
        return _torch_view(t, key)
    return TensorView(tuple(t.shape), t.dtype, (), (), (), True), t


def first_replica(coordinate: Sequence[int], sharding: set[int]) -> bool:
    """Note [one writer]: coordinate 0 on every mesh dim that does not shard the tensor.

    >>> [first_replica(c, {1}) for c in [(0, 0), (0, 1), (1, 0)]]
    [True, True, False]
    """
    return all(c == 0 for d, c in enumerate(coordinate) if d not in sharding)


def _torch_view(t: Any, key: str) -> tuple[TensorView, torch.Tensor | None]:
    """torch's DTensor: its placements as ours (same torch.chunk layout, mesh-dim order;
    ``_StridedShard`` as a block shard, ``from_strided_shard``)."""
    placements: list[Placement] = []
    for m, p in enumerate(t.placements):
        if type(p).__name__ == "_StridedShard":
            try:
                placements.append(from_strided_shard(
                    p.dim, int(p.split_factor), tuple(t.shape), tuple(t.device_mesh.shape),
                    tuple(placements) + (Replicate(),) * (t.device_mesh.ndim - m)))
            except PlacementError as e:
                raise UnsupportedValueError(f"{key!r}: torch's {p}: {e}", key=key) from None
        elif p.is_shard():
            placements.append(Shard(p.dim))
        elif p.is_partial():
            placements.append(Partial(p.reduce_op))
        else:
            placements.append(Replicate())
    coord = t.device_mesh.get_coordinate()
    coord = None if coord is None else tuple(coord)
    first = coord is not None and first_replica(
        coord, {m for m, p in enumerate(placements) if isinstance(p, Shard)})
    view = TensorView(tuple(t.shape), t.dtype, tuple(placements), tuple(t.device_mesh.shape),
                      coord, first)
    return view, (t._local_tensor if coord is not None else None)


def from_strided_shard(dim: int, split_factor: int, shape: tuple[int, ...],
                       mesh_shape: tuple[int, ...], before: tuple[Placement, ...]) -> Shard:
    """torch's ``_StridedShard(dim, split_factor)`` on the mesh dim after ``before`` (the
    earlier mesh dims' placements, Replicate from there on) as our block shard: torch chunks
    the extent that mesh dim splits into ``split_factor`` pieces and each of those across the
    mesh dim, which is ``Shard(dim, block=extent // split_factor)`` where the pieces are equal
    (Note [block shards] in dtensor/layout.py).

    >>> from_strided_shard(0, 2, (8, 4), (2, 2), (Replicate(), Replicate()))
    Shard(dim=0, block=4)
    """
    extents = {local_shape(shape, mesh_shape, before, c)[dim] for c in mesh_coordinates(mesh_shape)}
    extent = extents.pop()
    if extents or split_factor < 1 or extent % split_factor or extent // split_factor < 2:
        raise PlacementError(f"split_factor {split_factor} of dim {dim} (extent {extent} on "
                             f"some rank) has no block shard: expected every rank's extent "
                             f"to split into {split_factor} equal runs of at least 2")
    block = extent // split_factor
    return Shard(dim) if block == extent else Shard(dim, block=block)


def chunk_shape(shape: tuple[int, ...], itemsize: int, chunk_bytes: int) -> tuple[int, ...]:
    """Note [chunks]: halve the longest side until a chunk fits in ``chunk_bytes``."""
    c = list(shape)
    while c and math.prod(c) * itemsize > chunk_bytes and max(c) > 1:
        i = c.index(max(c))
        c[i] = -(-c[i] // 2)
    return tuple(c)


def chunk_boxes(box: Box, itemsize: int, chunk_bytes: int) -> list[Box]:
    """The chunks of a non-empty ``box``, row-major."""
    return grid(box, chunk_shape(tuple(b - a for a, b in box), itemsize, chunk_bytes))


def grid(box: Box, chunk: Sequence[int]) -> list[Box]:
    """``box`` cut into chunks of shape ``chunk`` (smaller at the far ends), row-major: the
    metadata stores a piece's box and chunk shape, and the chunks are derived again here.

    >>> grid(((0, 3),), (2,))
    [((0, 2),), ((2, 3),)]
    """
    ranges = [[(s, min(s + c, b)) for s in range(a, b, c)] for (a, b), c in zip(box, chunk)]
    return [tuple(r) for r in itertools.product(*ranges)]


def grid_size(box: Box, chunk: Sequence[int]) -> int:
    """How many chunks ``grid(box, chunk)`` has, without listing them."""
    return math.prod(-(-(b - a) // c) for (a, b), c in zip(box, chunk))


def chunks_meeting(box: Box, chunk: Sequence[int], other: Box) -> list[tuple[int, Box]]:
    """``(i, grid(box, chunk)[i])`` for each chunk of ``box`` that intersects ``other``,
    row-major: worked out per dimension, so the cost is the chunks returned, not the grid
    (a load asks this for every piece of every tensor; Note [chunks]). ``chunk`` > 0.

    >>> chunks_meeting(((0, 4), (0, 4)), (2, 2), ((1, 2), (2, 4)))
    [(1, ((0, 2), (2, 4)))]
    """
    ranges, counts = [], []
    for (a, b), c, (lo, hi) in zip(box, chunk, other):
        lo, hi = max(a, lo), min(b, hi)
        if lo >= hi:
            return []
        ranges.append(range((lo - a) // c, (hi - 1 - a) // c + 1))
        counts.append(-(-(b - a) // c))
    out = []
    for index in itertools.product(*ranges):
        flat = 0
        for i, n in zip(index, counts):
            flat = flat * n + i
        out.append((flat, tuple((a + i * c, min(a + (i + 1) * c, b))
                                for i, (a, b), c in zip(index, box, chunk))))
    return out


def chunk_name(key: str, chunk: Box) -> str:
    """The chunk's tensor name in its safetensors file: the key and the chunk's start."""
    return f"{key}@{','.join(str(a) for a, _ in chunk)}"


def overlaps(a: Box, b: Box) -> bool:
    return box_numel(box_intersect(a, b)) > 0


def relative(inner: Box, outer: Box) -> tuple[slice, ...]:
    """Slices of ``inner`` within a tensor holding ``outer``."""
    return tuple(slice(i0 - o0, i1 - o0) for (i0, i1), (o0, _) in zip(inner, outer))
