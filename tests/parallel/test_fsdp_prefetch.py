"""Prefetch in fully_shard (Note [prefetch] in dtensor/parallel/fsdp_hooks.py): the order in
which gathers are issued relative to each module's compute, the memory they hold, results
equal to one device, and misuse. simpg completes collectives when every rank has issued
them, so what is checked is the order; the overlap it buys is a real backend's."""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist
from torch import nn

import simpg
from dtensor import init_device_mesh
from dtensor.parallel import FullyShardError, fully_shard
from dtensor.parallel.fsdp import data_parallel_state

WIDTHS = [8, 10, 12, 14, 8]  # every layer a different size: a gather's size names its layer


class _Mark(torch.autograd.Function):
    """Identity; its backward calls ``note``: inside a unit, after the unit's pre-backward
    hooks, before its backward computes."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, note) -> torch.Tensor:  # type: ignore[override]
        ctx.note = note
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        ctx.note()
        return grad, None


class Unit(nn.Module):
    def __init__(self, a: int, b: int) -> None:
        super().__init__()
        self.lin = nn.Linear(a, b)
        self.note = lambda: None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Mark.apply(self.lin(x), self.note)


def _plain() -> nn.Sequential:
    return nn.Sequential(*[Unit(a, b) for a, b in zip(WIDTHS, WIDTHS[1:])])


def _model(mesh) -> nn.Sequential:
    torch.manual_seed(0)
    model = _plain()
    for layer in model:
        fully_shard(layer, mesh)
    fully_shard(model, mesh)
    return model


def _layer_of(numel_per_rank: int) -> int:
    sizes = [(a * b + b) // 2 for a, b in zip(WIDTHS, WIDTHS[1:])]
    return sizes.index(numel_per_rank)


def _run(setup, warm_up: bool = False) -> list[str]:
    """Rank 0's collectives ("AG2": layer 2's all-gather issued) and compute ("f2": layer 2's
    forward computes, "b2": its backward computes), in the order this rank did them. A
    record's ``start_s`` is when each rank issued it (records are kept in completion order,
    which an async gather reaches only when the last rank issues it)."""

    def body() -> list[tuple[float, str]]:
        model = _model(init_device_mesh("cpu", (2,)))
        setup(model)
        if warm_up:  # a first step, untraced: the forward order it records drives prefetch
            model(torch.randn(3, 8)).sum().backward()
        marks: list[tuple[float, str]] = []
        for i, layer in enumerate(model):  # registered after fully_shard's: after its gathers
            layer.register_forward_pre_hook(
                lambda *_, i=i: marks.append((time.perf_counter(), f"f{i}")))
            layer.note = lambda i=i: marks.append((time.perf_counter(), f"b{i}"))
        with simpg.trace() as t:
            model(torch.randn(3, 8)).sum().backward()
        me = dist.get_rank()
        for r in t.records:
            kind = "AG" if r.op == "all_gather_into_tensor" else "RS"
            numel = r.shapes[0][0][0] // (len(r.ranks) if kind == "RS" else 1)  # one buffer
            marks.append((r.start_s[r.ranks.index(me)], f"{kind}{_layer_of(numel)}"))
        return [name for _, name in sorted(marks)]

    logs = simpg.run(body, 2)
    assert logs[0] == logs[1]
    return logs[0]


@pytest.mark.parametrize("warm_up", [False, True], ids=["first step", "second step"])
def test_without_prefetch_each_gather_comes_just_before_its_compute(warm_up):
    def no_prefetch(model: nn.Sequential) -> None:
        for module in [model, *model]:
            module.set_modules_to_forward_prefetch([])
            module.set_modules_to_backward_prefetch([])

    assert _run(no_prefetch, warm_up) == [
        "AG0", "f0", "AG1", "f1", "AG2", "f2", "AG3", "f3",
        "AG3", "b3", "RS3", "AG2", "b2", "RS2", "AG1", "b1", "RS1", "AG0", "b0", "RS0"]


def test_backward_prefetches_the_module_before_in_forward_order_by_default():
    """torch's default: module i's backward regather is followed at once by module i-1's,
    before module i's backward computes."""
    assert _run(lambda model: None)[8:] == [
        "AG3", "AG2", "b3", "RS3", "AG1", "b2", "RS2", "AG0", "b1", "RS1", "b0", "RS0"]


