"""redistribute_local_tensor on simpg and gloo against the reference executor and the planner.

For every (src, dst) pair the real executor must give every rank exactly what
``redistribute.reference.redistribute_locals`` gives it (integer-valued data: bit for bit), and
the bytes simpg's trace records for each rank must equal ``planner.step_received``: two
independent implementations of the ring formulas checked against each other.
"""

from __future__ import annotations

import doctest
import os
import socket
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import dtensor.comm
import dtensor.redistribute.execute
import simpg
from dtensor import comm
from dtensor.layout import mesh_coordinates
from dtensor.redistribute.reference import StepError, redistribute_locals, shard_full
from dtensor.mesh import DeviceMesh, init_device_mesh
from dtensor.placements import (Partial, PlacementError, Replicate, Shard,
                                fmt_placements, normalize_placements)
from dtensor.redistribute.planner import Step, plan
from dtensor.redistribute import redistribute_local_tensor
from tests.support.cases import mesh_id
from tests.support.redistribute_cases import Case, make_cases

# The single-buffer c10d collectives each step kind may issue (Note [one buffer per collective])
STEP_KIND_OF = {"all_gather_into_tensor": "all_gather", "reduce_scatter_tensor": "reduce_scatter",
                "all_to_all_single": "all_to_all"}


def check_case(mesh: DeviceMesh, case: Case, *, check_bytes: bool = True) -> None:
    """On one rank: run the case, compare the result and what the trace saw."""
    coord = tuple(mesh.get_coordinate())
    rank = dist.get_rank()
    with simpg.trace() as t:
        out = redistribute_local_tensor(case.locals[coord], mesh, case.src, case.dst, case.shape)
    want = case.expected[coord]
    assert out.dtype == want.dtype and torch.equal(out, want), \
        f"{case} at {coord}: got {out.tolist()}, expected {want.tolist()}"
    if check_bytes:
        got = sum(r.bytes_received[r.ranks.index(rank)] for r in t.records)
        assert got == case.received[coord], \
            f"{case} at {coord}: trace saw {got} bytes received, planner says " \
            f"{case.received[coord]}"
        ops = tuple(STEP_KIND_OF.get(r.op, r.op) for r in t.records)
        assert ops == case.ops, f"{case}: trace ops {[r.op for r in t.records]}, plan {case.ops}"


def sweep(mesh_shape: tuple[int, ...], cases: list[Case], **kwargs) -> None:
    def body() -> None:
        mesh = init_device_mesh("cpu", mesh_shape)
        simpg.run_subtests({"case": cases}, lambda case: check_case(mesh, case, **kwargs))

    simpg.run(body, len(list(mesh_coordinates(mesh_shape))))


# -- the sweeps on simpg -----------------------------------------------------------------------

@pytest.mark.parametrize("mesh_shape", [(4,), (2, 2)], ids=mesh_id)
def test_every_pair_matches_reference_and_planner_bytes(mesh_shape):
    sweep(mesh_shape, make_cases(mesh_shape))


def test_every_pair_on_mesh_2x4_uneven_shape():
    sweep((2, 4), make_cases((2, 4), shapes=((7, 5),)))


@pytest.mark.slow
def test_every_pair_on_mesh_2x4_all_shapes():
    sweep((2, 4), make_cases((2, 4), shapes=((8, 4), (3, 1))))


@pytest.mark.slow
@pytest.mark.parametrize("mesh_shape", [(4,), (2, 2), (2, 4)], ids=mesh_id)
def test_every_pair_with_avg_and_min(mesh_shape):
    # P(avg) brings local_scale steps and ReduceOp.AVG; P(min) the other identity.
    per_dim = (Shard(0), Shard(1), Replicate(), Partial("avg"), Partial("min"))
    sweep(mesh_shape, make_cases(mesh_shape, shapes=((7, 5), (3, 1)), per_dim=per_dim))


@pytest.mark.slow
def test_every_pair_on_a_3d_mesh():
    per_dim = (Shard(0), Shard(1), Replicate(), Partial("sum"))
    sweep((2, 2, 2), make_cases((2, 2, 2), shapes=((7, 5),), per_dim=per_dim))


def test_portable_fallbacks_match_reference():
    # simpg behaving as a backend with none of the optional ops (and refusing them): padded
    # all_gather_single, all_to_all_single with splits, reduce_scatter by all_to_all, avg as
    # sum then divide.
    per_dim = (Shard(0), Shard(1), Replicate(), Partial("sum"), Partial("avg"))
    cases = make_cases((2, 2), shapes=((7, 5), (3, 1)), per_dim=per_dim)
    with simpg.behave_as("portable"):
        sweep((2, 2), cases, check_bytes=False)


