"""The README's Python snippets run as written, so they cannot drift from the API.

Each snippet is taken from README.md by the heading it sits under and run as it is, with only
the names it leaves to the reader (a model, its inputs, a training step) given beforehand: a
renamed function, a changed signature or a wrong claim in a ``# -> value`` comment fails here.
Snippets that build a mesh run on simulated ranks (simpg), as the README says they may."""

from __future__ import annotations

import ast
import copy
import re

import pytest
import torch
import torch.distributed as dist

import simpg
from examples.models import llama
from tests.support.paths import README as README_PATH

README = README_PATH.read_text()
_BLOCK = re.compile(r"```python\n(?P<code>.*?)```", re.S)


def snippet(heading: str) -> str:
    """The first Python block after ``heading`` (a whole README heading line)."""
    start = README.index(f"\n{heading}\n")
    m = _BLOCK.search(README, start)
    assert m is not None, f"README: no ```python block after {heading!r}"
    return m["code"]


def tiny_llama() -> llama.Llama:
    torch.manual_seed(0)
    return llama.Llama(llama.config("tiny", n_layers=1, vocab_size=64, max_seq_len=8))


def test_every_snippet_is_run_here() -> None:
    # a new README snippet needs a test below: this list is where it is named
    headings = [line for line in README.split("\n") if line.startswith("#")]
    under = []
    for m in _BLOCK.finditer(README):
        before = README[:m.start()].split("\n")
        under.append(next(line for line in reversed(before) if line in headings))
    assert under == ["## simpg in five minutes", "### Trace, cost model, timeline",
                     "## dtensor in five minutes", "## Parallel training in five minutes",
                     "### Pipeline parallel", "## Sharded checkpoints", "## Whole-graph sharding"]


def test_simpg_snippet_returns_what_its_comment_says() -> None:
    code = snippet("## simpg in five minutes")
    *body, last = code.strip().split("\n")
    expression, _, claim = last.partition("# ->")
    namespace: dict = {}
    exec("\n".join(body), namespace)
    assert eval(expression, namespace) == ast.literal_eval(claim.strip())


def test_trace_snippet(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)

    def train_step() -> None:
        dist.all_reduce(torch.ones(4))

    exec(snippet("### Trace, cost model, timeline"), {"simpg": simpg, "train_step": train_step})
    assert "all_reduce" in capsys.readouterr().out
    assert (tmp_path / "trace.json").stat().st_size > 0


def _run_on_8_ranks(code: str, names: dict) -> None:
    def body() -> None:
        exec(code, dict(names))
    simpg.run(body, 8)


def test_dtensor_snippet() -> None:
    # w, bias and local are the reader's: plain tensors mix with DTensors as replicated
    _run_on_8_ranks(snippet("## dtensor in five minutes"),
                    {"w": torch.ones(5, 3), "bias": torch.zeros(3), "local": torch.ones(2, 5)})


def test_parallel_training_snippet() -> None:
    tokens = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(0))

    def body() -> None:
        exec(snippet("## Parallel training in five minutes"),
             {"model": tiny_llama(), "tokens": tokens, "targets": tokens.roll(-1, 1)})
    simpg.run(body, 8)


def test_pipeline_snippet_gives_one_devices_losses() -> None:
    from tests.pipelining.test_schedules import _model, _stage_modules
    model = _model(4)
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(8, 8, generator=g), torch.randn(8, 8, generator=g)
    with torch.no_grad():
        want = [float(torch.nn.functional.mse_loss(model(a), b))
                for a, b in zip(x.chunk(4), y.chunk(4))]

    def body() -> list[float]:
        names = {"stage_modules": _stage_modules(copy.deepcopy(model), 2), "x": x, "y": y}
        exec(snippet("### Pipeline parallel"), names)
        return [float(v.detach()) for v in names["losses"]]

    got = simpg.run(body, 8)
    for rank, losses in enumerate(got):  # ranks 4-7 are the last stage (pp coordinate 1)
        assert losses == (pytest.approx(want, rel=1e-5) if rank >= 4 else []), rank


def test_checkpoint_snippet(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # the snippet saves to "ck"

    def body() -> None:
        import dtensor
        from dtensor import Shard
        from dtensor.parallel import fully_shard
        mesh = dtensor.init_device_mesh("cpu", (8,))
        model = fully_shard(torch.nn.Linear(12, 5), mesh)
        opt = torch.optim.AdamW(model.parameters())
        model(torch.randn(3, 12)).sum().backward()
        opt.step()
        saved = {k: v.full_tensor() for k, v in model.state_dict().items()}
        names = {"model": model, "opt": opt}
        code = snippet("## Sharded checkpoints")
        save, resume = code.split("\n\n", 1)
        exec(save, names)
        # the resuming job: the same model in another layout, a fresh optimizer
        model = torch.nn.Linear(12, 5)
        for p in model.parameters():
            torch.nn.init.zeros_(p)
        model.weight = torch.nn.Parameter(dtensor.distribute_tensor(
            model.weight.detach(), mesh, [Shard(1)]))
        model.bias = torch.nn.Parameter(dtensor.distribute_tensor(
            model.bias.detach(), mesh, [Shard(0)]))
        names.update(model=model, opt=torch.optim.AdamW(model.parameters()))
        exec(resume, names)
        for k, v in model.state_dict().items():
            torch.testing.assert_close(v.full_tensor(), saved[k], rtol=0, atol=0)
        assert names["opt"].state  # the moments came back with the load
    simpg.run(body, 8)


@pytest.mark.filterwarnings("ignore::UserWarning")  # make_fx's warnings while capturing
def test_graph_snippet() -> None:
    import dtensor
    from dtensor import Replicate, Shard
    model = tiny_llama()
    tokens = torch.randint(0, 64, (4, 8), generator=torch.Generator().manual_seed(0))
    targets = tokens.roll(-1, 1)
    flat = [t.detach() for t in list(model.parameters()) + list(model.buffers())]
    code = snippet("## Whole-graph sharding").replace("(2, 4)", "(2, 2)")  # a 4-rank world
    plan_part, run_part = code.split("loss, *grads = ", 1)
    names = {"model": model, "loss_fn": llama.loss_fn, "tokens": tokens, "targets": targets,
             "Shard": Shard, "Replicate": Replicate}
    exec(plan_part, names)
    want = names["g"](*flat, tokens, targets)[0]

    def body() -> None:
        mine = dict(names, mesh=dtensor.init_device_mesh("cpu", (2, 2)),
                    params_buffers_and_inputs=[*flat, tokens, targets])
        exec("loss, *grads = " + run_part, mine)
        torch.testing.assert_close(mine["loss"].full_tensor(), want)
    simpg.run(body, 4)
