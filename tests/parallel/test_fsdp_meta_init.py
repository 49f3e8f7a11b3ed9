"""Meta-device init (Note [meta-device init] in dtensor/parallel/fsdp.py): a model built on
``meta``, parallelized (tensor parallel, fully_shard, both), then ``to_empty`` and
``reset_parameters``, holds only its pieces, issued no collective before ``to_empty``, and
trains like the same model built on one device."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn

import simpg
from dtensor import DTensor, Replicate, Shard, distribute_tensor, init_device_mesh
from dtensor.parallel import (fully_shard, parallelize_module,
                              state_bytes)
from examples.models import llama
from tests.support.fsdp_net import Net, data_parallel_blocks, tensor_parallel_blocks, train

X = torch.randn(4, 5, 8, generator=torch.Generator().manual_seed(0))


def _reset(model: nn.Module, seed: int) -> None:
    """The constructor's draws, in its order: each module's reset_parameters."""
    torch.manual_seed(seed)
    for module in model.modules():
        if hasattr(module, "reset_parameters"):
            module.reset_parameters()


def _parallelize(model: Net, mesh_shape: tuple[int, int], dp_mode: str) -> Net:
    mesh = init_device_mesh("cpu", mesh_shape, mesh_dim_names=("dp", "tp"))
    if mesh_shape[1] > 1:
        tensor_parallel_blocks(model, mesh["tp"])
    if dp_mode == "fsdp":
        data_parallel_blocks(model, mesh["dp"])
    return model


@pytest.mark.parametrize("mesh_shape, dp_mode", [((1, 2), "none"), ((2, 2), "fsdp"),
                                                 ((4, 1), "fsdp")],
                         ids=["tp2", "fsdp2xtp2", "fsdp4"])
def test_meta_init_trains_like_one_device(mesh_shape, dp_mode):
    torch.manual_seed(0)
    ref = Net()
    ref_losses = train(ref, X, 3)
    dp = mesh_shape[0]

    def body() -> tuple[list[float], dict, int, list]:
        with torch.device("meta"):
            model = Net()
        with simpg.trace() as t:
            _parallelize(model, mesh_shape, dp_mode)
        meta = [(n, p.device.type, p.to_local().device.type) for n, p in
                model.named_parameters() if isinstance(p, DTensor)]
        model.to_empty(device="cpu")
        _reset(model, 0)
        rows = X.chunk(dp)[dist.get_rank() // mesh_shape[1]]  # this rank's dp share
        losses = train(model, rows, 3)
        full = {n: p.full_tensor() if isinstance(p, DTensor) else p.detach()
                for n, p in model.named_parameters()}
        return losses, full, len(t.records), meta

    results = simpg.run(body, mesh_shape[0] * mesh_shape[1])
    for step, expected in enumerate(ref_losses):
        assert sum(r[0][step] for r in results) / len(results) == pytest.approx(expected,
                                                                                rel=1e-5)
    for losses, full, collectives, meta in results:
        assert collectives == 0  # nothing moved while the parameters were on meta
        assert meta and all((d, local) == ("meta", "meta") for _, d, local in meta)
        for name, p in ref.named_parameters():
            torch.testing.assert_close(full[name], p.detach(), msg=name)


def test_meta_init_allocates_only_each_ranks_pieces():
    def body() -> tuple[dict, dict, int]:
        with torch.device("meta"):
            model = Net()
        whole = sum(p.numel() * p.element_size() for p in model.parameters())
        _parallelize(model, (2, 2), "fsdp")
        model.to_empty(device="cpu")
        built_here = _parallelize(Net(), (2, 2), "fsdp")
        pieces = {n: tuple(p.to_local().shape) for n, p in model.named_parameters()}
        expected = {n: tuple(p.to_local().shape) for n, p in built_here.named_parameters()}
        return pieces, expected, state_bytes(list(model.parameters()))["parameters"] / whole

    for pieces, expected, fraction in simpg.run(body, 4):
        assert pieces == expected  # the pieces a model built on cpu would hold
        assert fraction < 0.3  # about a quarter: the head and w2's bias are not tp-sharded


def test_an_8b_llama_on_meta_takes_an_eighth_per_rank_and_no_collective():
    """A Llama-3-8B-sized config, tensor parallel 4 x fully sharded 2, parallelized on meta:
    each rank would allocate 1/8 of the 30 GiB (f32) at ``to_empty``."""
    cfg = llama.LlamaConfig(vocab_size=128256, dim=4096, n_layers=32, n_heads=32,
                            n_kv_heads=8, ffn_hidden=14336, max_seq_len=8192)

    def body() -> tuple[int, int, int]:
        mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
        with torch.device("meta"):
            model = llama.Llama(cfg)
        whole = sum(p.numel() * p.element_size() for p in model.parameters())
        with simpg.trace() as t:
            parallelize_module(model, mesh["tp"], llama.tp_plan(cfg))
            for layer in model.layers:
                fully_shard(layer, mesh["dp"])
            fully_shard(model, mesh["dp"])
        return whole, state_bytes(list(model.parameters()))["parameters"], len(t.records)

    for whole, mine, collectives in simpg.run(body, 8):
        assert whole > 30 * 2**30 - 2**30 and collectives == 0
        assert mine == pytest.approx(whole / 8, rel=1e-3)  # the norms are whole over tp


# Note [fills in chunks] in dtensor/decompositions/random.py: (op, arguments after the target)
CHUNKED_FILLS = {
    "uniform_": (torch.ops.aten.uniform_.default, [-1.0, 2.0]),
    "normal_": (torch.ops.aten.normal_.default, [1.0, 3.0]),
    "bernoulli_(float)": (torch.ops.aten.bernoulli_.float, [0.3]),
    "exponential_": (torch.ops.aten.exponential_.default, [1.0]),
    "geometric_": (torch.ops.aten.geometric_.default, [0.5]),
    "log_normal_": (torch.ops.aten.log_normal_.default, [1.0, 2.0]),
    "cauchy_": (torch.ops.aten.cauchy_.default, [0.0, 1.0]),
    "random_(from, to)": (getattr(torch.ops.aten.random_, "from"), [0, 10]),
    "random_(to)": (torch.ops.aten.random_.to, [7]),
    "random_": (torch.ops.aten.random_.default, []),
}


@pytest.mark.parametrize("name", sorted(CHUNKED_FILLS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16],
                         ids=["f32", "f64", "bf16"])
def test_a_fill_in_chunks_draws_what_one_whole_fill_draws(name, dtype):
    """Sizes that are not multiples of 16 (normal_'s block), chunks of 64 elements, 1-3
    dims, uneven pieces on a 2x2 mesh: every piece and the generator's next draw equal one
    device's whole fill."""
    from dtensor.layout import local_box
    from dtensor.decompositions.random import _fill_by_rows

    op, rest = CHUNKED_FILLS[name]
    cases = [((1001,), [Shard(0), Replicate()]), ((968,), [Shard(0), Shard(0)]),  # tail 8
             ((37, 29), [Shard(0), Shard(1)]),
             ((37, 29), [Replicate(), Shard(1)]), ((5, 7, 3), [Shard(2), Shard(0)])]

    def body() -> None:
        mesh = init_device_mesh("cpu", (2, 2))
        for shape, placements in cases:
            torch.manual_seed(0)
            full = op(torch.empty(shape, dtype=dtype), *rest)
            after = torch.rand(3)
            x = distribute_tensor(torch.empty(shape, dtype=dtype), mesh, placements)
            torch.manual_seed(0)
            assert _fill_by_rows(op, x, list(rest), {}, chunk_elements=64)
            box = local_box(shape, mesh.shape, placements, mesh.get_coordinate())
            mine = full[tuple(slice(a, b) for a, b in box)]
            assert torch.equal(x.to_local(), mine), (name, shape, placements)
            assert torch.equal(torch.rand(3), after), (name, shape, "generator advanced")

    simpg.run(body, 4)


def test_a_large_sharded_parameter_is_initialised_in_chunks_like_one_device():
    """Through the op: uniform_ and normal_ of a target above CHUNK_ELEMENTS."""
    from dtensor.decompositions.random import CHUNK_ELEMENTS

    shape = (CHUNK_ELEMENTS // 1000 + 3, 1000)

    def body() -> None:
        mesh = init_device_mesh("cpu", (2,))
        for fill in (lambda t: t.uniform_(-1, 1), lambda t: t.normal_(0, 0.02)):
            torch.manual_seed(0)
            full = fill(torch.empty(shape))
            x = distribute_tensor(torch.empty(shape), mesh, [Shard(1)])
            torch.manual_seed(0)
            fill(x)
            assert torch.equal(x.full_tensor(), full)

    simpg.run(body, 2)
