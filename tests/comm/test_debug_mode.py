"""dtensor's CommDebugMode on simpg: the same small programs counted by torch's CommDebugMode
over torch's DTensor and by ours over ours agree per collective kind and per module, forward
and backward; counts are per rank, nest, and stop at the block's edges."""

from __future__ import annotations

import warnings

import contextvars
import doctest
import json
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.distributed.tensor as tdt
import torch.distributed.tensor.parallel as ttp
from torch import nn
from torch.distributed.tensor.debug import CommDebugMode as TorchCommDebugMode
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

import dtensor
import dtensor.comm.debug_mode
import simpg
from dtensor import comm
from dtensor.debug import CommDebugMode
from dtensor.comm.debug_mode import comm_counts_by_kind
from dtensor.parallel import ColwiseParallel, RowwiseParallel, fully_shard, parallelize_module
from tests.support.dropin_world import fresh_torch_caches

RUN_TIMEOUT_S = 30.0
funcol = torch.ops.c10d_functional


@pytest.fixture
def torch_mode_per_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's CommDebugMode assumes one rank per process: its module tracker registers
    process-wide module hooks, so on simpg each rank's tracker would also see the other rank
    threads' modules (and warn, or raise "The Module hierarchy tracking is wrong"). Confine
    each hook it registers to the thread that registered it, as one process per rank would."""
    import torch.distributed._tools.mod_tracker as mod_tracker
    import torch.distributed.tensor.debug._comm_mode as comm_mode

    def confined(register: Callable[..., Any]) -> Callable[..., Any]:
        def register_here(hook: Callable[..., Any], **kwargs: Any) -> Any:
            owner = threading.get_ident()
            return register(lambda *a: hook(*a) if threading.get_ident() == owner else None,
                            **kwargs)
        return register_here

    for module in (mod_tracker, comm_mode):
        for name in ("register_module_forward_pre_hook", "register_module_forward_hook",
                     "register_module_full_backward_pre_hook"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, confined(getattr(module, name)))


def _run(fn: Callable[[], Any], n: int = 2) -> list[Any]:
    return simpg.run(fn, n, timeout=RUN_TIMEOUT_S)


def _full(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# -- the same programs, torch's runtime and ours ------------------------------------------------
# Each takes a runtime namespace (``dtensor`` or ``torch.distributed.tensor``) and runs inside
# the mode; the tensors it starts from are made outside it.

def _shard0_to_replicate(rt: Any, t: Any, mesh: Any) -> None:
    t.redistribute(mesh, [rt.Replicate()])


def _shard0_to_shard1(rt: Any, t: Any, mesh: Any) -> None:
    t.redistribute(mesh, [rt.Shard(1)])


def _sum_sharded_dim_then_full(rt: Any, t: Any, mesh: Any) -> None:
    t.sum(0).full_tensor()  # Partial(sum) -> Replicate


def _partial_to_shard(rt: Any, t: Any, mesh: Any) -> None:
    t.sum(0).redistribute(mesh, [rt.Shard(0)])


def _matmul_sharded_contraction(rt: Any, t: Any, mesh: Any) -> None:
    (t.t() @ t).full_tensor()  # S(1) @ S(0) contracts the sharded dim: a Partial


PROGRAMS = {
    "S(0)->R": _shard0_to_replicate,
    "S(0)->S(1)": _shard0_to_shard1,
    "sum(S(0))->full": _sum_sharded_dim_then_full,
    "sum(S(0))->S(0)": _partial_to_shard,
    "S(0).t()@S(0)->full": _matmul_sharded_contraction,
}


def _count_program(rt: Any, mode_cls: type, program: Callable, n: int) -> list[Counter[str]]:
    full = _full(6, 4, seed=0)

    def body() -> Counter[str]:
        if rt is tdt:
            fresh_torch_caches()
        mesh = (dtensor if rt is dtensor else tdt).init_device_mesh("cpu", (n,))
        t = rt.distribute_tensor(full, mesh, [rt.Shard(0)])
        with mode_cls() as mode:
            program(rt, t, mesh)
        return comm_counts_by_kind(mode.get_comm_counts())

    return _run(body, n)


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_redistribute_and_op_programs_count_what_torch_counts(name: str, n: int) -> None:
    theirs = _count_program(tdt, TorchCommDebugMode, PROGRAMS[name], n)
    ours = _count_program(dtensor, CommDebugMode, PROGRAMS[name], n)
    for r in range(n):
        if name == "S(0)->S(1)":
            # torch 2.13 on a CPU group runs Shard(0)->Shard(1) as an all_gather and a local
            # chunk (it logs "CPU process group does not support alltoall"); we send each rank
            # only its piece with one all_to_all, which every backend here has.
            assert theirs[r] == Counter(all_gather=1) and ours[r] == Counter(all_to_all=1)
        else:
            assert ours[r] == theirs[r], (name, r)


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net1 = nn.Linear(8, 16)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net2(self.relu(self.net1(x)))


def _plans(torch_side: bool) -> dict[str, dict[str, Any]]:
    """A colwise + rowwise plan, and the same with sequence-sharded activations on the way in
    and out (an all_gather before net1, a reduce_scatter after net2, both in a style's hook)."""
    ns = ttp if torch_side else dtensor.parallel
    rt = tdt if torch_side else dtensor
    return {
        "tp": {"net1": ns.ColwiseParallel(), "net2": ns.RowwiseParallel()},
        "sp": {"net1": ns.ColwiseParallel(input_layouts=rt.Shard(0)),
               "net2": ns.RowwiseParallel(output_layouts=rt.Shard(0))},
    }


def _mlp_forward_backward(mode_cls: type, torch_side: bool, plan: str) -> list[dict[str, Any]]:
    x = _full(4, 8, seed=1)

    def body() -> dict[str, Any]:
        if torch_side:
            fresh_torch_caches()
        torch.manual_seed(0)
        model = MLP()
        if torch_side:
            mesh = tdt.init_device_mesh("cpu", (2,))
            ttp.parallelize_module(model, mesh, _plans(True)[plan])
        else:
            mesh = dtensor.init_device_mesh("cpu", (2,))
            parallelize_module(model, mesh, _plans(False)[plan])
        mine = x if plan == "tp" else x.chunk(2)[dist.get_rank()]
        with mode_cls() as mode:
            model(mine.clone().requires_grad_()).sum().backward()
        modules = {fqn: {phase: comm_counts_by_kind(c) for phase, c in by_phase.items()}
                   for fqn, by_phase in mode.comm_module_counts.items()}
        return {"counts": comm_counts_by_kind(mode.get_comm_counts()), "modules": modules,
                "sharding": {k: tuple(str(p) for p in v)
                             for k, v in mode.get_sharding_info().items()},
                "params": {fqn: sorted(ps) for fqn, ps in mode.get_parameter_info().items()}}

    if not torch_side:
        return _run(body)
    with warnings.catch_warnings():
        # torch's sequence-parallel backward reduce-scatters the input's gradient, which
        # this program never reads, and never waits on it (torch's own WorkRegistry warns
        # about it at exit too): simpg's UnwaitedWorkWarning says the same, not our concern
        warnings.simplefilter("ignore", simpg.UnwaitedWorkWarning)
        return _run(body)


# Per module, (forward, backward): what torch's mode reports over torch's runtime.
MLP_EXPECTED = {
    # net2's partial sums reduced in its output hook; net1's input gradient is a partial sum
    "tp": {"MLP.net1": ({}, {"all_reduce": 1}), "MLP.net2": ({"all_reduce": 1}, {})},
    # the input gathered in net1's hook (its gradient reduce-scattered back), the output
    # reduce-scattered in net2's hook (its gradient gathered back)
    "sp": {"MLP.net1": ({"all_gather": 1}, {"reduce_scatter": 1}),
           "MLP.net2": ({"reduce_scatter": 1}, {"all_gather": 1})},
}
# What ours issues on top: a plain sequence-sharded input's global size is gathered (one
# int64 per rank) where torch's from_local assumes even pieces (Note [uneven local inputs] in
# dtensor/parallel/styles.py).
OURS_EXTRA = {"tp": {}, "sp": {"MLP.net1": ({"all_gather": 1}, {})}}


def _by_module(expected: dict[str, tuple[dict[str, int], dict[str, int]]]
               ) -> dict[str, dict[str, Counter[str]]]:
    """{fqn: (forward, backward)} -> comm_module_counts by kind, ancestors included."""
    out: dict[str, dict[str, Counter[str]]] = {}
    for fqn, (fw, bw) in expected.items():
        for name in ("Global", "MLP", fqn):
            phases = out.setdefault(name, {"forward": Counter(), "backward": Counter()})
            phases["forward"].update(fw)
            phases["backward"].update(bw)
    return out


@pytest.mark.usefixtures("torch_mode_per_thread")
@pytest.mark.parametrize("plan", list(MLP_EXPECTED))
def test_parallel_mlp_counts_and_attribution_match_torch(plan: str) -> None:
    theirs = _mlp_forward_backward(TorchCommDebugMode, torch_side=True, plan=plan)
    ours = _mlp_forward_backward(CommDebugMode, torch_side=False, plan=plan)
    extra = _by_module(OURS_EXTRA[plan])
    for mine, their in zip(ours, theirs):
        assert their["modules"] == _by_module(MLP_EXPECTED[plan])
        for fqn, phases in their["modules"].items():
            for phase, counts in phases.items():
                assert mine["modules"][fqn][phase] == counts + extra.get(fqn, {}).get(
                    phase, Counter()), (fqn, phase)
        assert mine["counts"] == sum(extra.get("Global", {}).values(), their["counts"])
        assert mine["sharding"] == their["sharding"]
        assert mine["params"] == their["params"] == {"MLP.net1": ["bias", "weight"],
                                                     "MLP.net2": ["bias", "weight"]}


# -- module attribution, reports ----------------------------------------------------------------

def _mlp_mode(program: Callable[[nn.Module, torch.Tensor], None] | None = None
              ) -> list[CommDebugMode]:
    x = _full(4, 8, seed=1)

    def body() -> CommDebugMode:
        torch.manual_seed(0)
        model = MLP()
        mesh = dtensor.init_device_mesh("cpu", (2,))
        parallelize_module(model, mesh, {"net1": ColwiseParallel(), "net2": RowwiseParallel()})
        with CommDebugMode() as mode:
            if program is None:
                model(x.clone().requires_grad_()).sum().backward()
            else:
                program(model, x)
        return mode

    return _run(body)


def test_records_name_module_phase_group_and_bytes() -> None:
    mode = _mlp_mode()[1]
    assert [(r.kind, r.path, r.phase, r.group_ranks, r.input_bytes, r.output_bytes)
            for r in mode.records] == [
        ("all_reduce", ("Global", "MLP", "MLP.net2"), "forward", (0, 1), 4 * 8 * 4, 4 * 8 * 4),
        ("all_reduce", ("Global", "MLP", "MLP.net1"), "backward", (0, 1), 4 * 8 * 4, 4 * 8 * 4),
    ]
    assert mode.get_module_counts("MLP.net1", "backward") == Counter(all_reduce=1)
    assert mode.get_module_counts("MLP.net1", "forward") == Counter()
    assert mode.get_module_counts("MLP") == Counter(all_reduce=2)
    with pytest.raises(ValueError, match="phase 'fwd'"):
        mode.get_module_counts("MLP", "fwd")


def test_backward_of_a_module_whose_input_needs_no_grad_lasts_to_the_end() -> None:
    def program(model: nn.Module, x: torch.Tensor) -> None:
        model(x).sum().backward()  # x needs no grad: no input grad, no all_reduce backward

    mode = _mlp_mode(program)[0]
    assert [(r.module, r.phase) for r in mode.records] == [("MLP.net2", "forward")]
    assert mode.advanced_module_tracker._bw == []  # cleared when the backward pass ended


def test_forward_without_backward_leaves_only_global_on_the_stack() -> None:
    def program(model: nn.Module, x: torch.Tensor) -> None:
        with torch.no_grad():
            model(x)

    mode = _mlp_mode(program)[0]
    assert mode.get_comm_counts_by_kind() == Counter(all_reduce=1)
    assert [name for name, _ in mode.advanced_module_tracker._fw] == ["Global"]
    assert mode.advanced_module_tracker.name == "Global"


def test_counts_are_keyed_like_torch_with_missing_keys_zero() -> None:
    mode = _mlp_mode()[0]
    counts = mode.get_comm_counts()
    assert counts[funcol.all_reduce] == 2 and mode.get_total_counts() == 2
    assert counts[funcol.all_gather_into_tensor] == 0
    assert counts[funcol.reduce_scatter_tensor] == 0 and counts[funcol.all_to_all_single] == 0
    assert mode.get_comm_counts_by_kind() == Counter(all_reduce=2)
    assert repr(mode) == "CommDebugMode(get_total_counts()=2)"


def test_tracing_table_file_and_json(tmp_path: Any) -> None:
    mode = _mlp_mode()[0]
    table = mode.generate_comm_debug_tracing_table(noise_level=0)
    assert "MLP.net2" in table and "FORWARD PASS" in table and "module type" not in table
    assert "c10d_functional.all_reduce: 1" in table
    detailed = mode.generate_comm_debug_tracing_table(noise_level=2)
    assert "*weight: (Shard(dim=1),)" in detailed  # net2's parameter placements
    assert "all_reduce over ranks [0, 1]: (4, 8) float32, 128 bytes in" in detailed
    path = tmp_path / "log.txt"
    mode.log_comm_debug_tracing_table_to_file(str(path), noise_level=1)
    text = path.read_text()
    assert "\033" not in text and "*module type: class 'torch.nn.modules.linear.Linear'" in text

    dump = tmp_path / "log.json"
    mode.generate_json_dump(str(dump), noise_level=2)
    tree = json.loads(dump.read_text())
    assert tree["fqn"] == "Global"
    assert tree["collectives_forward"] == [["c10d_functional.all_reduce", 1]]
    (mlp,) = tree["children"]
    net1, relu, net2 = mlp["children"]
    assert [net1["fqn"], relu["fqn"], net2["fqn"]] == ["MLP.net1", "MLP.relu", "MLP.net2"]
    assert net1["collectives_backward"] == [["c10d_functional.all_reduce", 1]]
    assert net1["collectives_forward"] == [] and net2["collectives_backward"] == []
    assert net2["parameters"] == [["weight", "(Shard(dim=1),)"], ["bias", "(Replicate(),)"]]
    assert len(net2["records_forward"]) == 1


class Checkpointed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mlp = MLP()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.mlp, x, use_reentrant=False)


