"""DTensorSpec: everything about a DTensor except its local data. Frozen, so a cache key."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import torch

from dtensor.layout import local_shape
from dtensor.placements import Partial, Placement, Replicate, Shard, fmt_placements

if TYPE_CHECKING:
    from dtensor.mesh import DeviceMesh


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, acc = [], 1
    for size in reversed(shape):
        strides.append(acc)
        acc *= max(size, 1)
    return tuple(reversed(strides))


@dataclass(frozen=True, slots=True)
class DTensorSpec:
    mesh: DeviceMesh
    placements: tuple[Placement, ...]
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype

    def local_shape(self, coordinate: Sequence[int] | None = None) -> tuple[int, ...]:
        coord = coordinate if coordinate is not None else self.mesh.get_coordinate()
        if coord is None:
            return (0,)  # not a member: holds nothing (torch's shape for it: [0])
        return local_shape(self.shape, self.mesh.shape, self.placements, coord)

    def with_placements(self, placements: Sequence[Placement]) -> DTensorSpec:
        return DTensorSpec(self.mesh, tuple(placements), self.shape, self.stride, self.dtype)

    @property
    def is_replicated(self) -> bool:
        return all(isinstance(p, Replicate) for p in self.placements)

    @property
    def has_partial(self) -> bool:
        return any(isinstance(p, Partial) for p in self.placements)

    def sharded_dims(self) -> set[int]:
        return {p.dim for p in self.placements if isinstance(p, Shard)}

    def __str__(self) -> str:
        return f"{fmt_placements(self.placements)} {tuple(self.shape)} {self.dtype}"


def replicate_partials(placements: Sequence[Placement]) -> tuple[Placement, ...]:
    """Gradient placements for a forward that held Partial values: each addend's gradient is
    the whole gradient, so Partial becomes Replicate."""
    return tuple(Replicate() if isinstance(p, Partial) else p for p in placements)
