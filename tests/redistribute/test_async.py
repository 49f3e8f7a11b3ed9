"""``DTensor.redistribute(..., async_op=True)`` (Note [async redistribute] in
dtensor/comm/handles.py).

The result comes back with its last collective in flight: these tests see it in flight when
``redistribute`` returns (its piece not waited, simpg's trace without the collective's
record on the rank that ran first) and right at every kind of first use. Every world runs
with ``strict_async=True``: a collective left unwaited fails the test.
"""

from __future__ import annotations

import copy
import io
import pickle
import time

import pytest
import torch
import torch.distributed as dist
from torch import nn

import simpg
from dtensor import DTensor, Partial, Replicate, Shard, distribute_tensor, init_device_mesh
from dtensor.dispatch import native
from dtensor.comm import AsyncCollectiveError, AsyncCollectiveTensor, Handle
from dtensor.parallel import (ColwiseParallel, PrepareModuleInput, PrepareModuleOutput,
                              RowwiseParallel, parallelize_module)
from tests.support.gloo_runner import assert_bit_for_bit, load_program, run_program_on_gloo
from tests.support.paths import PROGRAMS

# (source, target, what the last step issues), on a 2x2 mesh for the 2-d rows
MOVES_1D = [
    ((Shard(0),), (Replicate(),), "all_gather"),
    ((Shard(1),), (Replicate(),), "all_gather"),
    ((Partial(),), (Replicate(),), "all_reduce"),
    ((Partial(),), (Shard(0),), "reduce_scatter"),
    ((Shard(0),), (Shard(1),), "all_to_all"),
]
MOVES_2D = [
    ((Shard(0), Shard(1)), (Replicate(), Replicate()), "all_gather"),
    ((Partial(), Shard(0)), (Replicate(), Replicate()), "all_gather"),
]


def _id(move: tuple) -> str:
    src, dst, _ = move
    return "".join(map(str, src)) + "->" + "".join(map(str, dst))


def _run(body, n: int = 4):
    return simpg.run(body, n, strict_async=True)


def _mesh_for(src: tuple) -> tuple[int, ...]:
    return (2, 2) if len(src) == 2 else (4,)


def _source(full: torch.Tensor, mesh, src: tuple) -> DTensor:
    """``full`` laid out in ``src``; a Partial holds full / (members of its group) each."""
    plain = [Replicate() if isinstance(p, Partial) else p for p in src]
    x = distribute_tensor(full, mesh, plain)
    if plain == list(src):
        return x
    sizes = [mesh.size(d) for d, p in enumerate(src) if isinstance(p, Partial)]
    piece = x.to_local() / float(torch.tensor(sizes).prod())
    return DTensor.from_local(piece, mesh, src, shape=full.shape)


