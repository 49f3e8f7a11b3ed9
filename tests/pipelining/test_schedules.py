"""Pipeline schedules on simulated ranks equal one device: losses and every weight after
several steps, 2 and 4 stages, even and uneven micro-batches, plain and tensor-parallel
stages (dtensor/pipelining; Note [micro-batches], Note [schedule order])."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import simpg
from dtensor import DTensor, Replicate, Shard, init_device_mesh
from dtensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from dtensor.pipelining import (PipelineStage, PipeliningError, Schedule1F1B,
                                ScheduleGPipe)

SCHEDULES = [ScheduleGPipe, Schedule1F1B]


class Block(nn.Module):
    def __init__(self, dim: int = 8, hidden: int = 12) -> None:
        super().__init__()
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.tanh(self.up(x)))


def _model(n_blocks: int) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*[Block() for _ in range(n_blocks)])


def _loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(out, target)


def _data(steps: int, batch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(batch, 8, generator=g), torch.randn(batch, 8, generator=g))
            for _ in range(steps)]


def _one_device(model: nn.Module, data, m: int) -> tuple[list[float], dict]:
    """The same micro-batches on one device: the mean of their losses, one SGD step."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for x, y in data:
        parts = [_loss(model(a), b) for a, b in zip(torch.tensor_split(x, m),
                                                      torch.tensor_split(y, m))]
        loss = sum(parts) / m
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append([float(p.detach()) for p in parts])
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}


def _stage_modules(model: nn.Sequential, n_stages: int) -> list[nn.Sequential]:
    per = len(model) // n_stages
    return [nn.Sequential(*list(model)[i * per:(i + 1) * per]) for i in range(n_stages)]


def _pipelined(schedule_cls, n_stages: int, m: int, data, tp: int = 1):
    """Each rank's (losses per step on the last stage, its stage's weights by full name)."""
    start = _model(2 * n_stages)

    def rank():
        mesh = init_device_mesh("cpu", (n_stages, tp), mesh_dim_names=("pp", "tp"))
        s = mesh.get_local_rank("pp")
        model = copy.deepcopy(start)
        mine = _stage_modules(model, n_stages)[s]
        if tp > 1:
            for block in mine:
                parallelize_module(block, mesh["tp"], {"up": ColwiseParallel(),
                                                       "down": RowwiseParallel()})
        stage = PipelineStage(mine, s, n_stages, group=mesh.get_group("pp"), mesh=mesh["tp"])
        schedule = schedule_cls(stage, m, loss_fn=_loss)
        opt = torch.optim.SGD(mine.parameters(), lr=0.1)
        losses = []
        for x, y in data:
            got: list = []
            if stage.is_first:
                schedule.step(x)
            elif stage.is_last:
                schedule.step(target=y, losses=got)
            else:
                schedule.step()
            opt.step()
            opt.zero_grad()
            losses.append([float(v) for v in got])
        names = {id(p): n for n, p in model.named_parameters()}
        weights = {names[id(p)]: (p.full_tensor() if isinstance(p, DTensor) else p).detach()
                   for p in mine.parameters()}
        return stage.is_last, losses, weights

    return simpg.run(rank, n_stages * tp)


def _check_pipelined(results, want_losses, want) -> None:
    """The last stage's losses and every stage's weights equal one device's."""
    seen = set()
    for is_last, losses, weights in results:
        if is_last:
            assert sum(losses, []) == pytest.approx(sum(want_losses, []), rel=1e-5)
        for name, w in weights.items():
            torch.testing.assert_close(w, want[name], msg=name)
            seen.add(name)
    assert seen == set(want)


def _train_dp_stage(schedule, stage, model, mine, data, d: int) -> dict:
    """Train a data-parallel stage on dp rank ``d``'s half of each batch; its weights whole,
    under the whole model's names."""
    opt = torch.optim.SGD(mine.parameters(), lr=0.1)
    for x, y in data:
        x, y = x.chunk(2)[d], y.chunk(2)[d]
        schedule.step(x) if stage.is_first else schedule.step(target=y)
        opt.step()
        opt.zero_grad()
    names = {id(p): n for n, p in model.named_parameters()}
    return {names[id(p)]: p.full_tensor().detach() for p in mine.parameters()}


