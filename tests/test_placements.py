"""Placements are frozen, hashable value objects with a constructor repr and a short str."""

from __future__ import annotations

import dataclasses

import pytest

from dtensor.placements import (Partial, PlacementError, Replicate, Shard, fmt_placements,
                                is_partial, is_replicate, is_shard, normalize_placements)

ALL = [Shard(0), Shard(3), Replicate(), Partial(), Partial("avg"), Partial("max"),
       Partial("min")]


@pytest.mark.parametrize("p", ALL, ids=str)
def test_repr_evals_back(p):
    assert eval(repr(p)) == p
    assert hash(eval(repr(p))) == hash(p)


@pytest.mark.parametrize("p, text", [(Shard(2), "S(2)"), (Replicate(), "R"),
                                     (Partial(), "P(sum)"), (Partial("min"), "P(min)")], ids=str)
def test_str_is_short(p, text):
    assert str(p) == text


def test_value_semantics():
    assert Shard(1) == Shard(1) != Shard(0)
    assert Partial() == Partial("sum") != Partial("max")
    assert Replicate() != Partial() and Shard(0) != Replicate()
    assert len({Shard(0), Shard(0), Replicate(), Replicate(), Partial(), Partial("sum")}) == 3
    assert fmt_placements([Shard(0), Replicate(), Partial("max")]) == "[S(0),R,P(max)]"
    assert is_shard(Shard(1)) and is_shard(Shard(1), 1) and not is_shard(Shard(1), 0)
    assert is_replicate(Replicate()) and is_partial(Partial()) and not is_partial(Shard(0))


@pytest.mark.parametrize("p", ALL, ids=str)
def test_frozen_and_slotted(p):
    for field in dataclasses.fields(p):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(p, field.name, getattr(p, field.name))
    assert not hasattr(p, "__dict__")


@pytest.mark.parametrize("make, message", [
    (lambda: Shard(1.0), r"Shard\(dim=1.0\): dim must be an int"),
    (lambda: Shard(True), r"dim must be an int"),
    (lambda: Partial("mul"),
     r"Partial\(reduce_op='mul'\): expected one of sum, avg, max, min, product"),
], ids=["float", "bool", "unknown-op"])
def test_bad_placements_say_what_was_expected(make, message):
    with pytest.raises(PlacementError, match=message):
        make()


def test_normalize_resolves_negative_dims():
    assert normalize_placements([Shard(-1)], 3, 1) == (Shard(2),)
    assert normalize_placements([-1, Replicate(), Shard(0)], 2, 3) == (
        Shard(1), Replicate(), Shard(0))
    assert normalize_placements([-2], 2, 1) == (Shard(0),)
    assert normalize_placements((Partial("max"), Partial("max")), 1, 2) == (
        Partial("max"), Partial("max"))


@pytest.mark.parametrize("placements, ndim, mesh_ndim, shape, message", [
    ([Shard(3), Replicate()], 2, 2, (4, 6),
     r"Shard\(3\) is out of range for a 2-d tensor of shape \(4, 6\): expected a dim in "
     r"\[-2, 1\]"),
    ([-3], 2, 1, None, r"Shard\(-3\) is out of range for a 2-d tensor: expected a dim in"),
    ([Shard(0)], 2, 2, None, r"1 placements \[S\(0\)\] for a 2-d mesh: expected one placement "
                             r"per mesh dim \(2\)"),
    (["S0"], 2, 1, None, r"'S0' in \[S0\] is not a placement"),
    ([Partial(), Partial("max")], 1, 2, None,
     r"\[P\(sum\),P\(max\)\] mixes Partial ops from different families"),
    ([Partial("min"), Partial("max")], 1, 2, None, r"mixes Partial ops"),
], ids=["out-of-range", "negative-out-of-range", "count", "not-a-placement", "sum+max",
        "min+max"])
def test_normalize_errors(placements, ndim, mesh_ndim, shape, message):
    with pytest.raises(PlacementError, match=message):
        normalize_placements(placements, ndim, mesh_ndim, shape=shape)


def test_sum_and_avg_mix():
    # Both are linear, so the order of reduction does not matter.
    assert normalize_placements([Partial(), Partial("avg")], 1, 2) == (Partial(),
                                                                       Partial("avg"))
