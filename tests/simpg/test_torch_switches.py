"""torch programs that flip process-wide switches give on simpg what they give on processes
(Note [per-rank process state]): torch's DTensor ``loss_parallel``, ``implicit_replication``,
its RNG (``manual_seed``, random ops on sharded DTensors), ``torch.set_default_dtype``,
``context_parallel``, ``sdpa_kernel``, ``register_sharding`` and the redistribute flags, under
200 schedules, against single-device answers and rank for rank against the same program on
real gloo processes."""

from __future__ import annotations

import functools
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.tensor import DTensor
from torch.distributed.tensor import _random as dtensor_random
from torch.distributed.tensor import _redistribute as dtensor_redistribute
from torch.distributed.tensor.parallel import loss_parallel

import simpg
from simpg.isolation import adopt

PROGRAM = Path(__file__).parents[1] / "programs" / "torch_switches_program.py"
SEEDS = [None, *range(200)]  # round-robin, then seeded interleavings (the program: ~30 s)
FEW_SEEDS = [None, *range(8)]  # for the single-switch programs below
WORLD_SIZE = 4
GLOO_TIMEOUT_S = 180.0  # 4 processes that each import torch's DTensor, on a busy machine

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:torch")  # torch's cpu advice


@pytest.fixture(scope="module")
def program() -> ModuleType:
    from tests.support.gloo_runner import load_program

    return load_program(PROGRAM)


@pytest.fixture(scope="module")
def on_simpg(program) -> dict[int | None, list[dict[str, dict[str, Any]]]]:
    """Every case's result per rank, for each schedule."""
    return {seed: simpg.run(program.program, WORLD_SIZE, schedule_seed=seed, timeout=60)
            for seed in SEEDS}


def _each_rank(on_simpg, case: str):
    for seed, ranks in on_simpg.items():
        for rank, results in enumerate(ranks):
            yield f"schedule_seed={seed}, rank {rank}", rank, results[case]


# -- each switch, against what one device (or one process) gives ------------------------------

@pytest.mark.parametrize("classes", [10, 48, 50])
def test_loss_parallel_forward_and_backward_equal_one_device(program, on_simpg, classes):
    logits = program.logits(classes).requires_grad_()
    loss = F.cross_entropy(logits, program.targets(classes))
    loss.backward()
    summed = F.cross_entropy(logits.detach(), program.targets(classes), reduction="sum")
    for where, _, got in _each_rank(on_simpg, f"loss_parallel {classes} classes"):
        for key, want in {"loss": loss.detach(), "grad": logits.grad, "summed": summed,
                          "plain": loss.detach()}.items():
            torch.testing.assert_close(got[key], want, msg=lambda m, k=key: f"{where} {k}: {m}")
        assert got["grad placements"] == "(Shard(dim=1),)", where


def test_implicit_replication_is_per_rank(on_simpg):
    full = torch.arange(35, dtype=torch.float64).reshape(7, 5)
    bias = torch.arange(5, dtype=torch.float64)
    for where, _, got in _each_rank(on_simpg, "implicit_replication"):
        assert torch.equal(got["mixed"], full + bias), where
        assert torch.equal(got["scaled"], full * bias), where
        assert got["refused outside"] is True, where


def test_each_rank_draws_what_its_own_process_draws(on_simpg):
    """On cpu torch keeps no DTensor RNG tracker: a rank's random op is the local op on its
    own generator, which simpg gives each rank (seeded here per rank, as a process is)."""
    for where, rank, got in _each_rank(on_simpg, "rng"):
        with torch.random.fork_rng():  # replay rank's draws on this process's generator
            torch.manual_seed(100 + rank)
            local_rows = torch.ones(8, 6, dtype=torch.float64).chunk(WORLD_SIZE, 0)[rank]
            dropped = F.dropout(local_rows, 0.5)
            if rank == 0:
                torch.rand(3)
            cols = torch.zeros(8, 6).chunk(WORLD_SIZE, 1)  # 6 columns on 4: 2, 2, 2, 0
            noise = torch.rand_like(cols[rank]) if rank < len(cols) else torch.zeros(8, 0)
            after = torch.rand(2)
        assert torch.equal(got["dropout local"], dropped), where
        assert torch.equal(got["rand_like local"], noise), where
        assert torch.equal(got["after"], after), where
        assert got["tracker is None"] is True, where