@pytest.mark.parametrize("schedule_cls", SCHEDULES)
@pytest.mark.parametrize("n_stages, m, batch", [(2, 1, 4), (2, 4, 8), (2, 3, 7), (4, 4, 8),
                                                (4, 6, 12), (4, 2, 5), (8, 8, 16), (8, 3, 11)])
def test_a_schedule_trains_like_one_device(schedule_cls, n_stages, m, batch):
    data = _data(3, batch)
    want_losses, want = _one_device(_model(2 * n_stages), data, m)
    _check_pipelined(_pipelined(schedule_cls, n_stages, m, data), want_losses, want)


@pytest.mark.parametrize("schedule_cls", SCHEDULES)
def test_tensor_parallel_stages_on_a_pp_by_tp_mesh_train_like_one_device(schedule_cls):
    data = _data(2, 8)
    want_losses, want = _one_device(_model(4), data, 4)
    for is_last, losses, weights in _pipelined(schedule_cls, 2, 4, data, tp=2):
        if is_last:
            assert sum(losses, []) == pytest.approx(sum(want_losses, []), rel=1e-5)
        for name, w in weights.items():
            torch.testing.assert_close(w, want[name], msg=name)


class ShardedOut(nn.Module):
    """A stage whose output is a DTensor sharded over its tp mesh: it crosses the boundary
    as pieces, rank to rank (Note [stage boundaries])."""

    def __init__(self, mesh, first: bool) -> None:
        super().__init__()
        self.first, self.mesh = first, mesh
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        if self.first:  # every tp rank computes the same rows, then keeps its own
            out = DTensor.from_local(self.lin(x), self.mesh, [Replicate()])
            return out.redistribute(self.mesh, [Shard(0)])
        assert isinstance(x, DTensor) and x.placements == (Shard(0),), x
        return self.lin(x.full_tensor())


def test_a_dtensor_crosses_the_boundary_as_its_pieces():
    torch.manual_seed(0)
    lins = [nn.Linear(8, 8), nn.Linear(8, 8)]
    x, y = torch.randn(6, 8), torch.randn(6, 8)
    ref = copy.deepcopy(lins)
    loss = sum(_loss(ref[1](ref[0](a)), b) for a, b in zip(x.chunk(2), y.chunk(2))) / 2
    loss.backward()

    def rank():
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "tp"))
        s = mesh.get_local_rank("pp")
        mod = ShardedOut(mesh["tp"], s == 0)
        mod.lin.load_state_dict(lins[s].state_dict())
        stage = PipelineStage(mod, s, 2, group=mesh.get_group("pp"), mesh=mesh["tp"])
        schedule = Schedule1F1B(stage, 2, loss_fn=_loss)
        schedule.step(x) if s == 0 else schedule.step(target=y)
        return s, mod.lin.weight.grad.clone()

    for s, grad in simpg.run(rank, 4):
        torch.testing.assert_close(grad, ref[s].weight.grad)


def test_a_stage_on_the_wrong_rank_is_refused():
    def rank():
        with pytest.raises(PipeliningError, match="stage i lives on group rank i % 2"):
            PipelineStage(nn.Linear(2, 2), 1 - torch.distributed.get_rank(), 2)
        with pytest.raises(PipeliningError, match="n_microbatches is 0"):
            ScheduleGPipe(PipelineStage(nn.Linear(2, 2), torch.distributed.get_rank(), 2), 0)
        return True

    assert all(simpg.run(rank, 2))


