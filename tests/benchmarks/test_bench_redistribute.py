"""Smoke test of benchmarks/bench_redistribute.py on a tiny case: figures, bound, tally."""

from __future__ import annotations

import pytest
from tests.support.bench_loader import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_redistribute")


def test_every_pair_on_two_ranks_uneven(bench):
    mesh, shape = (2,), (3, 2)
    pairs = bench.pairs_for(1)
    ours = bench.measure("ours", mesh, shape, pairs)
    theirs = bench.measure("torch", mesh, shape, pairs)
    by_pair = dict(zip(pairs, zip(ours, theirs)))
    assert len(pairs) == 16
    # S(0) -> R: rank 0 (2 rows) receives 1 row, rank 1 (1 row) receives 2; 2 floats a row
    o, t = by_pair[(("S(0)",), ("R",))]
    assert (o.status, o.total, o.peak) == ("ok", 24, 16)
    assert bench.bound((("S(0)",), ("R",)), mesh, shape) == 24
    # torch's public redistribute refuses to make a Partial
    assert by_pair[(("R",), ("P",))][1].status == "raises"
    rows = [(p, bench.bound(p, mesh, shape), o, t) for p, (o, t) in by_pair.items()]
    counts = bench.tally(rows)
    assert counts["ours=bound"] == 16 and counts["ours raises"] == counts["ours wrong"] == 0
    assert counts["ours=bound"] + counts["ours>bound"] == 16
    assert counts["torch raises"] == 3  # S(0), S(1), R -> P