def test_default_dtype_is_per_rank(on_simpg):
    for where, rank, got in _each_rank(on_simpg, "default_dtype"):
        want = "torch.float32" if rank == 0 else "torch.float64"
        assert (got["dtype after"], got["made dtype"]) == (want, want), where
        assert got["total"].dtype == torch.float64, where
        torch.testing.assert_close(got["total"], torch.tensor(13.5, dtype=torch.float64))
        assert torch.equal(got["gathered"], torch.arange(4, dtype=torch.float64)), where
    assert torch.get_default_dtype() == torch.float32  # the caller's own came back


def test_context_parallel_patches_and_tables_are_per_rank(program, on_simpg):
    torch_rule = "scaled_dot_product_flash_attention_strategy"
    outside = {"sdpa patched": False, "cp handlers": False, "cp strategy": torch_rule,
               "load balance": True}
    inside = {"sdpa patched": True, "cp handlers": True,
              "cp strategy": "_scaled_dot_product_flash_attention_cp_strategy",
              "load balance": True}
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 2, 4, 3, generator=g, dtype=torch.float64)
    full = torch.arange(8.0, dtype=torch.float64)
    for where, rank, got in _each_rank(on_simpg, "context_parallel"):
        assert (got["before"], got["inside"], got["after"]) == (outside, inside, outside), where
        if rank == 0:  # left first, while the others were still inside
            assert got["outside early"] == outside, where
            torch.testing.assert_close(got["sdpa outside"], F.scaled_dot_product_attention(q, q, q))
            assert torch.equal(got["doubled"], (full * 2).chunk(WORLD_SIZE)[0]), where
        else:
            assert got["inside later"] == inside, where
        assert got["summed"].item() == 28.0 and torch.equal(got["gathered"], full * 2), where
    assert F.scaled_dot_product_attention is torch._C._nn.scaled_dot_product_attention


def test_sdpa_backends_are_per_rank(on_simpg):
    for where, rank, got in _each_rank(on_simpg, "sdpa_kernel"):
        assert got["inside"] == ((False, True) if rank % 2 == 0 else (True, True)), where
        assert got["after"] == (True, True), where
    assert torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.math_sdp_enabled()


def test_a_registered_sharding_is_the_registering_ranks_own(on_simpg):
    x = torch.arange(1.0, 9.0, dtype=torch.float64)
    for where, rank, got in _each_rank(on_simpg, "register_sharding"):
        assert got["registered"] is (rank == 0), where
        assert got["placements"] == "(Shard(dim=0),)", where
        torch.testing.assert_close(got["value"], torch.special.xlog1py(x, x))
    table = DTensor._op_dispatcher.sharding_propagator.op_strategy_funcs
    assert not isinstance(table.get(torch.ops.aten.special_xlog1py.default), functools.partial)


# -- against real processes -------------------------------------------------------------------

def _assert_same(sim: Any, real: Any, where: str) -> None:
    """Exact, except floats reduced across ranks: gloo adds in another order (ulps apart)."""
    if isinstance(real, torch.Tensor):
        assert (sim.dtype, sim.shape) == (real.dtype, real.shape), where
        if real.is_floating_point():
            torch.testing.assert_close(sim, real, rtol=1e-12, atol=1e-15,
                                       msg=lambda m: f"{where}: {m}")
        else:
            assert torch.equal(sim, real), where
    else:
        assert sim == real, where


@pytest.mark.gloo
def test_every_case_equals_gloo_rank_for_rank_under_every_schedule(on_simpg, tmp_path):
    from tests.support.gloo_runner import run_program_on_gloo

    on_gloo = run_program_on_gloo(PROGRAM, WORLD_SIZE, tmp_path, timeout_s=GLOO_TIMEOUT_S)
    for seed, ranks in on_simpg.items():
        for rank, (sim, real) in enumerate(zip(ranks, on_gloo, strict=True)):
            assert sim.keys() == real.keys()
            for case in real:
                assert sim[case].keys() == real[case].keys(), case
                for key in real[case]:
                    where = f"schedule_seed={seed}, rank {rank}, {case}: {key}"
                    _assert_same(sim[case][key], real[case][key], where)
    # the RNG draws differ per rank, as each process's do: the comparison is not vacuous
    assert not torch.equal(on_gloo[0]["rng"]["dropout local"], on_gloo[1]["rng"]["dropout local"])