@pytest.mark.parametrize("early_stop", [True, False])
def test_activation_checkpointing_counts_a_recomputed_forward_in_backward(
        early_stop: bool) -> None:
    x = _full(4, 8, seed=1)

    def body() -> list[tuple[str, str, str]]:
        torch.manual_seed(0)
        model = Checkpointed()
        mesh = dtensor.init_device_mesh("cpu", (2,))
        parallelize_module(model.mlp, mesh, {"net1": ColwiseParallel(),
                                             "net2": RowwiseParallel()})
        with CommDebugMode() as mode, set_checkpoint_early_stop(early_stop):
            model(x.clone().requires_grad_()).sum().backward()
        return [(r.kind, r.module, r.phase) for r in mode.records]

    # early stop: the recomputation ends once net1's saved tensors are back, before net2's
    # all_reduce; without it the whole forward runs again, in backward
    again = [] if early_stop else [("all_reduce", "Checkpointed.mlp.net2", "backward")]
    assert _run(body)[0] == [("all_reduce", "Checkpointed.mlp.net2", "forward"), *again,
                             ("all_reduce", "Checkpointed.mlp.net1", "backward")]


def test_fully_shard_gathers_and_reduce_scatters_count_for_their_module() -> None:
    """Each module's parameters: gathered before its forward, gathered again before its
    backward (freed after forward), their gradients reduce-scattered in its backward (Note
    [module boundaries]). The root holds no parameters of its own. No torch reference: torch's
    fully_shard calls c10d collectives directly, and on simpg's process group those do not pass
    the dispatcher, where torch's mode counts (it reports none)."""
    x = _full(4, 8, seed=1)

    def body() -> list[tuple[str, str, str]]:
        torch.manual_seed(0)
        model = MLP()
        mesh = dtensor.init_device_mesh("cpu", (2,))
        for module in (model.net1, model.net2, model):
            fully_shard(module, mesh)
        with CommDebugMode() as mode:
            model(x.clone().requires_grad_()).sum().backward()
        return [(r.kind, r.module, r.phase) for r in mode.records]

    # net1's backward gather is prefetched by net2's backward (issued there, so counted
    # there); net1's reduce-scatter, left in flight and waited for after net1's backward,
    # counts for net1
    assert _run(body) == [[
        ("all_gather", "MLP.net1", "forward"), ("all_gather", "MLP.net2", "forward"),
        ("all_gather", "MLP.net2", "backward"), ("all_gather", "MLP.net2", "backward"),
        ("reduce_scatter", "MLP.net2", "backward"), ("reduce_scatter", "MLP.net1", "backward"),
    ]] * 2


