"""The randomized fault campaign (simpg.campaign): raw collectives on random subgroups and our
DTensor's redistributes, with random faults and schedules. A small slice runs by default; the
200-program sweep is marked slow:

    python -m simpg.campaign --programs 200 --extra tests.simpg.test_fault_campaign:EXTRA_KINDS
"""

from __future__ import annotations

import math
import random

import pytest
import torch
import torch.distributed as dist

import simpg
from simpg import campaign
from simpg.campaign import Fault, Op, OpKind, Program

try:
    from dtensor import Replicate, Shard, distribute_tensor, init_device_mesh, local_slices
except ImportError:  # simpg runs without our runtime; the campaign then covers collectives
    init_device_mesh = None


def _mesh_shape(op: Op) -> tuple[int, ...]:
    return op.params[0]


def _global(op: Op) -> torch.Tensor:
    shape = op.params[1]
    return torch.arange(math.prod(shape), dtype=torch.float64).reshape(shape) + op.index


def _coordinate(rank: int, mesh_shape: tuple[int, ...]) -> tuple[int, ...]:
    coord = []
    for size in reversed(mesh_shape):
        rank, c = divmod(rank, size)
        coord.append(c)
    return tuple(reversed(coord))


def _run_redistribute(op: Op, group, world_size: int, wrong_shape: bool) -> torch.Tensor:
    mesh_shape, _, src, dst = op.params
    mesh = init_device_mesh("cpu", mesh_shape)
    x = distribute_tensor(_global(op), mesh, list(src))
    return x.redistribute(mesh, list(dst)).to_local()


def _reference_redistribute(op: Op, world_size: int) -> dict[int, torch.Tensor]:
    mesh_shape, shape, _, dst = op.params
    full = _global(op)
    return {r: full[local_slices(shape, mesh_shape, dst, _coordinate(r, mesh_shape))]
            for r in op.group}


def _redistribute_params(rng: random.Random, n: int) -> tuple:
    mesh_shape = (2, 2) if n == 4 and rng.random() < 0.5 else (n,)
    shape = (rng.randint(1, 7), rng.randint(1, 5))  # uneven and empty shards are normal
    choices = [Replicate(), Shard(0), Shard(1)]
    src = tuple(rng.choice(choices) for _ in mesh_shape)
    dst = tuple(rng.choice(choices) for _ in mesh_shape)
    return (mesh_shape, shape, src, dst)


EXTRA_KINDS = {} if init_device_mesh is None else {
    "redistribute": OpKind(_run_redistribute, _reference_redistribute, faultable=False,
                           whole_world=True, params=_redistribute_params),
}
KINDS = {**campaign.KINDS, **EXTRA_KINDS}


def _assert_campaign(programs: int, seed: int) -> None:
    problems: list[str] = []
    tally = campaign.campaign(programs, seed, KINDS, report=problems.append)
    print(f"{programs} programs: {campaign.format_tally(tally)}")
    assert not problems, "\n\n".join(problems[:5])
    assert tally["correct"] == programs and tally["named"] > 0


def test_a_slice_of_the_campaign():
    _assert_campaign(15, seed=1)


@pytest.mark.slow
def test_the_full_campaign():
    _assert_campaign(200, seed=0)


# -- the judge itself must be able to fail ---------------------------------------------------

def _program(fault: Fault | None) -> Program:
    ops = (Op("all_reduce", (0, 1, 2), 0), Op("all_gather_single", (0, 2), 1),
           Op("all_reduce", (0, 1, 2), 2))
    return Program(3, ((0, 1, 2), (0, 2)), ops, schedule_seed=None, fault=fault)


@pytest.mark.parametrize("fault", [
    Fault("skip", 2, 1), Fault("shape", 0, 1), Fault("stall", 1, 2), Fault("raise", 2, 3),
], ids=lambda f: f.kind)
def test_each_fault_kind_is_named(fault):
    assert campaign.run_program(_program(fault), campaign.KINDS)[0] == "named"


def test_the_judge_rejects_the_wrong_rank():
    # a skip on rank 2 reported as if rank 0 skipped: the judge must say so
    outcome, _ = campaign.run_program(_program(Fault("skip", 2, 1)), campaign.KINDS)
    error = _error_of(_program(Fault("skip", 2, 1)))
    assert outcome == "named"
    assert campaign._judge(Fault("skip", 0, 1), _program(None), error)[0] == "wrong error"


def test_a_wrong_reference_is_caught():
    program = _program(None)
    wrong = {**campaign.KINDS, "all_reduce": OpKind(campaign._run_raw,
                                                    lambda op, n: {r: torch.zeros(1)
                                                                   for r in op.group})}
    assert campaign.run_program(program, wrong)[0] == "wrong result"


def _error_of(program: Program) -> BaseException:
    with pytest.raises(simpg.SimpgError) as info:
        simpg.run(campaign._body(program, campaign.KINDS), program.world_size, timeout=5)
    return info.value


def test_generated_programs_replay_from_their_seed():
    a = campaign.generate(random.Random(3), KINDS, with_fault=False)
    b = campaign.generate(random.Random(3), KINDS, with_fault=False)
    assert a == b and dist.is_available()
