"""Pieces that are not boxes, as sets: a piece of a block layout (Note [block shards] in
dtensor/layout.py) is a product of interval sets, one per tensor dim (``layout.pieces``). The
intersection of two such products is the product of the per-dim intersections, and the part
of one outside another is a few products (slab by slab, as for boxes), so what one rank needs
of another's piece, and where it sits in each, is computed per dim with no loop over elements.

>>> a = (((0, 2), (4, 6)), ((0, 3),))
>>> b = (((0, 4),), ((1, 3),))
>>> intersect(a, b)
(((0, 2),), ((1, 3),))
>>> subtract(a, b)
[(((4, 6),), ((0, 3),)), (((0, 2),), ((0, 1),))]
"""

from __future__ import annotations

import math

import torch

from dtensor.layout import Intervals

Region = tuple[Intervals, ...]


def _meet(a: Intervals, b: Intervals) -> Intervals:
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tuple(out)


def _minus(a: Intervals, b: Intervals) -> Intervals:
    out = []
    for lo, hi in a:
        for b0, b1 in b:
            if b1 <= lo or b0 >= hi:
                continue
            if b0 > lo:
                out.append((lo, b0))
            lo = max(lo, b1)
            if lo >= hi:
                break
        if hi > lo:
            out.append((lo, hi))
    return tuple(out)


def length(iv: Intervals) -> int:
    return sum(b - a for a, b in iv)


def numel(r: Region) -> int:
    return math.prod(length(iv) for iv in r)


def intersect(a: Region, b: Region) -> Region | None:
    """The elements both hold, None for none."""
    out = tuple(_meet(x, y) for x, y in zip(a, b))
    return out if all(out) else None


def subtract(a: Region, b: Region) -> list[Region]:
    """``a`` minus ``b`` as disjoint non-empty regions."""
    if intersect(a, b) is None:
        return [a] if numel(a) else []
    out, lead = [], list(a)
    for d in range(len(a)):
        rest = _minus(a[d], b[d])
        if rest:
            out.append(tuple(lead[:d]) + (rest,) + tuple(a[d + 1:]))
        lead[d] = _meet(a[d], b[d])
    return out


def index(part: Region, within: Region) -> tuple:
    """Where ``part`` sits in a tensor holding ``within`` (in its order): slices where every
    dim's part is one run of the piece, else (``IndexRuns``) the runs per dim, which
    ``index_tensors`` makes an index of (built per call: a cached tensor would outlive the
    fake mode of a trace)."""
    per_dim = [_positions(p, w) for p, w in zip(part, within)]
    if all(len(runs) == 1 for runs in per_dim):
        return tuple(slice(a, b) for ((a, b),) in per_dim)
    return IndexRuns(tuple(tuple(runs) for runs in per_dim))


class IndexRuns(tuple):
    """Per dim, the (start, stop) runs of positions an index selects."""


def index_tensors(runs: IndexRuns, device: torch.device) -> tuple[torch.Tensor, ...]:
    """One index tensor per dim, shaped to broadcast into the selected part's shape."""
    n = len(runs)
    return tuple(torch.cat([torch.arange(a, b, device=device) for a, b in per]).reshape(
        [-1 if j == d else 1 for j in range(n)]) for d, per in enumerate(runs))


def _positions(part: Intervals, within: Intervals) -> list[tuple[int, int]]:
    """Where ``part``'s elements sit in the concatenation of ``within``, as merged runs."""
    out: list[list[int]] = []
    at = 0
    for w0, w1 in within:
        for lo, hi in _meet(part, ((w0, w1),)):
            a, b = at + lo - w0, at + hi - w0
            if out and out[-1][1] == a:
                out[-1][1] = b
            else:
                out.append([a, b])
        at += w1 - w0
    return [(a, b) for a, b in out]


def shape(r: Region) -> tuple[int, ...]:
    return tuple(length(iv) for iv in r)