def _full(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.arange(float(torch.tensor(shape).prod())).reshape(shape)


# -- in flight at return ----------------------------------------------------------------------
@pytest.mark.parametrize("move", MOVES_1D + MOVES_2D, ids=_id)
@pytest.mark.parametrize("shape", [(8, 4), (7, 5)], ids=str)
def test_result_is_in_flight_when_redistribute_returns_and_right_at_first_use(move, shape):
    src, dst, _ = move

    def body():
        mesh = init_device_mesh("cpu", _mesh_for(src))
        x = _source(_full(shape), mesh, src)
        want = x.redistribute(mesh, dst).to_local()
        y = x.redistribute(mesh, dst, async_op=True)
        piece = y._local_tensor
        assert type(piece) is AsyncCollectiveTensor and not piece.completed()
        assert y.placements == dst and tuple(piece.shape) == tuple(want.shape)
        got = (y * 1).to_local()  # the first use waits
        assert piece.completed() and type(y._local_tensor) is torch.Tensor
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        torch.testing.assert_close(y.full_tensor(), _full(shape), rtol=0, atol=0)

    _run(body)


def test_collective_completes_after_the_local_work_done_meanwhile():
    """The overlap, from simpg's own records: on some rank the collective is not complete when
    ``redistribute`` returns, and completes only after the local work the rank did next. A
    synchronous redistribute returns after the completion on every rank."""
    marks: dict[int, dict[str, float]] = {}

    def body():
        mesh = init_device_mesh("cpu", (4,))
        x = distribute_tensor(_full((64, 16)), mesh, [Shard(0)])
        w = torch.randn(16, 16)
        with simpg.trace() as t:
            y = x.redistribute(mesh, [Replicate()], async_op=True)
            seen_at_return = len(t.records)
            returned = time.perf_counter()
            for _ in range(3):  # local work that does not need y
                w = torch.tanh(w @ w)
            local_done = time.perf_counter()
            out = y.to_local().sum()  # the first use
            seen_after_use = len(t.records)
        marks[dist.get_rank()] = {"returned": returned, "local_done": local_done,
                                  "at_return": seen_at_return, "after_use": seen_after_use,
                                  "end": t.records[0].end_s}
        return float(out)

    results = _run(body)
    assert results == [float(_full((64, 16)).sum())] * 4
    assert all(m["after_use"] == 1 for m in marks.values())
    overlapped = [r for r, m in marks.items() if m["at_return"] == 0]
    assert overlapped, f"every rank found the collective complete on return: {marks}"
    for r in overlapped:  # it completed while, or after, the rank computed
        assert marks[r]["end"] > marks[r]["local_done"] > marks[r]["returned"]


def test_two_moves_are_in_flight_together():
    def body():
        mesh = init_device_mesh("cpu", (4,))
        a = distribute_tensor(_full((8, 4)), mesh, [Shard(0)])
        b = distribute_tensor(_full((4, 8)), mesh, [Shard(1)])
        ya = a.redistribute(mesh, [Replicate()], async_op=True)
        yb = b.redistribute(mesh, [Shard(0)], async_op=True)
        assert not ya._local_tensor.completed() and not yb._local_tensor.completed()
        torch.testing.assert_close(yb.full_tensor(), _full((4, 8)))  # waited out of order
        torch.testing.assert_close(ya.to_local(), _full((8, 4)))

    _run(body)


def test_a_move_without_collectives_returns_a_finished_piece():
    def body():
        mesh = init_device_mesh("cpu", (4,))
        x = distribute_tensor(_full((8, 4)), mesh, [Replicate()])
        y = x.redistribute(mesh, [Shard(0)], async_op=True)  # a local slice
        assert type(y._local_tensor) is torch.Tensor
        same = x.redistribute(mesh, [Replicate()], async_op=True)
        assert type(same._local_tensor) is torch.Tensor
        torch.testing.assert_close(y.full_tensor(), _full((8, 4)))

    _run(body)


# -- every first use waits -------------------------------------------------------------------
def _op(y):
    return (y + y).full_tensor()


def _op_python_entry(y):
    with native.python_entry_only(DTensor):
        return (y + y).full_tensor()


def _list_op(y):
    return torch.cat([y, y]).full_tensor()[:4] + torch._foreach_mul([y], 1)[0].full_tensor()


def _in_place(y):
    y.add_(y)
    return y.full_tensor()


def _to_local(y):
    local = y.to_local()
    assert type(local) is AsyncCollectiveTensor and not local.completed()
    return DTensor.from_local(local + local, y.device_mesh, y.placements).full_tensor()


def _to_local_no_grad(y):
    with torch.no_grad():
        local = y.to_local()
    assert type(local) is AsyncCollectiveTensor
    return DTensor.from_local(local.wait() * 2, y.device_mesh, y.placements).full_tensor()


def _to_local_tolist(y):
    local = y.to_local()
    return torch.tensor(local.tolist()).mul(2).repeat(4 // local.shape[0], 1)


def _full_tensor(y):
    return y.full_tensor() * 2


def _redistribute_again(y):
    return (y.redistribute(y.device_mesh, [Shard(1)]) * 2).full_tensor()


def _redistribute_again_async(y):
    z = y.redistribute(y.device_mesh, [Shard(1)], async_op=True)
    return (z * 2).full_tensor()


def _repr(y):
    text = repr(y)
    assert "AsyncCollectiveTensor" not in text and "placements" in text
    return y.full_tensor() * 2


def _pickle(y):
    z = pickle.loads(pickle.dumps(y))
    assert type(z._local_tensor) is torch.Tensor
    return z.full_tensor() * 2


def _torch_save(y):
    buf = io.BytesIO()
    torch.save(y, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False).full_tensor() * 2


def _deepcopy(y):
    return copy.deepcopy(y).full_tensor() * 2


def _inference_mode(y):
    with torch.inference_mode():
        return (y * 2).full_tensor()


USES = [_op, _op_python_entry, _list_op, _in_place, _to_local, _to_local_no_grad, _to_local_tolist,
        _full_tensor, _redistribute_again, _redistribute_again_async, _repr, _pickle,
        _torch_save, _deepcopy, _inference_mode]


@pytest.mark.parametrize("use", USES, ids=lambda f: f.__name__.strip("_"))
def test_every_first_use_waits_and_sees_the_values(use):
    full = _full((4, 6))

    def body():
        mesh = init_device_mesh("cpu", (4,))
        y = distribute_tensor(full, mesh, [Shard(0)]).redistribute(mesh, [Replicate()],
                                                                    async_op=True)
        assert not y._local_tensor.completed()
        torch.testing.assert_close(use(y), full * 2, rtol=0, atol=0)

    _run(body)


@pytest.mark.skipif(native.MODULE is None, reason=f"no compiled entry: {native.REASON}")
def test_after_the_first_use_the_compiled_entry_takes_the_ops():
    def body():
        mesh = init_device_mesh("cpu", (4,))
        x = distribute_tensor(_full((8, 4)), mesh, [Shard(0)])
        x + x  # records the fast-path entry
        y = x.redistribute(mesh, [Shard(0)], async_op=True)  # nothing moves: finished
        z = x.redistribute(mesh, [Replicate()], async_op=True).redistribute(
            mesh, [Shard(0)], async_op=True)  # a local slice of a piece in flight
        before = native.MODULE.taken()
        first = z + z  # the piece is plain again: the compiled entry takes it
        taken_first = native.MODULE.taken() - before
        w = x.redistribute(mesh, [Replicate()], async_op=True)
        w2 = w.redistribute(mesh, [Replicate()], async_op=True)  # shares the piece in flight
        assert w2._local_tensor is w._local_tensor
        w * 2  # in flight: the Python entry takes it, and waits (other ranks run meanwhile)
        before = native.MODULE.taken()
        w * 2
        w2 * 2  # both holders got the finished piece
        taken_after = native.MODULE.taken() - before
        torch.testing.assert_close(first.full_tensor(), (y + y).full_tensor())
        return taken_first, taken_after

    assert _run(body) == [(1, 2)] * 4


# -- autograd --------------------------------------------------------------------------------
@pytest.mark.parametrize("move", MOVES_1D, ids=_id)
def test_backward_through_an_async_redistribute_matches_the_sync_one(move):
    src, dst, _ = move

    def grads(async_op: bool):
        mesh = init_device_mesh("cpu", (4,))
        torch.manual_seed(0)
        x = _source(_full((8, 4)), mesh, src).detach().requires_grad_()
        w = distribute_tensor(torch.randn(8, 4), mesh, [Replicate()])
        y = x.redistribute(mesh, dst, async_op=async_op)
        assert (type(y._local_tensor) is AsyncCollectiveTensor) == async_op
        (y * w).sum().full_tensor().backward()
        return x.grad.placements, x.grad.full_tensor()

    def body():
        (p_async, g_async), (p_sync, g_sync) = grads(True), grads(False)
        assert p_async == p_sync
        torch.testing.assert_close(g_async, g_sync, rtol=0, atol=0)

    _run(body)


def test_backward_through_to_local_of_a_piece_in_flight():
    def body():
        mesh = init_device_mesh("cpu", (4,))
        x = distribute_tensor(_full((8, 4)), mesh, [Shard(0)]).requires_grad_()
        local = x.redistribute(mesh, [Replicate()], async_op=True).to_local()
        assert type(local) is AsyncCollectiveTensor and local.requires_grad
        (local * 3).sum().backward()
        # each rank's Replicate gradient of 3s, back to Shard(0)
        torch.testing.assert_close(x.grad.full_tensor(), torch.full((8, 4), 3.0))

    _run(body)


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode],
                         ids=["no_grad", "inference_mode"])