def test_a_stage_running_another_micro_batch_count_is_reported_by_simpg():
    """A schedule bug (the stages disagree on the micro-batch count) is a clear error naming
    both stages, not a hang or a broadcast loss."""
    def rank():
        s = torch.distributed.get_rank()
        stage = PipelineStage(nn.Linear(4, 4), s, 2)
        schedule = ScheduleGPipe(stage, 2 if s == 0 else 3, loss_fn=_loss)
        schedule.step(torch.randn(6, 4)) if s == 0 else schedule.step(target=torch.randn(6, 4))

    with pytest.raises(PipeliningError, match="stage 1 runs the forward of micro-batch 0 of 3 "
                                              "but stage 0 sent micro-batch 0 of 2"):
        simpg.run(rank, 2, timeout=30)


@pytest.mark.parametrize("schedule_cls", SCHEDULES)
@pytest.mark.parametrize("m", [1, 2, 3])
def test_fully_sharded_stages_on_a_pp_by_dp_mesh_train_like_one_device(schedule_cls, m):
    """Each stage fully_shard-ed over its dp sub-mesh, each dp rank its own half of the
    batch: the gradients are averaged over dp, so the step is the whole batch's; and each
    module reduce-scatters once a step, whatever the micro-batch count (Note [one
    reduce-scatter per step])."""
    from dtensor.parallel import fully_shard
    data = _data(2, 12)
    want_losses, want = _one_device_dp(_model(4), data, m=m, dp=2)
    start = _model(4)

    def rank():
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("pp", "dp"))
        s, d = mesh.get_local_rank("pp"), mesh.get_local_rank("dp")
        model = copy.deepcopy(start)
        mine = _stage_modules(model, 2)[s]
        for block in mine:
            fully_shard(block, mesh["dp"])
        fully_shard(mine, mesh["dp"])
        stage = PipelineStage(mine, s, 2, group=mesh.get_group("pp"))
        return _train_dp_stage(schedule_cls(stage, m, loss_fn=_loss), stage, model, mine,
                               data, d)

    seen = set()
    with simpg.trace() as t:
        results = simpg.run(rank, 4)
    for weights in results:
        for name, w in weights.items():
            torch.testing.assert_close(w, want[name], msg=name)
            seen.add(name)
    assert seen == set(want)
    # 2 steps x 2 stages x 2 blocks with parameters, each one dp group's collective
    assert len([r for r in t.records if r.op.startswith("reduce_scatter")]) == 2 * 2 * 2


def _one_device_dp(model: nn.Module, data, m: int, dp: int):
    """One device, the batch cut into dp shares of m micro-batches each: the mean over dp
    of each share's mean micro-batch loss."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in data:
        loss = 0
        for xs, ys in zip(x.chunk(dp), y.chunk(dp)):
            loss = loss + sum(_loss(model(a), b) for a, b in zip(
                torch.tensor_split(xs, m), torch.tensor_split(ys, m))) / m / dp
        loss.backward()
        opt.step()
        opt.zero_grad()
    return None, {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("name", ["ScheduleGPipe", "Schedule1F1B"])
@pytest.mark.parametrize("n_stages, m, batch", [(2, 4, 8), (4, 4, 8), (2, 3, 6), (4, 8, 16)])
def test_ours_and_torchs_pipelining_give_the_same_losses_and_gradients(name, n_stages, m,
                                                                       batch):
    """torch.distributed.pipelining's own stage and schedule, run on simpg beside ours, on
    equal micro-batches: torch's stage takes every micro-batch's shape from the first, so an
    uneven batch (7 rows in 3) is a receive that does not fit there (simpg names it), while
    ours sends each micro-batch's shape (Note [stage boundaries])."""
    import torch.distributed.pipelining as torch_pp
    import dtensor.pipelining as ours
    x, y = _data(1, batch)[0]
    start = _model(2 * n_stages)

    def rank():
        s = torch.distributed.get_rank()
        out = []
        for lib in (ours, torch_pp):
            mine = _stage_modules(copy.deepcopy(start), n_stages)[s]
            stage = lib.PipelineStage(mine, s, n_stages, torch.device("cpu"))
            schedule = getattr(lib, name)(stage, m, loss_fn=_loss)
            losses: list = []
            schedule.step(x) if s == 0 else schedule.step(target=y, losses=losses) \
                if s == n_stages - 1 else schedule.step()
            out.append(([float(v.detach()) for v in losses],
                        [p.grad.clone() for p in mine.parameters()]))
        return out

    for (our_losses, our_grads), (torch_losses, torch_grads) in simpg.run(rank, n_stages):
        assert our_losses == pytest.approx(torch_losses, rel=1e-6)
        for a, b in zip(our_grads, torch_grads, strict=True):
            torch.testing.assert_close(a, b)