# -- scope: per rank, nesting, block edges ------------------------------------------------------

def test_nothing_is_counted_outside_the_block() -> None:
    full = _full(6, 4, seed=2)

    def body() -> tuple[int, int, list[str], bool]:
        mesh = dtensor.init_device_mesh("cpu", (2,))
        t = dtensor.distribute_tensor(full, mesh, [dtensor.Shard(0)])
        t.full_tensor()  # before: not counted
        with CommDebugMode() as mode:
            t.full_tensor()
        t.full_tensor()  # after: not counted
        inner_after = CommDebugMode()  # never entered: counts nothing
        t.full_tensor()
        return (mode.get_total_counts(), inner_after.get_total_counts(),
                [r.kind for r in mode.records], dtensor.comm.debug_mode._comm_log.get() is
                dtensor.comm.debug_mode._OPEN)

    for result in _run(body):
        assert result == (1, 0, ["all_gather"], True)
    assert not dtensor.comm.debug_mode._OPEN and not dtensor.comm.debug_mode._hooks


def test_reentering_clears_and_an_open_mode_cannot_be_entered_again() -> None:
    full = _full(6, 4, seed=3)

    def body() -> list[int]:
        mesh = dtensor.init_device_mesh("cpu", (2,))
        t = dtensor.distribute_tensor(full, mesh, [dtensor.Shard(0)])
        mode = CommDebugMode()
        with mode:
            t.full_tensor()
            t.full_tensor()
            with pytest.raises(RuntimeError, match="already open"):
                mode.__enter__()
        first = mode.get_total_counts()
        with mode:
            t.full_tensor()
        return [first, mode.get_total_counts()]

    assert _run(body) == [[2, 1], [2, 1]]