def test_without_grad_an_async_redistribute_is_in_flight_too(mode):
    def body():
        mesh = init_device_mesh("cpu", (4,))
        x = distribute_tensor(_full((8, 4)), mesh, [Shard(0)]).requires_grad_()
        with mode():
            y = x.redistribute(mesh, [Replicate()], async_op=True)
            assert not y._local_tensor.completed() and not y.requires_grad
            torch.testing.assert_close(y.view(32).to_local(), _full((8, 4)).view(32))
            z = (x * 2).redistribute(mesh, [Replicate()], async_op=True)
            assert not z._local_tensor.completed()
            torch.testing.assert_close(z.full_tensor(), _full((8, 4)) * 2)

    _run(body)


# -- errors ----------------------------------------------------------------------------------
def test_a_failed_wait_raises_at_first_use_and_the_same_at_every_later_one():
    seen: dict[str, list[str]] = {}

    def body():
        mesh = init_device_mesh("cpu", (2,))
        x = distribute_tensor(_full((4, 2)), mesh, [Shard(0)])
        if dist.get_rank() == 0:
            y = x.redistribute(mesh, [Replicate()], async_op=True)  # issued without error
            messages = []
            for use in (lambda: y + 1, lambda: y.to_local().wait(), lambda: y.full_tensor()):
                with pytest.raises(AsyncCollectiveError) as info:
                    use()
                messages.append(str(info.value))
                assert isinstance(info.value.cause, simpg.CollectiveMismatchError)
            seen["messages"] = messages
        else:  # a collective that does not match rank 0's gather
            dist.all_reduce(torch.ones(3))

    with pytest.raises(simpg.CollectiveMismatchError):
        _run(body, 2)
    first, *later = seen["messages"]
    assert "redistribute [S(0)]->[R] of shape (4, 2)" in first and "async_op=True" in first
    assert "CollectiveMismatchError" in first
    assert all(m == first for m in later)