def test_integer_dtype_is_bit_exact_and_avg_on_ints_is_refused():
    cases = make_cases((2, 2), shapes=((7, 5),), dtype=torch.int64,
                       per_dim=(Shard(0), Replicate(), Partial("sum"), Partial("max")))
    sweep((2, 2), cases)

    def body():
        mesh = init_device_mesh("cpu", (2,))
        with pytest.raises(StepError, match=r"Partial\(avg\) on torch.int64 would round"):
            redistribute_local_tensor(torch.ones(3, dtype=torch.int64), mesh,
                                      [Partial("avg")], [Replicate()], (3,))

    simpg.run(body, 2)


def test_product_partials_match_reference_on_the_native_and_portable_paths():
    # +-1 factors split each value, so the reference is exact; the portable path reduces a
    # product reduce_scatter by all_to_all then a local prod
    per_dim = (Shard(0), Replicate(), Partial("product"))
    cases = make_cases((2, 2), shapes=((7, 5), (3, 1)), per_dim=per_dim)
    sweep((2, 2), cases)
    sweep((4,), make_cases((4,), shapes=((7, 5),), dtype=torch.int32, per_dim=per_dim))
    with simpg.behave_as("portable"):
        sweep((2, 2), cases, check_bytes=False)


def test_prod_is_an_alias_of_product_as_torch_reads_it():
    assert Partial("prod") == Partial("product") and str(Partial("prod")) == "P(product)"
    with pytest.raises(PlacementError, match=r"mixes Partial ops from different families"):
        normalize_placements([Partial("sum"), Partial("product")], 1, 2)


# -- the function's own contract ---------------------------------------------------------------

def test_async_op_returns_a_handle_that_finishes_the_last_collective():
    def body():
        mesh = init_device_mesh("cpu", (2, 2))
        full = torch.arange(35.0).reshape(7, 5)
        coord = tuple(mesh.get_coordinate())
        local = shard_full(full, (2, 2), [Shard(0), Shard(1)])[coord]
        handle = redistribute_local_tensor(local, mesh, [Shard(0), Shard(1)],
                                           [Replicate(), Replicate()], (7, 5), async_op=True)
        assert isinstance(handle, comm.Handle)
        return torch.equal(handle.wait(), full) and handle.wait() is handle.wait()

    assert simpg.run(body, 4) == [True] * 4


def test_ranks_outside_the_mesh_get_their_input_back():
    def body():
        mesh = DeviceMesh("cpu", [0, 1])
        local = torch.full((2,), float(dist.get_rank()))
        out = redistribute_local_tensor(local, mesh, [Shard(0)], [Replicate()], (4,))
        return out is local if dist.get_rank() == 2 else out.tolist()

    assert simpg.run(body, 3) == [[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0], True]


def test_wrong_local_shape_names_rank_and_expected_shape():
    def body():
        mesh = init_device_mesh("cpu", (4,))
        with pytest.raises(ValueError, match=r"holds shape \(3,\), expected \([12],\)"):
            redistribute_local_tensor(torch.ones(3), mesh, [Shard(0)], [Replicate()], (7,))

    simpg.run(body, 4)


def test_same_placements_is_a_no_op_and_mesh_mismatch_is_an_error():
    def body():
        mesh = init_device_mesh("cpu", (2,))
        t = torch.ones(2)
        assert redistribute_local_tensor(t, mesh, [Shard(0)], [Shard(0)], (4,)) is t
        with pytest.raises(PlacementError, match="expected one placement per mesh dim"):
            redistribute_local_tensor(t, mesh, [Shard(0), Replicate()], [Replicate()], (4,))

    simpg.run(body, 2)


def test_all_to_all_sends_each_element_once_from_replicas():
    # [R, S(0)] -> [S(1), S(0)] style moves read from replicas: each element must cross once.
    steps = plan([Replicate(), Shard(0)], [Shard(0), Shard(1)], (2, 2), (7, 5))
    assert any(s.kind == "all_to_all" for s in steps)
    sweep((2, 2), [c for c in make_cases((2, 2), shapes=((7, 5),))
                   if c.src == (Replicate(), Shard(0)) and c.dst == (Shard(0), Shard(1))])


def test_step_error_for_an_impossible_step():
    def body():
        mesh = init_device_mesh("cpu", (2,))
        bad = Step("all_gather", (0,), (Replicate(),), (Shard(0),))
        with pytest.raises(StepError, match="all_gather needs one S"):
            dtensor.redistribute.execute.COMPILERS["all_gather"](
                bad, dtensor.redistribute.execute._Where(mesh, (2,), (2,), (0,)))

    simpg.run(body, 2)


