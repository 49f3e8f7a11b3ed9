"""Zero-bubble schedules: the backward in input and weight halves (Note [input and weight
backward] in dtensor/pipelining/split_backward.py; Note [zero bubble] in schedules.py)."""

from __future__ import annotations

import collections
import copy

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import simpg
from dtensor import DTensor, init_device_mesh
from dtensor.parallel import ColwiseParallel, RowwiseParallel, fully_shard, parallelize_module
from dtensor.pipelining import (PipelineStage, PipeliningError, ScheduleDualPipeV,
                                ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble)
from dtensor.pipelining.split_backward import backward_input

from tests.pipelining.test_schedules import _data, _loss, _model, _one_device, _stage_modules


class TwoOutputs(nn.Module):
    """An MLP, a LayerNorm, a weight used twice through one transpose (``tied``), and a
    second output computed from a parameter alone."""

    def __init__(self, tied: bool) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 4), nn.LayerNorm(4))
        self.square = nn.Linear(4, 4)
        self.extra = nn.Parameter(torch.randn(4))
        self.tied = tied

    def forward(self, x):
        y = self.mlp(x)
        if self.tied:
            wt = self.square.weight.t()
            y = (y @ wt).tanh() @ wt
        return y * 2, self.extra * 3


@pytest.mark.parametrize("tied", [False, True])
def test_the_two_halves_give_the_whole_backwards_gradients(tied):
    torch.manual_seed(0)
    mod = TwoOutputs(tied)
    ref = copy.deepcopy(mod)
    x, g, g2 = torch.randn(3, 4), torch.randn(3, 4), torch.randn(4)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    torch.autograd.backward(ref(xa), [g, g2])
    half = backward_input(mod(xb), [g, g2], [xb])
    torch.testing.assert_close(xb.grad, xa.grad)
    assert all(p.grad is None for p in mod.parameters())  # nothing before the weight half
    assert (half.start_over is not None) == tied  # Note [a shared weight branch]
    half.run()
    for (name, p), q in zip(mod.named_parameters(), ref.parameters()):
        if q.grad is None:
            assert p.grad is None, name
        else:
            torch.testing.assert_close(p.grad, q.grad, msg=name)


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def test_no_matmul_runs_twice():
    """Each layer's input-gradient product runs in the input half, its weight-gradient
    product in the weight half: as many mm as one whole backward."""
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 4), nn.Tanh(), nn.Linear(4, 4))
    x = torch.randn(3, 4, requires_grad=True)
    g = torch.randn(3, 4)
    out = mlp(x)
    with _Ops() as whole:
        torch.autograd.backward(out, g, retain_graph=True)
    with _Ops() as inputs:
        half = backward_input([out], [g], [x])
    with _Ops() as weights:
        half.run()
    assert whole.count["mm"] == 6
    assert inputs.count["mm"] == 3 and weights.count["mm"] == 3


def test_a_stage_without_gradient_inputs_defers_its_whole_backward():
    lin = nn.Linear(3, 3)
    half = backward_input([lin(torch.randn(2, 3)).sum()], [None], [torch.randn(2, 3)])
    assert lin.weight.grad is None
    half.run()
    assert lin.weight.grad is not None


def _tp_stages(schedule_cls, pp: int, m: int, data):
    """pp x tp=2: every block column- then row-wise parallel, two stages a rank (the V's
    placement for ScheduleZBVZeroBubble, i % pp for the interleaved one)."""
    start = _model(2 * pp)
    v_shape = schedule_cls in (ScheduleZBVZeroBubble, ScheduleDualPipeV)

    def rank():
        mesh = init_device_mesh("cpu", (pp, 2), mesh_dim_names=("pp", "tp"))
        r = mesh.get_local_rank("pp")
        model = copy.deepcopy(start)
        modules = _stage_modules(model, 2 * pp)
        indices = [r, 2 * pp - 1 - r] if v_shape else [r, r + pp]
        mine = [modules[i] for i in indices]
        for mod in mine:
            for block in mod:
                parallelize_module(block, mesh["tp"], {"up": ColwiseParallel(),
                                                       "down": RowwiseParallel()})
        stages = [PipelineStage(mod, i, 2 * pp, group=mesh.get_group("pp"), mesh=mesh["tp"])
                  for mod, i in zip(mine, indices)]
        schedule = schedule_cls(stages, m, loss_fn=_loss)
        params = [p for mod in mine for p in mod.parameters()]
        opt = torch.optim.SGD(params, lr=0.1)
        last = 2 * pp - 1 in indices
        for x, y in data:
            kwargs = {"target": y} if last else {}
            schedule.step(x, **kwargs) if 0 in indices else schedule.step(**kwargs)
            opt.step()
            opt.zero_grad()
        names = {id(p): n for n, p in model.named_parameters()}
        return {names[id(p)]: p.full_tensor().detach() for p in params}

    return simpg.run(rank, 2 * pp)


@pytest.mark.parametrize("schedule_cls", [ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble,
                                          ScheduleDualPipeV])
def test_tensor_parallel_stages_train_like_one_device(schedule_cls):
    data = _data(2, 8)
    _, want = _one_device(_model(4), data, 4)
    seen = set()
    for weights in _tp_stages(schedule_cls, 2, 4, data):
        for name, w in weights.items():
            assert isinstance(w, torch.Tensor) and not isinstance(w, DTensor)
            torch.testing.assert_close(w, want[name], msg=name)
            seen.add(name)
    assert seen == set(want)


