"""torch.compile of code on our DTensors (dtensor/compile.py): compiled equals eager, forward
and backward, on aot_eager and inductor; collectives are traced as functional collectives;
each simulated rank runs a graph traced for its own coordinate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from tests.support.gloo_runner import load_program, run_program_on_gloo
from tests.support.paths import PROGRAMS
from torch import nn
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.testing import CompileCounterWithBackend
from torch._dynamo.utils import counters
from torch._functorch.aot_autograd import make_boxed_func

import simpg
from dtensor import (
    DTensor,
    Partial,
    Replicate,
    Shard,
    comm,
    distribute_tensor,
    init_device_mesh,
)
from dtensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

# torch's own warnings while compiling, not ours: inductor calls torch.jit.script_method;
# dynamo reads .grad of a non-leaf DTensor (a style's output) while tracing a forward hook
pytestmark = [
    pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated"
                               ":DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf"
                               ":UserWarning"),
]
COMPILE_S = 600  # a rank may wait this long on the others' compiles (they hold dynamo's lock)


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Any:
    torch._dynamo.reset()  # caches are process-wide: start each test from none
    counters.clear()
    yield
    torch._dynamo.reset()


def _compile(fn: Any, backend: Any) -> Any:
    return torch.compile(fn, backend=backend, fullgraph=True, dynamic=False)


@pytest.mark.world(2, timeout=COMPILE_S)
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_pointwise_keeps_placements(backend: str) -> None:
    mesh = init_device_mesh("cpu", (2,))
    a = distribute_tensor(torch.arange(10.0).reshape(5, 2), mesh, [Shard(0)])  # rows 3, 2
    b = distribute_tensor(torch.ones(5, 2), mesh, [Shard(0)])
    out = _compile(lambda a, b: a * 2 + b, backend)(a, b)
    assert type(out) is DTensor and out.placements == (Shard(0),) and out.shape == (5, 2)
    torch.testing.assert_close(out.to_local(), (a * 2 + b).to_local())


def _recording_backend(graphs: list[torch.fx.GraphModule]) -> Any:
    def keep(gm: torch.fx.GraphModule, _inputs: Any) -> Any:
        graphs.append(gm)
        return make_boxed_func(gm)

    return aot_autograd(fw_compiler=keep, bw_compiler=keep)


def _targets(gm: torch.fx.GraphModule) -> set[str]:
    return {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}


@pytest.mark.world(2, timeout=COMPILE_S)
def test_collectives_are_functional_in_the_graph() -> None:
    mesh = init_device_mesh("cpu", (2,))
    x = distribute_tensor(torch.randn(7, 5), mesh, [Shard(1)])  # columns 3, 2
    w = distribute_tensor(torch.randn(5, 3), mesh, [Shard(0)]).requires_grad_()

    def fn(x: DTensor, w: DTensor) -> DTensor:
        y = x @ w  # Partial(sum)
        return y.redistribute(mesh, [Replicate()]).redistribute(mesh, [Shard(0)]).sum()

    graphs: list[torch.fx.GraphModule] = []
    loss = _compile(fn, _recording_backend(graphs))(x, w)
    loss.backward()
    fw, bw = (_targets(g) for g in graphs)
    assert "_c10d_functional.all_reduce.default" in fw
    assert "_c10d_functional.wait_tensor.default" in fw
    # a graph holds no in-place c10d op (they would write into fake tensors)
    assert not any(t.startswith("c10d.") for t in fw | bw)
    ref = fn(x, w.detach().requires_grad_())
    torch.testing.assert_close(loss.to_local(), ref.to_local())


@pytest.mark.world(2, timeout=COMPILE_S)
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_backward_matches_eager(backend: str) -> None:
    mesh = init_device_mesh("cpu", (2,))
    torch.manual_seed(0)
    w_full, x_full = torch.randn(5, 3), torch.randn(7, 5)

    def fn(x: DTensor, w: DTensor) -> DTensor:
        return (x @ w).redistribute(mesh, [Replicate()]).relu().pow(2).sum()

    results = []
    for f in (fn, _compile(fn, backend)):
        w = distribute_tensor(w_full, mesh, [Shard(0)]).requires_grad_()  # rows 3, 2
        loss = f(distribute_tensor(x_full, mesh, [Shard(1)]), w)
        loss.backward()
        assert w.grad.placements == (Shard(0),)
        results.append((loss.to_local(), w.grad.to_local()))
    torch.testing.assert_close(results[1], results[0])


@pytest.mark.world(2, timeout=COMPILE_S)
def test_an_uneven_layouts_compiled_backward_is_one_program_on_every_rank() -> None:
    """Note [one cut on every rank]: aminmax's backward counts the ties with a reduce-scatter
    whose pieces are one element on rank 0 and none on rank 1; the partitioner once saved
    the empty piece on rank 1 and issued the reduce-scatter there a second time (simpg's
    mismatch; a hang on NCCL). Every rank now issues the same collectives."""
    mesh = init_device_mesh("cpu", (2,))
    torch.manual_seed(0)
    full = torch.randn(5, 5, 5)
    grads = []
    for f in (torch.aminmax, _compile(torch.aminmax, "aot_eager")):
        x = distribute_tensor(full, mesh, [Shard(0)]).requires_grad_()
        low, high = f(x)
        torch.autograd.backward([low, high], [torch.ones_like(low), torch.ones_like(high)])
        grads.append(x.grad.full_tensor())
    torch.testing.assert_close(grads[1], grads[0])
    assert grads[0].sum() == 2  # one minimum and one maximum


@pytest.mark.world(4, timeout=COMPILE_S)
def test_two_d_mesh_all_to_all_and_backward() -> None:
    # uneven pieces of a 7 x 5 tensor on a 2 x 2 mesh; (S(0), S(1)) -> (S(1), S(0)) is an
    # all_to_all per group, each rank's offsets its own
    mesh = init_device_mesh("cpu", (2, 2))
    full = torch.arange(35.0).reshape(7, 5)

    def fn(x: DTensor, w: DTensor) -> DTensor:
        y = (x * 2).redistribute(mesh, [Shard(1), Shard(0)])
        return (y.redistribute(mesh, [Replicate(), Replicate()]) * w).sum()

    results = []
    for f in (fn, _compile(fn, "aot_eager")):
        w = distribute_tensor(torch.ones(7, 5), mesh, [Replicate(), Shard(0)]).requires_grad_()
        loss = f(distribute_tensor(full, mesh, [Shard(0), Shard(1)]), w)
        loss.backward()
        results.append((loss.full_tensor(), w.grad.to_local()))
    torch.testing.assert_close(results[1], results[0], rtol=0, atol=0)


@pytest.mark.world(3, timeout=COMPILE_S)
def test_each_rank_runs_its_own_graph() -> None:
    # Note [the mesh in a graph]: one code object, three ranks in one process, a mesh from a
    # closure and no DTensor input: each rank's graph slices its own uneven piece
    mesh = init_device_mesh("cpu", (3,))

    def fn(x: torch.Tensor) -> torch.Tensor:
        dt = DTensor.from_local(x, mesh, [Replicate()])
        return dt.redistribute(mesh, [Shard(0)]).to_local()

    x = torch.arange(5.0)
    got = _compile(fn, "aot_eager")(x)
    torch.testing.assert_close(got, x.tensor_split([2, 4])[dist.get_rank()])


class _MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(6, 10)  # 10 features over 2 ranks: Colwise pieces of 5
        self.down = nn.Linear(10, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def _mlp_step(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    loss = model(x).pow(2).mean()
    loss.backward()
    return loss.detach()


@pytest.mark.world(2, timeout=COMPILE_S)
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_tensor_parallel_mlp_step(backend: str) -> None:
    mesh = init_device_mesh("cpu", (2,))
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(1))
    results = []
    for compiled in (False, True):
        torch.manual_seed(0)
        model = parallelize_module(_MLP(), mesh, {"up": ColwiseParallel(),
                                                  "down": RowwiseParallel()})
        run = torch.compile(model, backend=backend, dynamic=False) if compiled else model
        loss = _mlp_step(run, x)
        # Note [placements in a graph]: the styles' hooks compare placements without a break
        assert not counters["graph_break"], dict(counters["graph_break"])
        grads = {n: p.grad.to_local() for n, p in model.named_parameters()}
        assert model.up.weight.grad.placements == (Shard(0),)
        results.append((loss, grads))
    torch.testing.assert_close(results[1], results[0])


# -- dynamic shapes (Note [symbolic sizes] in dtensor.symbolic) ------------------------------
@pytest.mark.world(2, timeout=COMPILE_S)
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_dynamic_sharded_dim_compiles_once_for_every_size(backend: str) -> None:
    mesh = init_device_mesh("cpu", (2,))
    count = CompileCounterWithBackend(backend)
    fn = torch.compile(lambda a: (a * 2 + 1).sum(0), backend=count, fullgraph=True)
    for rows in (6, 7, 9, 12, 5):  # even and uneven pieces over 2 ranks
        full = torch.arange(rows * 3.0).reshape(rows, 3)
        a = distribute_tensor(full, mesh, [Shard(0)])
        if rows == 6:
            torch._dynamo.mark_dynamic(a, 0)
        out = fn(a)
        assert out.placements == (Partial(),)
        # the output is rebuilt from the traced context: no SymInt of the trace survives in it
        assert all(type(d) is int for d in out._spec.shape + out._spec.stride)
        torch.testing.assert_close(out.full_tensor(), (full * 2 + 1).sum(0))
    assert count.frame_count == 1


@pytest.mark.world(2, timeout=COMPILE_S)
def test_a_dynamic_partial_input_reduces_with_symbolic_sizes() -> None:
    # a non-linear op on a Partial reduces first: the prepared collectives kept sizes as
    # ints, pinning the dim (a recompile per size) and leaking a SymInt into the next trace
    mesh = init_device_mesh("cpu", (2,))
    count = CompileCounterWithBackend("aot_eager")
    fn = torch.compile(lambda a: a.abs() * 2, backend=count, fullgraph=True)
    for rows in (6, 7, 9):
        local = torch.arange(rows * 3.0).reshape(rows, 3) - 4 * (1 + dist.get_rank())
        a = DTensor.from_local(local, mesh, [Partial()])
        if rows == 6:
            torch._dynamo.mark_dynamic(a, 0)
        whole = sum(torch.arange(rows * 3.0).reshape(rows, 3) - 4 * (1 + r) for r in range(2))
        torch.testing.assert_close(fn(a).full_tensor(), whole.abs() * 2)
    assert count.frame_count == 1


class _MLP3(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(6, 8), nn.Linear(8, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def _step_at_lengths(backend: str, mark: bool) -> int:
    """A tensor-parallel step at four sequence lengths, compiled, against one device: loss
    and every gradient equal; returns the number of compiles."""
    mesh = init_device_mesh("cpu", (2,))
    torch.manual_seed(0)
    model = parallelize_module(_MLP3(), mesh, {"up": ColwiseParallel(),
                                               "down": RowwiseParallel()})
    plain = _MLP3()
    plain.load_state_dict({k: v.full_tensor() for k, v in model.state_dict().items()})
    count = CompileCounterWithBackend(backend)
    run = torch.compile(model, backend=count)
    for seq in (4, 5, 8, 11):
        x = torch.randn(2, seq, 6, generator=torch.Generator().manual_seed(seq))
        if mark and seq == 4:
            torch._dynamo.mark_dynamic(x, 1)
        loss = run(x).pow(2).mean()
        loss.backward()
        want = plain(x).pow(2).mean()
        want.backward()
        torch.testing.assert_close(loss, want)
    grads = dict(plain.named_parameters())
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad.full_tensor(), grads[name].grad)
    return count.frame_count


@pytest.mark.world(2, timeout=COMPILE_S)
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_tensor_parallel_step_marked_dynamic_never_recompiles(backend: str) -> None:
    assert _step_at_lengths(backend, mark=True) == 1


@pytest.mark.world(2, timeout=COMPILE_S)
def test_automatic_dynamic_recompiles_once() -> None:
    # torch's default: the first shape static, the first change recompiles with symbolic sizes
    assert _step_at_lengths("aot_eager", mark=False) == 2


# -- the functional collectives themselves, run eagerly: same results as comm's ----------------
@pytest.mark.world(3)
def test_functional_collectives_equal_comm() -> None:
    me, group = dist.get_rank(), dist.group.WORLD
    shapes = [(2, 3), (2, 3), (1, 3)]  # uneven, as Shard(0) of 5 rows over 3 ranks
    mine = torch.arange(6.0)[: 3 * shapes[me][0]].reshape(shapes[me]) + 10 * me
    caps = comm.capabilities
    for got, want in zip(comm.functional.all_gather(mine, shapes, group, caps=caps),
                         comm.all_gather(mine, shapes, group)):
        torch.testing.assert_close(got, want)
    for op in ("sum", "avg", "max"):
        torch.testing.assert_close(comm.functional.all_reduce(mine[:1], group, op, caps=caps),
                                   comm.all_reduce(mine[:1], group, op))
        pieces = [torch.full(s, float(me + 1)) for s in shapes]
        torch.testing.assert_close(comm.functional.reduce_scatter(pieces, group, op, caps=caps),
                                   comm.reduce_scatter(pieces, group, op))
    sends = [torch.full((j + 1,), float(me)) for j in range(3)]
    outs = [(me + 1,)] * 3
    for got, want in zip(comm.functional.all_to_all(sends, outs, group, caps=caps),
                         comm.all_to_all(sends, outs, group)):
        torch.testing.assert_close(got, want)


@pytest.mark.world(2)
def test_partial_tangent_is_coerced_to_replicate() -> None:
    mesh = init_device_mesh("cpu", (2,))
    p = DTensor.from_local(torch.ones(2), mesh, [Partial()])
    coerced = p.__coerce_tangent_metadata__()
    assert coerced.placements == (Replicate(),)
    torch.testing.assert_close(coerced.to_local(), torch.full((2,), 2.0))
    r = distribute_tensor(torch.ones(4), mesh, [Replicate()])
    assert r.__coerce_tangent_metadata__() is r
    ctx = p.__tensor_flatten__()[1]
    moved = r.__coerce_same_metadata_as_tangent__(ctx)
    assert moved.placements == (Partial(),) and moved.full_tensor().tolist() == [1.0] * 4
    assert r.__coerce_same_metadata_as_tangent__(ctx, expected_type=torch.Tensor) is None


# -- the same compiled program on real gloo processes ------------------------------------------
PROGRAM = PROGRAMS / "compile_program.py"


# slow tier: compiled on real gloo processes (35 s); compiled on simpg is the default run's
@pytest.mark.slow
@pytest.mark.gloo
def test_compiled_program_on_gloo_matches_simpg(tmp_path: Path) -> None:
    on_simpg = simpg.run(load_program(PROGRAM).program, 2, timeout=COMPILE_S)
    on_gloo = run_program_on_gloo(PROGRAM, 2, tmp_path, timeout_s=COMPILE_S)
    for rank, (sim, real) in enumerate(zip(on_simpg, on_gloo)):
        for what in ("loss", "grad", "slice"):
            assert torch.equal(sim[f"compiled {what}"], sim[f"eager {what}"]), (rank, what)
            assert torch.equal(real[f"compiled {what}"], real[f"eager {what}"]), (rank, what)
            assert torch.equal(real[f"compiled {what}"], sim[f"compiled {what}"]), (rank, what)
    x_full = torch.arange(35, dtype=torch.float64).reshape(7, 5) % 7
    assert torch.equal(on_gloo[1]["compiled slice"], x_full[4:])  # rows 4, 3 over 2 ranks


@pytest.mark.world(2, timeout=COMPILE_S)
def test_a_compiled_op_that_would_move_its_written_inputs_fails_clearly() -> None:
    # eager, an op writing an input asks every rank whether the piece may move (an
    # all-reduce); traced, that wait sat inside dynamo's compile lock the other rank needs
    # (a deadlock), and a functionalized graph cannot swap an input's piece: refused by name
    mesh = init_device_mesh("cpu", (2,))
    full = torch.arange(24.0).reshape(4, 3, 2) / 7
    x, weight, bias, mean, var = (
        DTensor.from_local(t / 2, mesh, [Partial()])  # every input a sum of halves
        for t in (full, torch.ones(3), torch.zeros(3), torch.zeros(3), torch.ones(3)))
    fn = _compile(lambda *a: torch.ops.aten.native_batch_norm(*a, True, 0.1, 1e-5),
                  "aot_eager")
    with pytest.raises(Exception, match="native_batch_norm.*in place"):
        fn(x, weight, bias, mean, var)
