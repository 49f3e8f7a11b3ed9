"""Note [sharded random ops] in dtensor/decompositions/random.py: every random op on sharded
DTensors gives, piece by piece, one device's draw for the same seed, leaves the generator
where one device leaves it, keeps the layout, and never takes the gathering fallback."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F

import dtensor
import simpg
from dtensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from tests.support.mesh_world import run_on_mesh as _world

aten = torch.ops.aten
FULL = torch.randn(7, 5, generator=torch.Generator().manual_seed(1))  # uneven over 2 and 4

FILLS: dict[str, Callable[[Any], Any]] = {
    "uniform_": lambda t: t.uniform_(-1, 2),
    "normal_": lambda t: t.normal_(1.0, 3.0),
    "bernoulli_(float)": lambda t: t.bernoulli_(0.3),
    "bernoulli_(tensor)": lambda t: t.bernoulli_(t.abs().clamp(0, 1)),
    "exponential_": lambda t: t.exponential_(),
    "geometric_": lambda t: t.geometric_(0.5),
    "log_normal_": lambda t: t.log_normal_(),
    "cauchy_": lambda t: t.cauchy_(),
    "random_(from, to)": lambda t: t.random_(0, 10),
    "random_(to)": lambda t: t.random_(7),
}
DRAWS: dict[str, Callable[[Any], Any]] = {
    "bernoulli": lambda t: torch.bernoulli(t.abs().clamp(0, 1)),
    "bernoulli(p)": lambda t: torch.bernoulli(t, 0.4),
    "normal(mean, std)": lambda t: torch.normal(t, t.abs() + 1),
    "normal(mean, 2.0)": lambda t: torch.normal(t, 2.0),
    "rand_like": lambda t: torch.rand_like(t),
    "randn_like": lambda t: torch.randn_like(t),
    "randint_like": lambda t: torch.randint_like(t, 5),
    "F.dropout": lambda t: F.dropout(t, 0.4, training=True),
    "native_dropout": lambda t: aten.native_dropout(t, 0.4, True)[0],
}
LAYOUTS = [((2, 2), [Shard(0), Shard(1)]), ((2, 2), [Replicate(), Shard(0)]),
           ((4,), [Shard(1)]), ((2,), [Replicate()])]


def _check(fn: Callable[[Any], Any], mesh_shape: tuple[int, ...], placements: list) -> None:
    def body(mesh) -> tuple:
        x = distribute_tensor(FULL, mesh, placements)
        torch.manual_seed(123)
        with dtensor.fallback_policy("error"):
            y = fn(x)
        return y.full_tensor(), y.placements, torch.rand(3)

    torch.manual_seed(123)
    expected, expected_next = fn(FULL.clone()), torch.rand(3)
    for value, out_placements, after in _world(mesh_shape, body):
        assert torch.equal(value, expected)
        assert torch.equal(after, expected_next)  # the generator advanced as one device's
        assert list(out_placements) == placements


@pytest.mark.parametrize("mesh_shape, placements", LAYOUTS, ids=str)
@pytest.mark.parametrize("name", list(FILLS))
def test_fills_draw_one_devices_tensor_in_place(name, mesh_shape, placements):
    _check(FILLS[name], mesh_shape, placements)


@pytest.mark.parametrize("mesh_shape, placements", LAYOUTS, ids=str)
@pytest.mark.parametrize("name", list(DRAWS))
def test_draws_keep_the_input_layout_and_equal_one_device(name, mesh_shape, placements):
    _check(DRAWS[name], mesh_shape, placements)


def test_a_fill_moves_nothing_and_a_partial_target_holds_its_draw():
    def body(mesh) -> tuple:
        x = distribute_tensor(torch.zeros(6, 4), mesh, [Shard(0)])
        with simpg.trace() as t:
            x.uniform_()
        p = DTensor.from_local(torch.ones(3), mesh, [Partial()]) * 1.0
        torch.manual_seed(5)
        p.normal_()
        return len(t.records), p.placements, p.full_tensor()

    torch.manual_seed(5)
    expected = torch.ones(3).normal_()
    for collectives, placements, value in _world((2,), body):
        assert collectives == 0 and placements == (Partial(),)
        assert torch.equal(value, expected)