# -- switches that hold objects: each rank its own copy ---------------------------------------

def _tracker() -> Any:
    return dtensor_random._RNGStateTracker(torch.device("cpu"))


@pytest.mark.parametrize("seed", FEW_SEEDS)
def test_a_callers_rng_tracker_is_copied_per_rank_like_a_forked_process(seed):
    """The tracker is an object torch mutates in place (``distribute_region_enabled``): each
    rank starts from the caller's, as a process forked from it would, and owns its copy."""
    caller = _tracker()
    dtensor_random._rng_tracker = caller
    try:
        def body():
            mine = dtensor_random._rng_tracker
            if dist.get_rank() == 0:
                mine.distribute_region_enabled = False
            dist.barrier()  # the others run while rank 0's is off
            same = dtensor_random._rng_tracker is mine
            dist.barrier()
            return same, mine is caller, mine.distribute_region_enabled

        got = simpg.run(body, 3, schedule_seed=seed)
        assert got == [(True, False, False), (True, False, True), (True, False, True)]
        assert dtensor_random._rng_tracker is caller and caller.distribute_region_enabled
    finally:
        dtensor_random._rng_tracker = None


def test_a_tracker_a_rank_makes_is_its_own():
    def body():
        if dist.get_rank() == 1:
            dtensor_random._rng_tracker = _tracker()
        dist.barrier()
        return dtensor_random._rng_tracker is not None

    assert simpg.run(body, 3, schedule_seed=1) == [False, True, False]
    assert dtensor_random._rng_tracker is None


def test_an_adopted_tracker_is_copied_for_the_other_ranks():
    """A module first imported inside the world: the importing rank keeps its object, the
    world's baseline (where the other ranks start) holds a copy of it."""
    tracker = _tracker()
    baseline: dict[str, Any] = {}
    adopt(baseline, {"DTensor RNG tracker": tracker})
    copied = baseline["DTensor RNG tracker"]
    assert copied is not tracker and isinstance(copied, type(tracker))
    tracker.distribute_region_enabled = False
    assert copied.distribute_region_enabled


@pytest.mark.parametrize("seed", FEW_SEEDS)
def test_loss_handlers_held_by_reference_are_the_ranks_own(seed):
    """A rank that keeps torch's handler table and edits it later edits its own table."""
    def body():
        table = DTensor._op_dispatcher._custom_op_handlers
        if dist.get_rank() == 0:
            with loss_parallel():
                dist.barrier()
                inside = aten_nll in table
            dist.barrier()
        else:
            dist.barrier()
            inside = aten_nll in table
            dist.barrier()
        return inside, aten_nll in DTensor._op_dispatcher._custom_op_handlers

    aten_nll = torch.ops.aten.nll_loss_forward.default
    assert simpg.run(body, 3, schedule_seed=seed) == [(True, False), (False, False),
                                                      (False, False)]


@pytest.mark.parametrize("seed", FEW_SEEDS)
def test_redistribute_flags_are_per_rank(seed):
    def body():
        flags = dtensor_redistribute
        if dist.get_rank() == 0:
            with flags.use_min_cost_redistribution_plan(), \
                    flags.disable_redistribute_transform_optimization():
                dist.barrier()
                seen = (flags._FORCE_MIN_COST_REDISTRIBUTION_PLAN,
                        flags._DISABLE_REDISTRIBUTE_TRANSFORM_OPTIMIZATION)
            dist.barrier()
        else:
            dist.barrier()
            seen = (flags._FORCE_MIN_COST_REDISTRIBUTION_PLAN,
                    flags._DISABLE_REDISTRIBUTE_TRANSFORM_OPTIMIZATION)
            dist.barrier()
        return seen

    assert simpg.run(body, 3, schedule_seed=seed) == [(True, True), (None, False),
                                                      (None, False)]