def test_a_failed_handle_surfaces_its_cause():
    def finish() -> torch.Tensor:
        raise RuntimeError("the link went down")

    piece = AsyncCollectiveTensor.issued(Handle((), finish), (2,), torch.ones(1),
                                         lambda: "redistribute S(0)->R of shape (4,)")
    for _ in range(2):
        with pytest.raises(AsyncCollectiveError, match="the link went down") as info:
            piece + 1
        assert str(info.value.cause) == "the link went down"


def test_a_result_dropped_unused_is_waited_not_left_behind():
    def body():
        mesh = init_device_mesh("cpu", (4,))
        x = distribute_tensor(_full((8, 4)), mesh, [Shard(0)])
        x.redistribute(mesh, [Replicate()], async_op=True)  # dropped at once
        return x.redistribute(mesh, [Replicate()]).to_local().sum().item()

    assert _run(body) == [float(_full((8, 4)).sum())] * 4  # strict_async: nothing unwaited


# -- tensor parallelism ----------------------------------------------------------------------
class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.up = nn.Linear(8, 16)
        self.down = nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def test_rowwise_output_is_in_flight_and_the_mlp_matches_the_single_device_one():
    def body():
        mesh = init_device_mesh("cpu", (4,))
        reference = MLP()
        model = parallelize_module(MLP(), mesh, {
            "up": ColwiseParallel(),
            "down": RowwiseParallel(use_local_output=False)})
        torch.manual_seed(1)
        x = torch.randn(3, 8, requires_grad=True)
        xr = x.detach().clone().requires_grad_()
        out = model(x)  # the down projection's all_reduce is still in flight
        assert out.placements == (Replicate(),) and not out._local_tensor.completed()
        want = reference(xr)
        torch.testing.assert_close(out.to_local(), want)
        out.to_local().sum().backward()
        want.sum().backward()
        torch.testing.assert_close(x.grad, xr.grad)
        torch.testing.assert_close(model.up.weight.full_tensor(), reference.up.weight)
        torch.testing.assert_close(model.down.weight.grad.full_tensor(),
                                   reference.down.weight.grad)

    _run(body)


def test_prepare_module_input_issues_every_input_before_the_forward_waits():
    class Probe(nn.Module):
        def forward(self, a, b):
            states = [t._local_tensor.completed() for t in (a, b)]
            return states, (a + 1).full_tensor(), (b + 1).full_tensor()

    def body():
        mesh = init_device_mesh("cpu", (4,))
        probe = parallelize_module(Probe(), mesh, PrepareModuleInput(
            input_layouts=(Shard(0), Shard(1)), desired_input_layouts=(Replicate(), Shard(0))))
        a, b = _full((8, 4)), _full((4, 8))
        states, got_a, got_b = probe(a.chunk(4)[dist.get_rank()],
                                     b.chunk(4, dim=1)[dist.get_rank()])
        assert states == [False, False]  # both collectives in flight at the forward's start
        torch.testing.assert_close(got_a, a + 1)
        torch.testing.assert_close(got_b, b + 1)
        gather = parallelize_module(nn.Identity(), mesh, PrepareModuleOutput(
            output_layouts=Shard(0), desired_output_layouts=Replicate()))
        out = gather(a.chunk(4)[dist.get_rank()])
        assert type(out) is torch.Tensor  # waited, as torch's PrepareModuleOutput
        torch.testing.assert_close(out, a)

    _run(body)


# -- real gloo -------------------------------------------------------------------------------
PROGRAM = PROGRAMS / "redistribute_async_program.py"


def _program():
    return load_program(PROGRAM).program


@pytest.mark.gloo
def test_async_redistributes_on_gloo_match_simpg_bit_for_bit(tmp_path):
    on_simpg = _run(_program())
    on_gloo = run_program_on_gloo(PROGRAM, 4, tmp_path, timeout_s=180.0)
    assert bool(on_simpg[0]["in flight"].all()) and bool(on_gloo[0]["in flight"].all())
    full = torch.arange(35, dtype=torch.float64).reshape(7, 5)
    assert torch.equal(on_simpg[0]["a to R,R"], full)
    # rank 0 sums its Partial with rank 2, its peer on mesh dim 0
    assert torch.equal(on_simpg[0]["p to R,R"], torch.full((3, 4), 1.0 + 3, dtype=torch.float64))
    # the gradient arrives Replicate: each rank's 3s are the global gradient
    assert torch.equal(on_simpg[0]["grad"], torch.full((7, 5), 3.0, dtype=torch.float64))
    assert_bit_for_bit(on_simpg, on_gloo)