def test_comm_uneven_collectives_on_both_paths():
    def body():
        g = dist.group.WORLD
        r, n = dist.get_rank(), dist.get_world_size()
        gathered = comm.all_gather(torch.full((r, 2), r), [(k, 2) for k in range(n)], g)
        moved = comm.all_to_all([torch.full((k + r,), 10 * r + k) for k in range(n)],
                                [(r + k,) for k in range(n)], g)
        scattered = comm.reduce_scatter([torch.full((k,), 1.0 + r) for k in range(n)], g, "avg")
        return ([t.tolist() for t in gathered], [t.tolist() for t in moved],
                scattered.tolist())

    native = simpg.run(body, 3)
    assert native[2] == ([[], [[1, 1]], [[2, 2], [2, 2]]], [[2, 2], [12, 12, 12], [22] * 4],
                         [2.0, 2.0])
    assert simpg.run(body, 3, capabilities="portable") == native
    assert simpg.run(body, 3, capabilities="gloo") == native


def test_comm_errors_name_the_mismatch():
    def body():
        me = dist.get_rank()
        with pytest.raises(ValueError, match=rf"holds shape \(2,\) but shapes\[{me}\] is \(3,\)"):
            comm.all_gather(torch.ones(2), [(3,), (3,)], dist.group.WORLD)
        with pytest.raises(ValueError, match="reduce op 'prod'"):
            comm.all_reduce(torch.ones(2), dist.group.WORLD, "prod")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="got 1 pieces, expected 2"):
            comm.reduce_scatter([torch.ones(2)], dist.group.WORLD)

    simpg.run(body, 2)


def test_doctests():
    for module in (dtensor.comm.collectives, dtensor.redistribute.execute):
        assert doctest.testmod(module, raise_on_error=False).failed == 0


# -- real gloo processes -----------------------------------------------------------------------

GLOO_WORLD = 4
GLOO_TIMEOUT_S = 180.0
GLOO_PAIRS = [
    ((4,), [Shard(0)], [Replicate()]),
    ((4,), [Shard(0)], [Shard(1)]),
    ((4,), [Partial("sum")], [Shard(0)]),
    ((4,), [Partial("max")], [Replicate()]),
    ((4,), [Replicate()], [Partial("sum")]),
    ((2, 2), [Shard(0), Shard(1)], [Replicate(), Replicate()]),
    ((2, 2), [Shard(0), Shard(0)], [Shard(1), Replicate()]),
    ((2, 2), [Partial("sum"), Partial("sum")], [Shard(0), Shard(1)]),
    ((2, 2), [Replicate(), Shard(0)], [Shard(0), Shard(1)]),
    ((2, 2), [Partial("avg"), Shard(1)], [Replicate(), Shard(0)]),
]


def _gloo_worker(rank: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=GLOO_WORLD)
    try:
        meshes = {(4,): init_device_mesh("cpu", (4,)), (2, 2): init_device_mesh("cpu", (2, 2))}
        # A mesh whose ranks are not increasing: group_for must keep mesh_groups order on gloo.
        permuted = DeviceMesh("cpu", [[0, 2], [1, 3]])
        g = permuted.group_for((0, 1))
        assert dist.get_process_group_ranks(g) == [0, 2, 1, 3]
        meshes[(2, 2, "permuted")] = permuted
        for key, mesh in meshes.items():
            mesh_shape = mesh.shape
            coord = tuple(mesh.get_coordinate())
            for pair_mesh, src, dst in GLOO_PAIRS:
                if pair_mesh != mesh_shape:
                    continue
                for shape in ((8, 4), (7, 5), (3, 1)):
                    full = (torch.arange(shape[0] * shape[1]).reshape(shape) % 11 - 4).float()
                    locs = shard_full(full, mesh_shape, src, seed=3)
                    steps = plan(src, dst, mesh_shape, shape)
                    want = redistribute_locals(locs, steps, mesh_shape, shape)[coord]
                    got = redistribute_local_tensor(locs[coord], mesh, src, dst, shape)
                    assert torch.equal(got, want), (f"gloo rank {rank} {key} "
                                                    f"{fmt_placements(src)}->{fmt_placements(dst)}"
                                                    f"@{shape}: {got.tolist()} != {want.tolist()}")
    finally:
        dist.destroy_process_group()


@pytest.mark.gloo
def test_core_pairs_on_real_gloo_processes():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # keep gloo on loopback
    ctx = mp.spawn(_gloo_worker, args=(port,), nprocs=GLOO_WORLD, join=False)
    deadline = time.monotonic() + GLOO_TIMEOUT_S
    try:
        while not ctx.join(timeout=max(0.1, deadline - time.monotonic())):
            if time.monotonic() > deadline:
                pytest.fail(f"gloo ranks still running after {GLOO_TIMEOUT_S:g}s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
                p.join()
