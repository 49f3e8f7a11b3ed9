"""simpg as a drop-in for torch.distributed: torch's own DTensor on it, and one program whose
results on simpg and on real gloo processes agree bit for bit."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

import simpg
from tests.support.gloo_runner import load_program, run_program_on_gloo
from tests.support.simpg_helpers import integer_valued

RUN_TIMEOUT_S = 30.0  # per simpg.run: a hang becomes simpg's DeadlockError, not a stuck test
GLOO_TIMEOUT_S = 120.0  # all gloo processes together; each starts torch and gloo (seconds)
PROGRAM = Path(__file__).parents[1] / "programs" / "collectives_program.py"


def _run4(fn, *args):
    return simpg.run(fn, 4, *args, timeout=RUN_TIMEOUT_S)


# -- (a) torch.distributed.tensor on simpg ---------------------------------------------------------

def test_process_groups_have_the_names_device_mesh_resolves():
    def body():
        return dist.group.WORLD.group_name, dist.new_group([0, 1]).group_name

    names = simpg.run(body, 2, timeout=RUN_TIMEOUT_S)
    assert names == [names[0]] * 2 and names[0][0] != names[0][1]


def test_distribute_tensor_uneven_shards_follow_torch_chunk():
    full = integer_valued(10, 7, seed=0)  # 10 rows on 4 ranks: 3, 3, 3, 1

    def body():
        mesh = init_device_mesh("cpu", (4,))
        return [distribute_tensor(full, mesh, [p]).to_local() for p in (Shard(0), Shard(1),
                                                                          Replicate())]

    for r, (s0, s1, rep) in enumerate(_run4(body)):
        assert torch.equal(s0, full.chunk(4, 0)[r])
        assert torch.equal(s1, full.chunk(4, 1)[r])
        assert torch.equal(rep, full)


@pytest.mark.parametrize("dst", [Replicate(), Shard(1)], ids=["S(0)->R", "S(0)->S(1)"])
def test_redistribute_from_shard0(dst):
    full = integer_valued(10, 7, seed=1)

    def body():
        mesh = init_device_mesh("cpu", (4,))
        d = distribute_tensor(full, mesh, [Shard(0)]).redistribute(mesh, [dst])
        return d.placements, d.to_local(), d.full_tensor()

    for r, (placements, local, whole) in enumerate(_run4(body)):
        assert placements == (dst,)
        expected = full if dst == Replicate() else full.chunk(4, 1)[r]
        assert torch.equal(local, expected)
        assert torch.equal(whole, full)


def test_partial_to_replicate_from_local_and_from_a_sharded_sum():
    full = integer_valued(10, 7, seed=2)

    def body():
        mesh = init_device_mesh("cpu", (4,))
        r = dist.get_rank()
        p = DTensor.from_local(torch.arange(3.0) * (r + 1), mesh, [Partial()])
        summed = distribute_tensor(full, mesh, [Shard(0)]).sum(0)  # P(sum): each rank its rows
        return p.redistribute(mesh, [Replicate()]).to_local(), summed.placements, \
            summed.full_tensor()

    for replicated, placements, summed in _run4(body):
        assert torch.equal(replicated, torch.arange(3.0) * (1 + 2 + 3 + 4))
        assert placements == (Partial(),)
        assert torch.equal(summed, full.sum(0))


@pytest.mark.parametrize("pa,pb,out", [
    (Shard(0), Replicate(), Shard(0)),
    (Replicate(), Shard(1), Shard(1)),
    (Shard(1), Shard(0), Partial()),  # contracted dim sharded: each rank a partial sum
], ids=["S(0)@R->S(0)", "R@S(1)->S(1)", "S(1)@S(0)->P"])
def test_matmul_of_sharded_dtensors(pa, pb, out):
    a, b = integer_valued(9, 10, seed=3), integer_valued(10, 6, seed=4)

    def body():
        mesh = init_device_mesh("cpu", (4,))
        c = distribute_tensor(a, mesh, [pa]) @ distribute_tensor(b, mesh, [pb])
        return c.placements, c.full_tensor()

    for placements, c in _run4(body):
        assert placements == (out,)
        assert torch.equal(c, a @ b)


def test_2d_named_mesh_shard_both_dims_and_redistribute():
    full = integer_valued(5, 7, seed=5)  # uneven on both mesh dims: rows 3, 2; columns 4, 3

    def body():
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        d = distribute_tensor(full, mesh, [Shard(0), Shard(1)])
        rows = d.redistribute(mesh, [Shard(0), Replicate()])
        cols = d.redistribute(mesh, [Replicate(), Shard(1)])
        return (mesh["dp"].size(), mesh["tp"].get_local_rank(), d.to_local(), rows.to_local(),
                cols.to_local(), d.full_tensor())

    for r, (dp_size, tp_rank, local, rows, cols, whole) in enumerate(_run4(body)):
        i, j = divmod(r, 2)  # row-major mesh: rank r sits at (dp=i, tp=j)
        assert (dp_size, tp_rank) == (2, j)
        assert torch.equal(local, full.chunk(2, 0)[i].chunk(2, 1)[j])
        assert torch.equal(rows, full.chunk(2, 0)[i])
        assert torch.equal(cols, full.chunk(2, 1)[j])
        assert torch.equal(whole, full)


def test_2d_mesh_matmul_partial_on_one_dim():
    a, b = integer_valued(6, 8, seed=6), integer_valued(8, 5, seed=7)

    def body():
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        # dp shards rows of a; tp shards the contracted dim: out is [S(0), P(sum)]
        da = distribute_tensor(a, mesh, [Shard(0), Shard(1)])
        db = distribute_tensor(b, mesh, [Replicate(), Shard(0)])
        c = da @ db
        return c.placements, c.redistribute(mesh, [Shard(0), Replicate()]).to_local(), \
            c.full_tensor()

    for r, (placements, rows, c) in enumerate(_run4(body)):
        assert placements == (Shard(0), Partial())
        assert torch.equal(rows, (a @ b).chunk(2, 0)[r // 2])
        assert torch.equal(c, a @ b)


# -- (b) one program, simpg and gloo ---------------------------------------------------------------

def _load_program() -> ModuleType:
    return load_program(PROGRAM)


@pytest.mark.gloo
def test_program_on_simpg_matches_gloo_bit_for_bit(tmp_path):
    world_size = 3
    on_simpg = simpg.run(_load_program().program, world_size, timeout=RUN_TIMEOUT_S)
    on_gloo = run_program_on_gloo(PROGRAM, world_size, tmp_path, GLOO_TIMEOUT_S)
    for rank, (sim, real) in enumerate(zip(on_simpg, on_gloo, strict=True)):
        assert sim.keys() == real.keys(), f"rank {rank}"
        for key in real:
            assert sim[key].dtype == real[key].dtype == torch.int64, f"rank {rank} {key}"
            assert torch.equal(sim[key], real[key]), \
                f"rank {rank} {key}: simpg {sim[key].tolist()} != gloo {real[key].tolist()}"
