"""Compiled redistribute plans and prepared collectives: the cached path gives what the
general one gives (Note [compiled plans] in dtensor/redistribute/execute.py, Note [prepared
collectives] in dtensor/comm/collectives.py)."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
import torch.distributed as dist

import simpg
from dtensor import Partial, Replicate, Shard, distribute_tensor, init_device_mesh
from dtensor import comm
from dtensor.comm.debug_mode import CommDebugMode
from dtensor.redistribute import program, program_to
from dtensor.spec import DTensorSpec
from tests.support.cases import mesh_id
from tests.support.redistribute_cases import make_cases


def test_a_program_is_compiled_once_per_mesh_and_move():
    def body():
        mesh = init_device_mesh("cpu", (2,))
        gather = program(mesh, [Shard(0)], [Replicate()], (5, 3))
        assert program(mesh, (Shard(0),), (Replicate(),), torch.Size([5, 3])) is gather
        assert program(mesh, [Shard(0)], [Replicate()], (6, 3)) is not gather
        assert repr(gather) == "Program(all_gather(0) [S(0)]->[R])"
        assert repr(program(mesh, [Shard(0)], [Shard(0)], (5, 3))) == \
            "Program(nothing to move)"
        other = init_device_mesh("cpu", (2,))  # another mesh object: its own programs
        assert program(other, [Shard(0)], [Replicate()], (5, 3)) is not gather

    simpg.run(body, 2)


def test_a_dtensor_spec_keeps_its_moves_and_reuses_the_target_spec():
    def body():
        mesh = init_device_mesh("cpu", (2,))
        x = distribute_tensor(torch.arange(10.0).reshape(5, 2), mesh, [Shard(0)])
        first, second = (x.redistribute(mesh, [Replicate()]) for _ in range(2))
        assert first._spec is second._spec
        spec, gather = x._spec.moves[(Replicate(),)]
        assert spec is first._spec and spec.placements == (Replicate(),)
        assert program_to(x._spec, (Replicate(),)) == (spec, gather)
        assert torch.equal(first.to_local(), torch.arange(10.0).reshape(5, 2))

    simpg.run(body, 2)


def test_copies_and_pickles_of_a_spec_leave_its_moves_behind():
    def body():
        mesh = init_device_mesh("cpu", (2,))
        x = distribute_tensor(torch.ones(4), mesh, [Shard(0)])
        x.redistribute(mesh, [Replicate()])
        assert x._spec.moves  # holds a program, which holds process groups
        for twin in (copy.copy(x._spec), copy.deepcopy(x._spec),
                     pickle.loads(pickle.dumps(x._spec))):
            assert isinstance(twin, DTensorSpec) and twin == x._spec and twin.moves == {}

    simpg.run(body, 2)


@pytest.mark.parametrize("mesh_shape", [(3,), (2, 2)], ids=mesh_id)
def test_cached_programs_give_the_reference_pieces_call_after_call(mesh_shape):
    cases = make_cases(mesh_shape, shapes=((7, 5),))

    def body():
        mesh = init_device_mesh("cpu", mesh_shape)
        coord = tuple(mesh.get_coordinate())
        for case in cases:
            move = program(mesh, case.src, case.dst, case.shape)
            for call in range(3):  # the first compiles nothing more; later ones reuse it all
                out = move(case.locals[coord])
                assert torch.equal(out, case.expected[coord]), f"{case} call {call} at {coord}"

    simpg.run(body, 4 if mesh_shape == (2, 2) else 3)


def test_redistribute_without_grad_matches_the_autograd_path():
    def body():
        mesh = init_device_mesh("cpu", (2,))
        x = distribute_tensor(torch.arange(8.0, requires_grad=True), mesh, [Shard(0)])
        with torch.no_grad():
            plain = x.redistribute(mesh, [Replicate()])
        tracked = x.redistribute(mesh, [Replicate()])
        assert not plain.requires_grad and tracked.requires_grad
        assert plain._spec is tracked._spec and torch.equal(plain.to_local(),
                                                            tracked.to_local())
        tracked.to_local().sum().backward()  # each rank's copy of the sum adds to the gradient
        return x.grad.to_local().tolist()

    assert simpg.run(body, 2) == [[1.0] * 4, [1.0] * 4]


# -- prepared collectives against the general functions ------------------------------------------

def _piece(rank: int, shape: tuple[int, ...], dtype=torch.float32) -> torch.Tensor:
    n = 1
    for d in shape:
        n *= d
    return (torch.arange(n) % 7 + 10 * rank).reshape(shape).to(dtype)


def test_prepared_all_gather_and_reduce_scatter_match_the_general_forms():
    def body():
        g, r = dist.group.WORLD, dist.get_rank()
        checks = 0
        for shapes, dim in ((((2, 3),) * 3, 0), (((2, 3),) * 3, 1), (((2, 3), (2, 3), (1, 3)), 0),
                            (((2, 2), (2, 1), (2, 0)), 1)):
            mine = _piece(r, shapes[r])
            got = comm.prepare_all_gather_cat(shapes, dim, g)(mine).wait()
            assert torch.equal(got, comm.all_gather_cat(mine, shapes, dim, g)), (shapes, dim)
            checks += 1
        for sizes, dim, op in (((2, 2, 2), 0, "sum"), ((1, 1, 1), 1, "avg"),
                               ((2, 2, 2), 0, "max"), ((3, 2, 1), 0, "sum")):
            shape = (6, 3) if dim == 0 else (2, 3)
            t = _piece(r, shape)
            got = comm.prepare_reduce_scatter_cat(sizes, dim, shape, g, op)(t).wait()
            assert torch.equal(got, comm.reduce_scatter_cat(t, sizes, dim, g, op)), (sizes, op)
            checks += 1
        return checks

    assert simpg.run(body, 3) == [8] * 3


def test_prepared_all_reduce_and_all_to_all_match_the_general_forms():
    def body():
        g, r = dist.group.WORLD, dist.get_rank()
        for op in ("sum", "avg", "max", "product"):
            t = _piece(r, (2, 3))
            assert torch.equal(comm.prepare_all_reduce(g, op)(t).wait(),
                               comm.all_reduce(t, g, op)), op
        sizes = [[1, 2, 0], [2, 0, 3], [0, 1, 1]]  # sizes[i][j]: what rank i sends to rank j
        send_sizes = sizes[r]
        recv_sizes = [sizes[j][r] for j in range(3)]
        send = _piece(r, (sum(send_sizes),))
        got = comm.prepare_all_to_all_single(send_sizes, recv_sizes, g)(send).wait()
        assert torch.equal(got, comm.all_to_all_single(send, send_sizes, recv_sizes, g))
        return got.tolist()

    # rank 0 receives rank 1's first 2 elements and nothing from rank 2's
    assert simpg.run(body, 3)[0] == [0.0, 10.0, 11.0]


def test_unusual_tensors_take_the_general_functions():
    def body():
        g, r = dist.group.WORLD, dist.get_rank()
        z = torch.full((2,), complex(r, 1))  # complex: dist.* views it as real pairs
        got = comm.prepare_all_gather_cat([(2,), (2,)], 0, g)(z).wait()
        assert got.tolist() == [complex(0, 1)] * 2 + [complex(1, 1)] * 2
        with pytest.raises(ValueError, match="'avg' on torch.int64 would round"):
            comm.prepare_all_reduce(g, "avg")(torch.ones(2, dtype=torch.int64))
        with pytest.raises(ValueError, match="prepared for \\(2,\\)"):
            comm.prepare_all_gather_cat([(2,), (2,)], 0, g)(torch.ones(3))
        with pytest.raises(ValueError, match="reduce op 'prod'"):
            comm.prepare_reduce_scatter_cat([1, 1], 0, (2,), g, "prod")  # type: ignore
        dist.barrier()  # a mode open on any rank sends every rank to the general forms
        with CommDebugMode() as mode:  # a recorder open: recorded, as the general form is
            comm.prepare_all_reduce(g, "sum")(torch.ones(2)).wait()
            comm.prepare_all_gather_cat([(1,), (1,)], 0, g)(torch.ones(1)).wait()
        return dict(mode.get_comm_counts_by_kind())

    assert simpg.run(body, 2) == [{"all_reduce": 1, "all_gather": 1}] * 2


def test_a_partial_program_refuses_avg_on_integers():
    def body():
        mesh = init_device_mesh("cpu", (2,))
        move = program(mesh, [Partial("avg")], [Replicate()], (4,))
        with pytest.raises(ValueError, match="Partial\\(avg\\) on torch.int64 would round"):
            move(torch.ones(4, dtype=torch.int64))
        return move(torch.full((4,), float(dist.get_rank()))).tolist()

    assert simpg.run(body, 2) == [[0.5] * 4] * 2