def _pipelined_multi(schedule_cls, pp: int, v: int, m: int, data, lib=None):
    """Each rank's (losses of the last stage per step, its stages' weights by full name)
    with ``v`` stages a rank (Note [virtual stages]; the V schedule's stages r and
    2 * pp - 1 - r, the last stage then on rank 0)."""
    import dtensor.pipelining as ours
    lib = lib or ours
    start = _model(pp * v)
    v_shape = schedule_cls in ("ScheduleZBVZeroBubble", "ScheduleDualPipeV")
    last_rank = 0 if v_shape else pp - 1

    def rank():
        r = torch.distributed.get_rank()
        model = copy.deepcopy(start)
        modules = _stage_modules(model, pp * v)
        indices = [r, 2 * pp - 1 - r] if v_shape else list(range(r, pp * v, pp))
        mine = [modules[i] for i in indices]
        stages = [lib.PipelineStage(mod, i, pp * v, torch.device("cpu"))
                  for mod, i in zip(mine, indices)]
        schedule = getattr(lib, schedule_cls)(stages, m, loss_fn=_loss)
        params = [p for mod in mine for p in mod.parameters()]
        opt = torch.optim.SGD(params, lr=0.1)
        losses = []
        for x, y in data:
            got: list = []
            kwargs = {"target": y, "losses": got} if r == last_rank else {}
            schedule.step(x, **kwargs) if r == 0 else schedule.step(**kwargs)
            opt.step()
            opt.zero_grad()
            losses.append([float(t.detach()) for t in got])
        names = {id(p): n for n, p in model.named_parameters()}
        return r == last_rank, losses, {names[id(p)]: p.detach().clone() for p in params}

    return simpg.run(rank, pp)


MULTI = ["ScheduleLoopedBFS", "ScheduleInterleaved1F1B", "ScheduleInterleavedZeroBubble"]


@pytest.mark.parametrize("schedule_cls", MULTI)
@pytest.mark.parametrize("pp, v, m, batch", [(2, 2, 2, 4), (2, 2, 4, 8), (2, 3, 4, 8),
                                             (4, 2, 4, 8), (4, 2, 8, 16), (2, 1, 2, 4),
                                             (2, 4, 4, 8), (8, 2, 8, 16)])
def test_virtual_stages_train_like_one_device(schedule_cls, pp, v, m, batch):
    data = _data(2, batch)
    want_losses, want = _one_device(_model(pp * v), data, m)
    _check_pipelined(_pipelined_multi(schedule_cls, pp, v, m, data), want_losses, want)


@pytest.mark.parametrize("pp, m, batch", [(2, 4, 8), (2, 3, 6), (2, 5, 11), (2, 1, 2),
                                          (4, 8, 16), (4, 4, 8), (4, 2, 4), (8, 16, 32)])
def test_the_zero_bubble_v_trains_like_one_device(pp, m, batch):
    """Stages r and 2 * pp - 1 - r on rank r (Note [zero bubble]): stages pp - 1 and pp hand
    over in memory, the first and last share rank 0; fewer micro-batches than a full V too."""
    data = _data(2, batch)
    want_losses, want = _one_device(_model(2 * pp), data, m)
    _check_pipelined(_pipelined_multi("ScheduleZBVZeroBubble", pp, 2, m, data), want_losses,
                     want)


@pytest.mark.parametrize("pp, m, batch", [(2, 4, 8), (2, 5, 11), (4, 8, 16), (4, 11, 23),
                                          (8, 16, 32), (1, 2, 4)])
