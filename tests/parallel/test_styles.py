"""dtensor.parallel styles on simpg: results and gradients equal one device, communication is
what tensor parallelism needs and no more, and misuse gets a clear error."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import simpg
from dtensor import DTensor, MeshError, Replicate, Shard, fallback_policy, init_device_mesh
from dtensor.parallel import (ColwiseParallel, ParallelPlanError, ParallelStyleError,
                              PrepareModuleInput, PrepareModuleInputOutput, PrepareModuleOutput,
                              RowwiseParallel, SequenceParallel, distribute_module,
                              parallelize_module)


class MLP(nn.Module):
    def __init__(self, hidden: int = 14) -> None:  # 14 over 4 ranks: pieces 4, 4, 4, 2
        super().__init__()
        self.norm = nn.LayerNorm(8)
        self.w1 = nn.Linear(8, hidden)
        self.w2 = nn.Linear(hidden, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.gelu(self.w1(self.norm(x))))


def _pair(seed: int = 0) -> tuple[MLP, MLP]:
    torch.manual_seed(seed)
    ref = MLP()
    model = MLP()
    model.load_state_dict(ref.state_dict())
    return ref, model


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if isinstance(t, DTensor) else t


def _check_grads(model: nn.Module, ref: nn.Module) -> None:
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(_full(p.grad), q.grad, msg=name)
        if isinstance(p, DTensor):  # Note [grads keep the parameter's placements]
            assert p.grad.placements == p.placements, name


def test_colwise_then_rowwise_matches_one_device_with_one_all_reduce_each_way():
    x = torch.randn(2, 7, 8, generator=torch.Generator().manual_seed(1))

    def body() -> list:
        mesh = init_device_mesh("cpu", (4,))
        ref, model = _pair()
        parallelize_module(model, mesh, {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
        assert model.w1.weight.placements == (Shard(0),)
        assert model.w2.weight.placements == (Shard(1),) and model.w2.bias.placements == (
            Replicate(),)
        with fallback_policy("error"), simpg.trace() as t:
            y = model(x)
            assert not isinstance(y, DTensor)  # use_local_output: Replicate -> plain
            y.sum().backward()
        ref(x).sum().backward()
        torch.testing.assert_close(y, ref(x))
        _check_grads(model, ref)
        return [r.op for r in t.records]

    ops = simpg.run(body, 4)[0]
    # forward: the row-wise partial sums; backward: the column-wise input gradient
    assert ops == ["all_reduce", "all_reduce"]


@pytest.mark.parametrize("seq", [8, 7, 3], ids=lambda s: f"seq{s}")  # 3 over 4: an empty chunk
def test_sequence_parallel_block_matches_one_device(seq):
    x = torch.randn(2, seq, 8, generator=torch.Generator().manual_seed(2))
    plan = {"norm": SequenceParallel(),
            "w1": ColwiseParallel(input_layouts=Shard(1)),
            "w2": RowwiseParallel(output_layouts=Shard(1), use_local_output=False)}

    def body() -> None:
        mesh = init_device_mesh("cpu", (4,))
        ref, model = _pair()
        parallelize_module(model, mesh, plan)
        mine = x.chunk(4, dim=1)[dist.get_rank()] if dist.get_rank() < len(x.chunk(4, 1)) \
            else x[:, :0]
        with fallback_policy("error"):
            y = model(mine)  # a plain local chunk: its global length is gathered
            assert y.placements == (Shard(1),) and y.shape == x.shape
            full = y.full_tensor()
            full.pow(2).sum().backward()
        torch.testing.assert_close(full, ref(x))
        ref(x).pow(2).sum().backward()
        _check_grads(model, ref)

    simpg.run(body, 4)


def test_prepare_module_input_output_move_positional_and_keyword_inputs():
    class Probe(nn.Module):
        def forward(self, a, b, *, c=None):
            return a, b, c

    def body() -> None:
        mesh = init_device_mesh("cpu", (2,))
        a = torch.arange(8.0).view(4, 2)
        probe = parallelize_module(Probe(), mesh, PrepareModuleInput(
            input_layouts=(Replicate(), None), desired_input_layouts=(Shard(0), None),
            input_kwarg_layouts={"c": Replicate()}, desired_input_kwarg_layouts={"c": Shard(1)}))
        out_a, out_b, out_c = probe(a, "untouched", c=a)
        assert out_a.placements == (Shard(0),) and out_b == "untouched"
        assert out_c.placements == (Shard(1),)
        torch.testing.assert_close(out_c.full_tensor(), a)

        class One(nn.Module):
            def forward(self, t):
                t = t.to_local() if isinstance(t, DTensor) else t  # PrepareModuleInputOutput
                return DTensor.from_local(t.chunk(2)[dist.get_rank()], mesh, [Shard(0)])

        one = parallelize_module(One(), mesh, PrepareModuleOutput(
            output_layouts=Shard(0), desired_output_layouts=Replicate()))
        torch.testing.assert_close(one(a), a)  # gathered, then local
        both = parallelize_module(One(), mesh, PrepareModuleInputOutput(
            input_layouts=Replicate(), desired_input_layouts=Replicate(),
            output_layouts=Shard(0), desired_output_layouts=Replicate(),
            use_local_output=False))
        assert both(a).placements == (Replicate(),)

    simpg.run(body, 2)


def test_plan_keys_with_wildcards_and_distribute_module():
    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(MLP() for _ in range(3))

    def body() -> None:
        mesh = init_device_mesh("cpu", (2,))
        stack = Stack()
        parallelize_module(stack, mesh, {"layers.*.w1": ColwiseParallel(),
                                         "layers.[02].w2": RowwiseParallel()})
        assert all(layer.w1.weight.placements == (Shard(0),) for layer in stack.layers)
        assert isinstance(stack.layers[1].w2.weight, nn.Parameter)
        assert not isinstance(stack.layers[1].w2.weight, DTensor)
        assert stack.layers[2].w2.weight.placements == (Shard(1),)

        seen = []
        mlp = distribute_module(
            MLP(), mesh, partition_fn=lambda name, m, mesh: seen.append(name),
            input_fn=lambda m, inputs, mesh: tuple(i * 0 for i in inputs),
            output_fn=lambda m, out, mesh: out.full_tensor())
        assert seen == ["", "norm", "w1", "w2"]
        assert mlp.w1.weight.placements == (Replicate(),)  # the rest is replicated
        out = mlp(torch.ones(2, 8))
        assert not isinstance(out, DTensor)
        with pytest.raises(ParallelStyleError, match="already applied"):
            distribute_module(mlp, mesh)

    simpg.run(body, 2)


@pytest.mark.parametrize("build, error, message", [
    (lambda mesh, m: parallelize_module(m, mesh, {"w3": ColwiseParallel()}),
     ParallelPlanError, r"'w3' matches no submodule of MLP; closest module paths: 'w2', 'w1'"),
    (lambda mesh, m: parallelize_module(m, mesh, {"layers.*.atention": ColwiseParallel()}),
     ParallelPlanError, r"matches no submodule"),
    (lambda mesh, m: parallelize_module(m, mesh, {"norm": ColwiseParallel()}),
     ParallelStyleError, r"ColwiseParallel shards nn.Linear or nn.Embedding weights, but was "
                         r"applied to LayerNorm: use SequenceParallel"),
    (lambda mesh, m: parallelize_module(m, mesh, {"w1": "colwise"}),
     ParallelStyleError, r"parallelize_plan\['w1'\] is 'colwise': expected a ParallelStyle"),
    (lambda mesh, m: parallelize_module(m, init_device_mesh("cpu", (2, 1)), {
        "w1": ColwiseParallel()}),
     ParallelStyleError, r"shards over one mesh dim, but got the 2-d"),
    (lambda mesh, m: parallelize_module(m, mesh["tp"], {"w1": ColwiseParallel()}),
     MeshError, r"mesh dim 'tp' is not on mesh\(dp=2\): expected one of \['dp'\]"),
    (lambda mesh, m: [parallelize_module(m, mesh, {"w1": ColwiseParallel()}) for _ in "ab"],
     ParallelStyleError, r"Linear.weight is already a DTensor"),
    (lambda mesh, m: PrepareModuleInput(input_layouts=(Shard(0),),
                                        desired_input_layouts=(Shard(0), Replicate())),
     ParallelStyleError, r"different lengths \(1 and 2\)"),
], ids=["unknown-key", "typo-with-wildcard", "wrong-module", "not-a-style", "2d-mesh",
        "missing-mesh-dim", "twice", "layout-lengths"])
def test_misuse_gets_a_clear_error(build, error, message):
    def body() -> None:
        mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("dp",))
        with pytest.raises(error, match=message):
            build(mesh, MLP())

    simpg.run(body, 2)


@pytest.mark.parametrize("style, weight", [
    (ColwiseParallel(output_layouts=Replicate()), Shard(1)),   # embedding dim 10 over 4
    (RowwiseParallel(), Shard(0)),                              # vocabulary 13 over 4
], ids=["colwise", "rowwise"])
def test_embedding_sharded_either_way_matches_one_device(style, weight):
    ids = torch.randint(0, 13, (3, 5), generator=torch.Generator().manual_seed(3))

    def body() -> None:
        mesh = init_device_mesh("cpu", (4,))
        torch.manual_seed(0)
        ref = nn.Embedding(13, 10)
        emb = nn.Embedding(13, 10)
        emb.load_state_dict(ref.state_dict())
        parallelize_module(emb, mesh, style)
        assert emb.weight.placements == (weight,)
        with fallback_policy("error"), simpg.trace() as t:
            out = emb(ids)
            out.pow(2).sum().backward()
        ref(ids).pow(2).sum().backward()
        torch.testing.assert_close(out, ref(ids))
        torch.testing.assert_close(emb.weight.grad.full_tensor(), ref.weight.grad)
        # colwise: the output gathered over the embedding dim; rowwise: partial rows summed
        assert [r.op for r in t.records][:1] == (
            ["all_gather"] if weight == Shard(1) else ["all_reduce"])

    simpg.run(body, 4)
