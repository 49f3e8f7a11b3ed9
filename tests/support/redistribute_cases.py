"""Redistribution cases with the reference's answer (tests/redistribute/): every valid pair
of placement lists over a mesh, on a few shapes, with what each rank must end up holding
(``dtensor.redistribute.reference``) and receive (``planner.step_received``)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from dtensor.layout import Coord, mesh_coordinates
from dtensor.placements import (Partial, Placement, PlacementError, Replicate, Shard,
                                fmt_placements, normalize_placements)
from dtensor.redistribute.planner import plan, step_received
from dtensor.redistribute.reference import redistribute_locals, shard_full

PER_DIM = (Shard(0), Shard(1), Replicate(), Partial("sum"), Partial("max"))
SHAPES = ((8, 4), (7, 5), (3, 1))


def placement_lists(mesh_shape: Sequence[int], per_dim: Sequence[Placement] = PER_DIM,
                    ndim: int = 2) -> list[tuple[Placement, ...]]:
    """Every valid placement list (mixing P(sum) with P(max) is not one)."""
    out = []
    for pl in itertools.product(per_dim, repeat=len(mesh_shape)):
        try:
            out.append(normalize_placements(pl, ndim, len(mesh_shape)))
        except PlacementError:
            pass
    return out


@dataclass(frozen=True)
class Case:
    """One redistribution with the reference's answer for every rank."""

    shape: tuple[int, ...]
    src: tuple[Placement, ...]
    dst: tuple[Placement, ...]
    locals: dict[Coord, torch.Tensor]
    expected: dict[Coord, torch.Tensor]
    received: dict[Coord, int]  # bytes by coordinate, from the planner
    ops: tuple[str, ...]  # the collective step kinds, in order

    def __repr__(self) -> str:  # the id run_subtests prints for a failure
        return f"{fmt_placements(self.src)}->{fmt_placements(self.dst)}@{self.shape}"


def make_cases(mesh_shape: tuple[int, ...], shapes=SHAPES, per_dim=PER_DIM,
               dtype=torch.float32) -> list[Case]:
    cases = []
    for shape in shapes:
        # integer-valued, negative too (max/min identities matter), exact in every dtype used
        full = (torch.arange(shape[0] * shape[1]).reshape(shape) * 5 % 23 - 9).to(dtype)
        lists = placement_lists(mesh_shape, per_dim)
        for src in lists:
            locs = shard_full(full, mesh_shape, src, seed=len(cases))
            for dst in lists:
                steps = plan(src, dst, mesh_shape, shape, itemsize=full.element_size())
                received = {c: sum(step_received(s, mesh_shape, shape, full.element_size())[c]
                                   for s in steps) for c in mesh_coordinates(mesh_shape)}
                cases.append(Case(shape, src, dst, locs,
                                  redistribute_locals(locs, steps, mesh_shape, shape), received,
                                  tuple(s.kind for s in steps if s.is_collective)))
    return cases
