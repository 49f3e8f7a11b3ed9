"""pipeline(module, mb_args, split_spec=...): a whole model cut into stage modules at named
submodules (Note [cutting a traced model] in dtensor/pipelining/tracer.py)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import simpg
import dtensor.pipelining as pipelining
from dtensor.pipelining import PipeliningError, SplitPoint, pipe_split, pipeline


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(4, 8)
        self.down = nn.Linear(8, 4)

    def forward(self, x):
        return x + self.down(torch.tanh(self.up(x)))


class Net(nn.Module):
    """Four blocks and a head; the model's input is read again at the end (a value the
    middle stages pass through)."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Block() for _ in range(4)])
        self.head = nn.Linear(4, 4)

    def forward(self, x):
        h = x
        for layer in self.layers:
            h = layer(h)
        return self.head(h) + x.mean()


def _net() -> Net:
    torch.manual_seed(0)
    return Net()


class Tied(nn.Module):
    """``first``'s weight read again after ``second``: tied across a cut there."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(4, 4)
        self.second = nn.Linear(4, 4)

    def forward(self, x):
        return F.linear(self.second(self.first(x)), self.first.weight)


def _tied() -> Tied:
    torch.manual_seed(0)
    return Tied()


@pytest.mark.parametrize("spec, n", [
    ({"layers.2": SplitPoint.BEGINNING}, 2),
    ({"layers.1": SplitPoint.BEGINNING, "layers.3": SplitPoint.BEGINNING}, 3),
    ({"layers.0": SplitPoint.END, "layers.1": SplitPoint.END, "layers.2": SplitPoint.END}, 4),
])
def test_the_stages_in_a_row_compute_the_model(spec, n):
    net, x = _net(), torch.randn(3, 4)
    pipe = pipeline(net, (x,), split_spec=spec)
    assert pipe.num_stages == n
    values = (x,)
    owned = []
    for i in range(n):
        out = pipe.get_stage_module(i)(*values)
        values = out if isinstance(out, tuple) else (out,)
        owned += [name for name, _ in pipe.get_stage_module(i).named_parameters()]
    torch.testing.assert_close(values[0], net(x))
    assert sorted(owned) == sorted(name for name, _ in net.named_parameters())  # each once


@pytest.mark.parametrize("schedule", ["Schedule1F1B", "ScheduleGPipe"])
def test_traced_stages_train_like_one_device(schedule):
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(8, 4, generator=g), torch.randn(8, 4, generator=g)) for _ in range(2)]
    ref = _net()
    opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for x, y in data:
        (sum(F.mse_loss(ref(a), b) for a, b in zip(x.chunk(4), y.chunk(4))) / 4).backward()
        opt.step()
        opt.zero_grad()
    want = dict(ref.named_parameters())

    def rank():
        r = torch.distributed.get_rank()
        pipe = pipeline(_net(), (data[0][0].chunk(4)[0],),
                        split_spec={"layers.2": SplitPoint.BEGINNING})
        stage = pipe.build_stage(r)
        sched = getattr(pipelining, schedule)(stage, 4, loss_fn=F.mse_loss)
        opt = torch.optim.SGD(stage.submod.parameters(), lr=0.1)
        for x, y in data:
            sched.step(x) if r == 0 else sched.step(target=y)
            opt.step()
            opt.zero_grad()
        return {n: p.detach().clone() for n, p in stage.submod.named_parameters()}

    seen = set()
    for weights in simpg.run(rank, 2):
        for name, w in weights.items():
            torch.testing.assert_close(w, want[name].detach(), msg=name)
            seen.add(name)
    assert seen == set(want)


def test_what_cannot_be_cut_is_refused():
    x = torch.randn(2, 4)
    with pytest.raises(PipeliningError, match="found no cut: give split_spec"):
        pipeline(_net(), (x,))
    with pytest.raises(PipeliningError, match="names 'layers.9', which is not a submodule"):
        pipeline(_net(), (x,), split_spec={"layers.9": SplitPoint.BEGINNING})
    with pytest.raises(PipeliningError, match="expected SplitPoint.BEGINNING"):
        pipeline(_net(), (x,), split_spec={"head": "beginning"})
    with pytest.raises(PipeliningError, match=r"parameter 'first.weight' is read by stages "
                                              r"\[0, 1\]"):
        pipeline(_tied(), (x,), split_spec={"second": SplitPoint.BEGINNING})


class WithKeyword(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x, *, shift):
        return self.b(self.a(x) + shift)


def test_the_first_stage_takes_the_models_keyword_arguments():
    torch.manual_seed(0)
    net, x, shift = WithKeyword(), torch.randn(2, 4), torch.randn(4)
    pipe = pipeline(net, (x,), {"shift": shift}, split_spec={"b": SplitPoint.BEGINNING})
    first = pipe.get_stage_module(0)
    middle = first(x, shift=shift)
    torch.testing.assert_close(pipe.get_stage_module(1)(*middle)[0], net(x, shift=shift))
    with pytest.raises(PipeliningError, match="takes the inputs the model was traced with"):
        first(x, shift, 1)


class Marked(nn.Module):
    """Four blocks with a marker after every other one, as a user writes it for torch's
    tracer (``split_every`` says which; ``torch_marker`` uses torch's own pipe_split)."""

    def __init__(self, split_every: int = 2, torch_marker: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layers = nn.ModuleList([Block() for _ in range(4)])
        self.head = nn.Linear(4, 4)
        self.split_every, self.torch_marker = split_every, torch_marker

    def forward(self, x):
        h = x
        for i, layer in enumerate(self.layers):
            h = layer(h)
            if (i + 1) % self.split_every == 0 and i + 1 < len(self.layers):
                self._mark()
                self._mark()  # two markers in a row make one cut
        return self.head(h) + x.mean()

    def _mark(self) -> None:
        if self.torch_marker:
            from torch.distributed.pipelining import pipe_split as torchs
            torchs()
        else:
            pipe_split()


@pytest.mark.parametrize("split_every, torch_marker, n", [(2, False, 2), (1, False, 4),
                                                          (2, True, 2)])
def test_pipe_split_markers_cut_the_traced_model(split_every, torch_marker, n):
    net, x = Marked(split_every, torch_marker), torch.randn(3, 4)
    torch.testing.assert_close(net(x), Marked(4)(x))  # eagerly a marker does nothing
    pipe = pipeline(net, (x,))
    assert pipe.num_stages == n
    values = (x,)
    for i in range(n):
        module = pipe.get_stage_module(i)
        assert not any("pipe_split" in str(node.target) for node in module.graph.nodes)
        out = module(*values)
        values = out if isinstance(out, tuple) else (out,)
    torch.testing.assert_close(values[0], net(x))


def test_markers_and_split_points_cut_together():
    net, x = Marked(2), torch.randn(3, 4)
    pipe = pipeline(net, (x,), split_spec={"layers.3": SplitPoint.BEGINNING})
    assert pipe.num_stages == 3
    names = [sorted({n.split(".")[1] for n, _ in pipe.get_stage_module(i).named_parameters()
                     if n.startswith("layers.")}) for i in range(3)]
    assert names == [["0", "1"], ["2"], ["3"]]