def test_nested_modes_both_count_the_inner_collectives() -> None:
    full = _full(6, 4, seed=4)

    def body() -> tuple[Counter[str], Counter[str]]:
        mesh = dtensor.init_device_mesh("cpu", (2,))
        t = dtensor.distribute_tensor(full, mesh, [dtensor.Shard(0)])
        with CommDebugMode() as outer:
            t.full_tensor()
            with CommDebugMode() as inner:
                t.sum(0).full_tensor()
            t.redistribute(mesh, [dtensor.Shard(1)])
        return outer.get_comm_counts_by_kind(), inner.get_comm_counts_by_kind()

    for outer, inner in _run(body):
        assert outer == Counter(all_gather=1, all_reduce=1, all_to_all=1)
        assert inner == Counter(all_reduce=1)


def test_counts_are_per_rank() -> None:
    """Only rank 0 opens a mode; on a 2x2 mesh each rank's records name its own group."""
    full = _full(6, 4, seed=5)

    def body() -> list[tuple[str, tuple[int, ...]]] | None:
        mesh = dtensor.init_device_mesh("cpu", (2, 2))
        t = dtensor.distribute_tensor(full, mesh, [dtensor.Replicate(), dtensor.Shard(0)])
        if dist.get_rank() in (0, 3):
            with CommDebugMode() as mode:
                t.redistribute(mesh, [dtensor.Replicate(), dtensor.Replicate()])
            return [(r.kind, r.group_ranks) for r in mode.records]
        t.redistribute(mesh, [dtensor.Replicate(), dtensor.Replicate()])
        return None

    assert _run(body, 4) == [[("all_gather", (0, 1))], None, None, [("all_gather", (2, 3))]]