def test_dualpipev_trains_like_one_device(pp, m, batch):
    data = _data(2, batch)
    want_losses, want = _one_device(_model(2 * pp), data, m)
    _check_pipelined(_pipelined_multi("ScheduleDualPipeV", pp, 2, m, data), want_losses, want)


def _torchs_dualpipev_order(pp: int, m: int, rank: int) -> list[tuple[str, int, int]]:
    """torch's DualPipeV actions on ``rank``, an overlapped pair as its forward then its
    backward, each as (kind, local stage, micro-batch)."""
    from types import SimpleNamespace

    from torch.distributed.pipelining.schedules import ScheduleDualPipeV

    from torch.distributed.pipelining.schedules import _ComputationType as C

    kinds = {C.FORWARD: "F", C.BACKWARD_INPUT: "I", C.BACKWARD_WEIGHT: "W",
             C.FULL_BACKWARD: "B"}
    plan = ScheduleDualPipeV._calculate_single_rank_operations(
        SimpleNamespace(pp_group_size=pp, _n_microbatches=m), rank)
    out = []
    for action in plan:
        for a in action.sub_actions or (action,):
            out.append((kinds[a.computation_type], 0 if a.stage_index == rank else 1,
                        a.microbatch_index))
    return out


def _dualpipev_on_each_rank(pp: int, m: int, body):
    import dtensor.pipelining as ours

    def rank():
        r = torch.distributed.get_rank()
        stages = [ours.PipelineStage(nn.Identity(), i, 2 * pp, torch.device("cpu"))
                  for i in (r, 2 * pp - 1 - r)]
        return body(r, stages)

    return simpg.run(rank, pp)


@pytest.mark.parametrize("pp", [1, 2, 3, 4, 8])
def test_dualpipev_runs_torchs_order_action_by_action(pp):
    import dtensor.pipelining as ours

    def orders(r, stages):
        return [ours.ScheduleDualPipeV(stages, m, loss_fn=_loss)._order(m)
                for m in range(2 * pp, 2 * pp + 6)]

    for r, got in enumerate(_dualpipev_on_each_rank(pp, 0, orders)):
        for m, order in zip(range(2 * pp, 2 * pp + 6), got):
            assert order == _torchs_dualpipev_order(pp, m, r), (pp, m, r)


def test_dualpipev_refuses_fewer_micro_batches_than_stages():
    import dtensor.pipelining as ours

    def build(r, stages):
        with pytest.raises(PipeliningError, match="at least as many micro-batches as stages: "
                                                  "3 micro-batches, 4 stages"):
            ours.ScheduleDualPipeV(stages, 3, loss_fn=_loss)

    _dualpipev_on_each_rank(2, 3, build)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("schedule_cls", MULTI + ["ScheduleZBVZeroBubble", "ScheduleDualPipeV"])
@pytest.mark.parametrize("pp, v, m, batch", [(2, 2, 4, 8), (4, 2, 8, 16)])
def test_virtual_stages_match_torchs_schedules(schedule_cls, pp, v, m, batch):
    import torch.distributed.pipelining as torch_pp
    data = _data(2, batch)
    ours = _pipelined_multi(schedule_cls, pp, v, m, data)
    theirs = _pipelined_multi(schedule_cls, pp, v, m, data, lib=torch_pp)
    for (_, our_losses, our_w), (_, their_losses, their_w) in zip(ours, theirs):
        assert sum(our_losses, []) == pytest.approx(sum(their_losses, []), rel=1e-6)
        for name in our_w:
            torch.testing.assert_close(our_w[name], their_w[name], msg=name)


def test_a_single_stage_schedule_refuses_virtual_stages():
    def rank():
        r = torch.distributed.get_rank()
        stage = PipelineStage(nn.Linear(2, 2), r, 4)
        with pytest.raises(PipeliningError, match="need a multi-stage schedule"):
            ScheduleGPipe(stage, 2)
        return True

    assert all(simpg.run(rank, 2))