@pytest.mark.parametrize("schedule_cls, m", [
    *((cls, m) for cls in (ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble)
      for m in (2, 3, 4)),
    (ScheduleDualPipeV, 4), (ScheduleDualPipeV, 5)])
def test_fully_sharded_stages_train_like_one_device(schedule_cls, m):
    """pp x dp, two fully sharded stages a rank: every half with gradient sync off, one
    reduce-scatter per module per step (Note [zero bubble])."""
    with simpg.trace() as t:
        _check_fully_sharded_stages(schedule_cls, m, n_blocks=8, checkpointed=False)
    # 2 steps x 4 stages x 2 blocks with parameters, one dp group's collective each
    assert len([r for r in t.records if r.op.startswith("reduce_scatter")]) == 2 * 4 * 2


def _check_fully_sharded_stages(schedule_cls, m: int, n_blocks: int, checkpointed: bool):
    """pp=2 x dp=2, two fully sharded stages a rank (each block fully sharded, in a
    checkpointed region if ``checkpointed``, under a sharded root): every weight after two
    steps equals one device's."""
    from tests.pipelining.test_schedules import _one_device_dp
    data = _data(2, 16)
    start = _model(n_blocks)
    _, want = _one_device_dp(copy.deepcopy(start), data, m=m, dp=2)
    v_shape = schedule_cls in (ScheduleZBVZeroBubble, ScheduleDualPipeV)

    def rank():
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "dp"))
        r, d = mesh.get_local_rank("pp"), mesh.get_local_rank("dp")
        model = copy.deepcopy(start)
        modules = _stage_modules(model, 4)
        indices = [r, 3 - r] if v_shape else [r, r + 2]
        mine = [modules[i] for i in indices]
        for mod in mine:
            for k, block in enumerate(list(mod)):
                fully_shard(block, mesh["dp"])
                if checkpointed:
                    mod[k] = Checkpointed(block)
            fully_shard(mod, mesh["dp"])
        stages = [PipelineStage(mod, i, 4, group=mesh.get_group("pp"))
                  for mod, i in zip(mine, indices)]
        schedule = schedule_cls(stages, m, loss_fn=_loss)
        params = [p for mod in mine for p in mod.parameters()]
        opt = torch.optim.SGD(params, lr=0.1)
        for x, y in data:
            x, y = x.chunk(2)[d], y.chunk(2)[d]
            kwargs = {"target": y} if 3 in indices else {}
            schedule.step(x, **kwargs) if 0 in indices else schedule.step(**kwargs)
            opt.step()
            opt.zero_grad()
        names = {id(p): n for n, p in model.named_parameters()}
        return {names[id(p)]: p.full_tensor().detach() for p in params}

    seen = set()
    for weights in simpg.run(rank, 4, timeout=60):
        for name, w in weights.items():
            torch.testing.assert_close(w, want[name], msg=name)
            seen.add(name)
    assert seen == set(want)


class Checkpointed(nn.Module):
    """``inner``'s forward in a checkpointed region (the main job checkpoints its fully
    sharded blocks this way)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return torch.utils.checkpoint.checkpoint(self.inner, x, use_reentrant=False)


@pytest.mark.parametrize("schedule_cls, m", [(ScheduleZBVZeroBubble, 2),
                                             (ScheduleZBVZeroBubble, 3),
                                             (ScheduleDualPipeV, 4),
                                             (ScheduleInterleavedZeroBubble, 2)])
def test_checkpointed_regions_are_exact_in_plain_and_fully_sharded_stages(schedule_cls, m):
    """Note [zero bubble]: a checkpointed region is recomputed once per half that reads it,
    exactly; inside fully_shard the weight half recomputes as fully_shard's backward would
    (Note [a weight half inside fully_shard]): checkpointed fully sharded blocks, as the main
    job has them, train like one device."""
    torch.manual_seed(0)
    mod = Checkpointed(nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4)))
    x, g = torch.randn(3, 4), torch.randn(3, 4)
    ref = copy.deepcopy(mod)
    ref(x.clone().requires_grad_()).backward(g)
    leaf = x.clone().requires_grad_()
    backward_input([mod(leaf)], [g], [leaf]).run()
    for p, q in zip(mod.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad)

    _check_fully_sharded_stages(schedule_cls, m, n_blocks=4, checkpointed=True)


def test_misplaced_stages_are_refused():
    def rank():
        r = torch.distributed.get_rank()
        loop = [PipelineStage(nn.Linear(2, 2), i, 4) for i in (r, r + 2)]
        with pytest.raises(PipeliningError, match=r"takes stages \[%d, %d\] \(the V" %
                           (r, 3 - r)):
            ScheduleZBVZeroBubble(loop, 2)
        with pytest.raises(PipeliningError, match="exactly 2 stages a rank, got 1"):
            ScheduleZBVZeroBubble(loop[:1], 2)
        stage = PipelineStage(nn.Linear(2, 2), r, 2)
        with pytest.raises(PipeliningError, match="weight backward of micro-batch 0 comes "
                                                  "before its input backward"):
            stage.backward_weight_one(0)
        return True

    assert all(simpg.run(rank, 2))