def test_a_backward_on_another_thread_finds_the_mode_of_the_rank_that_launched_it() -> None:
    """GPU backward nodes run on autograd's device threads, outside the caller's context
    (Note [recording collectives]); a context holding all of this rank's variables (simpg's
    among them) except the mode's stands in for such a thread."""

    def elsewhere(fn: Callable[..., Any], *args: Any) -> Any:
        ctx = contextvars.Context()
        for var, value in contextvars.copy_context().items():
            if var is not dtensor.comm.debug_mode._comm_log:
                ctx.run(var.set, value)
        return ctx.run(fn, *args)

    class ReduceInBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            return x.clone()

        @staticmethod
        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            return elsewhere(comm.all_reduce, grad, dist.group.WORLD)

    def body() -> list[tuple[str, str]]:
        x = torch.ones(3, requires_grad=True)
        with CommDebugMode() as mode:
            ReduceInBackward.apply(x).sum().backward()
        return [(r.kind, r.phase) for r in mode.records]

    assert _run(body) == [[("all_reduce", "backward")]] * 2


def test_a_fallback_reduce_scatter_counts_once() -> None:
    # a backend without reduce_scatter: dtensor builds it from all_to_all

    def body() -> tuple[Counter[str], torch.Tensor]:
        pieces = [torch.full((2,), float(dist.get_rank() + i)) for i in range(2)]
        with CommDebugMode() as mode:
            out = comm.reduce_scatter(pieces, dist.group.WORLD)
        return mode.get_comm_counts_by_kind(), out

    with simpg.behave_as("portable"):
        results = _run(body)
    for r, (counts, out) in enumerate(results):
        assert counts == Counter(reduce_scatter=1)
        assert torch.equal(out, torch.full((2,), float(2 * r + 1)))


def test_async_collectives_count_when_issued() -> None:
    def body() -> list[str]:
        with CommDebugMode() as mode:
            handle = comm.all_gather(torch.ones(2), [(2,), (2,)], dist.group.WORLD,
                                     async_op=True)
        handle.wait()
        return [str(r) for r in mode.records]

    assert _run(body) == [[("all_gather over ranks [0, 1]: (2,) float32, 8 bytes in, "
                            "16 bytes out")]] * 2


def test_torch_counts_get_readable_keys() -> None:
    assert comm_counts_by_kind({funcol.all_reduce: 2, torch.ops._c10d_functional.all_reduce: 1,
                                funcol.all_gather_into_tensor: 0}) == Counter(all_reduce=3)
    assert comm_counts_by_kind({torch.ops._c10d_functional.broadcast: 1}) == Counter(
        {"_c10d_functional.broadcast": 1})


def test_doctests() -> None:
    assert doctest.testmod(dtensor.comm.debug_mode, raise_on_error=False).failed == 0
