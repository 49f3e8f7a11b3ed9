"""Redistribute at scale: one buffer per collective where the pieces allow (Note [one buffer
per collective] in dtensor/comm/collectives.py), per-group layouts computed once, and a smoke
test of benchmarks/bench_scale.py at tiny sizes (no timing thresholds)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist
from tests.support.bench_loader import load_benchmark

import simpg
from dtensor.redistribute import collective_layout as cl
from dtensor.redistribute.reference import redistribute_locals, shard_full
from dtensor.mesh import init_device_mesh
from dtensor.placements import Partial, Replicate, Shard
from dtensor.redistribute.planner import plan
from dtensor.redistribute import redistribute_local_tensor

S0, S1, R, P = Shard(0), Shard(1), Replicate(), Partial("sum")


def _ops_and_results(mesh_shape, src, dst, shape, **run_kwargs):
    """(c10d ops each rank issued, whether every rank got the reference's piece)."""
    full = (torch.arange(math.prod(shape)).reshape(shape) % 13 - 4).float()
    locs = shard_full(full, mesh_shape, src, seed=1)
    want = redistribute_locals(locs, plan(src, dst, mesh_shape, shape), mesh_shape, shape)

    def body():
        mesh = init_device_mesh("cpu", mesh_shape)
        coord = tuple(mesh.get_coordinate())
        with simpg.trace() as t:
            out = redistribute_local_tensor(locs[coord], mesh, src, dst, shape)
        mine = [r.op for r in t.records if dist.get_rank() in r.ranks]
        return mine, torch.equal(out, want[coord])

    results = simpg.run(body, math.prod(mesh_shape), **run_kwargs)
    assert all(ok for _, ok in results), f"{src}->{dst}@{shape}: a rank got a wrong piece"
    return results[0][0]


@pytest.mark.parametrize("src,dst,shape,ops", [
    ([S0], [R], (8, 3), ["all_gather_into_tensor"]),  # even: one buffer, a view of it
    ([S1], [R], (3, 8), ["all_gather_into_tensor"]),  # even along dim 1: one movedim copy
    ([S0], [R], (7, 3), ["all_gather"]),  # uneven: the list form moves fewer bytes
    ([P], [S0], (8, 3), ["reduce_scatter_tensor"]),
    ([P], [S1], (3, 8), ["reduce_scatter_tensor"]),
    ([P], [S0], (7, 3), ["reduce_scatter"]),
    ([S0], [S1], (8, 8), ["all_to_all_single"]),
    ([S1], [S0], (7, 5), ["all_to_all_single"]),  # uneven both ways, still one buffer
    ([S0, S0], [R, R], (8, 4), ["all_gather_into_tensor"]),  # two mesh dims, one group
], ids=lambda v: str(v).replace(" ", ""))
def test_collective_form_by_pieces(src, dst, shape, ops):
    mesh_shape = (4,) if len(src) == 1 else (2, 2)
    assert _ops_and_results(mesh_shape, src, dst, shape) == ops


@pytest.mark.parametrize("profile", ["gloo", "portable"])
def test_fallback_profiles_give_the_reference_pieces(profile):
    # gloo: an uneven all_gather is padded into one buffer; portable: no reduce_scatter either
    for src, dst, shape in (([S0], [R], (7, 3)), ([S1], [R], (3, 7)), ([P], [S0], (7, 3)),
                            ([P], [S1], (8, 4)), ([S0], [S1], (7, 5))):
        _ops_and_results((4,), src, dst, shape, capabilities=profile)


def test_layouts_are_computed_once_per_group():
    step = plan([S0], [R], (16,), (32, 4))[0]
    cl.gather_layout.cache_clear()
    for _ in range(3):
        for c in range(16):
            cl.gather_layout(step, (16,), (32, 4), cl.position((16,), (0,), (c,))[0])
    info = cl.gather_layout.cache_info()
    assert (info.misses, info.hits) == (1, 47)


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_scale")


def test_bench_scale_smoke(bench, capsys):
    shapes = [(4, 6)]
    by_size = {n: bench.measure(n, shapes, True, repeat=(1, 1)) for n in (2, 4)}
    for n, timings in by_size.items():  # every case, both libraries, checked inside
        assert set(timings) == {(f"{s}->{d}", (4, 6), lib) for s, d in bench.CASES
                                for lib in bench.LIBS}
        assert all(v > 0 and math.isfinite(v) for v in timings.values())
    bench.report(by_size, shapes)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "| case | shape | | 2 | 4 | growth 2->4 |"
    assert sum(line.startswith("| | | ours/torch |") for line in lines) == len(bench.CASES)