def test_forward_prefetches_the_next_module_of_the_last_forward_by_default():
    """The first forward has no order to go by: each gather comes just before its compute.
    From the second, each module's pre-forward issues the gather of the module that began
    next last time (the root's, layer 0's) right after its own, before its compute."""
    assert _run(lambda model: None)[:8] == [
        "AG0", "f0", "AG1", "f1", "AG2", "f2", "AG3", "f3"]
    assert _run(lambda model: None, warm_up=True)[:8] == [
        "AG0", "AG1", "f0", "AG2", "f1", "AG3", "f2", "f3"]


def test_a_forward_prefetch_for_a_module_that_does_not_run_is_waited_and_dropped():
    """Control flow: the second forward skips layer 2, whose gather layer 1 prefetches by the
    first forward's order; it is waited at the end of the forward (simpg would report work
    left in flight) and the step still equals one device."""

    class Skipping(nn.Sequential):
        skip: int | None = None

        def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
            for i, layer in enumerate(self):
                if i != self.skip:
                    x = layer(x) if x.shape[-1] == layer.lin.in_features else x
            return x

    def run(sharded: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = Skipping(*[Unit(a, a) for a in [8, 8, 8, 8]])
        if sharded:
            mesh = init_device_mesh("cpu", (2,))
            for layer in model:
                fully_shard(layer, mesh)
            fully_shard(model, mesh)
        x = torch.randn(3, 8)
        model(x).sum().backward()
        model.skip = 2
        model(x).sum().backward()
        if not sharded:
            return [p.grad for p in model.parameters()]
        assert all(data_parallel_state(layer).prefetched is None for layer in model)
        return [p.grad.full_tensor() for p in model.parameters()]

    expected = run(False)
    for grads in simpg.run(run, 2, True):
        for got, want in zip(grads, expected):
            torch.testing.assert_close(got, want)


def test_explicit_forward_and_backward_prefetch():
    def explicit(model: nn.Sequential) -> None:
        for i in range(3):
            model[i].set_modules_to_forward_prefetch([model[i + 1]])
        for i in range(1, 4):  # two ahead; one already in flight is not issued again
            model[i].set_modules_to_backward_prefetch(list(model[max(i - 2, 0):i])[::-1])

    assert _run(explicit) == [
        "AG0", "AG1", "f0", "AG2", "f1", "AG3", "f2", "f3",
        "AG3", "AG2", "AG1", "b3", "RS3", "AG0", "b2", "RS2", "b1", "RS1", "b0", "RS0"]


def _held(model: nn.Sequential) -> int:
    """Layers holding gathered parameters (or gathers in flight) now."""
    n = 0
    for layer in model:
        state = data_parallel_state(layer)
        live = any(m.gathered is not None and m.gathered.untyped_storage().size() > 0
                   for m in state.params)
        n += live or state.prefetched is not None or state.regathering is not None
    return n


@pytest.mark.parametrize("ahead", [1, 2])
def test_prefetched_parameters_are_freed_after_use(ahead):
    """At most the computing layer and the ``ahead`` prefetched ones hold gathered
    parameters at any compute, and none after the step."""

    def body() -> tuple[int, int]:
        model = _model(init_device_mesh("cpu", (2,)))
        for i, layer in enumerate(model):
            layer.set_modules_to_forward_prefetch(list(model[i + 1:i + 1 + ahead]))
            layer.set_modules_to_backward_prefetch(list(model[max(i - ahead, 0):i])[::-1])
        most = [0]
        for layer in model:
            layer.register_forward_hook(lambda *_: most.append(_held(model)))
            layer.note = lambda: most.append(_held(model))
        model(torch.randn(3, 8)).sum().backward()
        return max(most), _held(model)

    for most, after in simpg.run(body, 2):
        assert most == ahead + 1
        assert after == 0


def test_training_with_prefetch_equals_one_device():
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    torch.manual_seed(0)
    ref = _plain()
    opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    for _ in range(3):
        ref(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()

    def body() -> dict:
        mesh = init_device_mesh("cpu", (2,))
        model = _model(mesh)
        for i in range(3):
            model[i].set_modules_to_forward_prefetch([model[i + 1]])
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        for _ in range(3):
            model(x.chunk(2)[mesh.get_local_rank()]).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
        return {n: p.detach().full_tensor() for n, p in model.named_parameters()}

    for full in simpg.run(body, 2):
        for name, p in ref.named_parameters():
            torch.testing.assert_close(full[name], p.detach(), msg=name)


def test_a_prefetch_of_parameters_changed_since_is_not_used():
    """A prefetched module that does not run in that forward, then an in-place update: its
    next forward computes with the new values (the stale gather is waited for and dropped)."""

    def body() -> None:
        mesh = init_device_mesh("cpu", (2,))
        first, second = fully_shard(nn.Linear(4, 4), mesh), fully_shard(nn.Linear(4, 4), mesh)
        first.set_modules_to_forward_prefetch([second])
        x = torch.randn(2, 4)
        first(x)  # prefetches second's parameters; second does not run
        with torch.no_grad():
            second.weight.add_(1.0)
        expected = x @ second.weight.full_tensor().T + second.bias.full_tensor()
        torch.testing.assert_close(second(x), expected)

    simpg.run(body, 2)


@pytest.mark.parametrize("modules, message", [
    (lambda: [nn.Linear(4, 4)], r"expected modules passed to fully_shard or replicate, "
                                r"got Linear"),
    (lambda: nn.Linear(4, 4), r"expected a list of modules passed to fully_shard, got Linear"),
])
def test_prefetch_of_modules_not_sharded_gets_a_clear_error(modules, message):
    def body() -> None:
        model = fully_shard(nn.Linear(4, 4), init_device_mesh("cpu", (2,)))
        for setter in (model.set_modules_to_forward_prefetch,
                       model.set_modules_to_backward_prefetch):
            with pytest.raises(FullyShardError, match=message):
                setter(modules())

    simpg.run(body, 2)


def test_a_reduce_scatter_is_waited_for_one_module_later():
    """Note [reduce-scatter in flight]: while layer k's backward computes, layer k+1's
    reduce-scatter may still be in flight (its gradient not set yet), layer k+2's is done;
    every gradient is set when backward() returns."""

    def body() -> tuple[list, list]:
        model = _model(init_device_mesh("cpu", (2,)))
        seen = []
        for i, layer in enumerate(model):
            layer.note = lambda i=i: seen.append(
                (i, [j for j, lay in enumerate(model) if lay.lin.weight.grad is not None]))
        model(torch.randn(3, 8)).sum().backward()
        return seen, [lay.lin.weight.grad is not None for lay in model]

    for seen, after in simpg.run(body, 2):
        assert seen == [(3, []), (2, []), (1, [3]), (0, [2, 3])]
        assert after == [True] * 4


def test_post_accumulate_grad_hooks_run_once_the_gradient_is_reduced():
    """An optimizer in backward reads param.grad from such a hook: it must be the reduced,
    sharded gradient, set once per backward."""

    def body() -> list:
        model = _model(init_device_mesh("cpu", (2,)))
        calls = []
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(
                lambda p: calls.append((tuple(p.grad.shape), p.grad.placements)))
        model(torch.randn(3, 8)).sum().backward()
        return calls

    for calls in simpg.run(body, 2):
        assert sorted(calls) == sorted((tuple(p.shape), p.placements)
                                       for p in _model_shapes())


def _model_shapes() -> list:
    from dtensor import Shard

    class Like:
        def __init__(self, shape):
            self.shape, self.placements = shape, (Shard(0),)

    return [Like(s) for a, b in zip(WIDTHS, WIDTHS[1:]) for s in ((b, a), (b,))]
