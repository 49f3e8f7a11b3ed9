"""TensorSpec and DTensorSpec (a mesh and a TensorSpec): everything about a DTensor except its
local data. Frozen, so cache keys."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

import torch

from dtensor.layout import local_shape
from dtensor.symbolic import hash_or_none
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
class TensorSpec:
    """A global tensor's shape, strides, dtype and placements: what a sharding rule sees of
    one tensor argument, and (with a mesh) what a DTensor is. Its hash is computed once:
    specs are the cache keys of every dispatch."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    placements: tuple[Placement, ...]
    _hash: int | None = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash_or_none(self.shape, self.stride, self.dtype,
                                                       self.placements))

    def __hash__(self) -> int:
        if self._hash is None:  # Note [symbolic sizes] in dtensor.symbolic
            raise TypeError(f"a TensorSpec of symbolic sizes {self.shape} has no hash")
        return self._hash

    @property
    def symbolic(self) -> bool:
        """Its sizes hold a SymInt (a trace with dynamic shapes): no cache can key on it."""
        return self._hash is None

    @property
    def ndim(self) -> int:
        return len(self.shape)


@dataclass(frozen=True, slots=True, init=False)
class DTensorSpec:
    """A DTensor without its local data: a mesh and the ``TensorSpec`` rules see (one spec
    type: a DTensor's cache key is ``spec.tensor``, never a second copy of its fields)."""

    mesh: DeviceMesh
    tensor: TensorSpec
    # ``tensor``'s fields again, as slots: read on every op, a slot costs no Python call where
    # a property costs one; not part of the value (``tensor`` is)
    placements: tuple[Placement, ...] = field(compare=False, hash=False, repr=False)
    shape: tuple[int, ...] = field(compare=False, hash=False, repr=False)
    stride: tuple[int, ...] = field(compare=False, hash=False, repr=False)
    dtype: torch.dtype = field(compare=False, hash=False, repr=False)
    # target placements -> (spec there, this rank's compiled plan): redistribute.program_to's
    # cache (Note [compiled plans] in dtensor/redistribute/execute.py); not part of the value
    moves: dict = field(compare=False, hash=False, repr=False)

    def __init__(self, mesh: DeviceMesh, placements: Sequence[Placement],
                 shape: Sequence[int], stride: Sequence[int], dtype: torch.dtype) -> None:
        t = TensorSpec(tuple(shape), tuple(stride), dtype, tuple(placements))
        setter = object.__setattr__
        setter(self, "mesh", mesh)
        setter(self, "tensor", t)
        setter(self, "placements", t.placements)
        setter(self, "shape", t.shape)
        setter(self, "stride", t.stride)
        setter(self, "dtype", dtype)
        setter(self, "moves", {})

    def __reduce__(self) -> tuple:
        # copies and pickles carry the value, not the cache (it holds process groups)
        t = self.tensor
        return (DTensorSpec, (self.mesh, t.placements, t.shape, t.stride, t.dtype))

    @property
    def symbolic(self) -> bool:
        return self.tensor.symbolic

    def local_shape(self, coordinate: Sequence[int] | None = None) -> tuple[int, ...]:
        coord = coordinate if coordinate is not None else self.mesh.get_coordinate()
        if coord is None:
            return (0,)  # not a member: holds nothing (torch's shape for it: [0])
        return local_shape(self.shape, self.mesh.shape, self.placements, coord)

    def with_placements(self, placements: Sequence[Placement]) -> DTensorSpec:
        t = self.tensor
        return DTensorSpec(self.mesh, placements, t.shape, t.stride, t.dtype)

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
