"""The in-project models (examples.models): single-device sanity, and their tensor-parallel
plans on simulated meshes giving one device's loss and every parameter's gradient, with no
gathering fallback."""

from __future__ import annotations

import copy
import math
from types import ModuleType

import pytest
import torch
import torch.distributed as dist
from torch import nn

import simpg
from tests.support.mesh_world import run_on_mesh
from dtensor import DTensor, Replicate, Shard, distribute_tensor, fallback_policy
from dtensor import init_device_mesh
from dtensor.parallel import distribute_module, loss_parallel, parallelize_module
from examples.models import bert, llama

# 6 heads (3 kv heads), 90 ffn features, 1001 classes and 30 positions: none divides over 4
LLAMA_ODD = llama.config("tiny", dim=96, n_heads=6, n_kv_heads=3, ffn_hidden=90,
                         vocab_size=1001)
BERT_ODD = bert.config("tiny", dim=96, n_heads=6, ffn_hidden=90, vocab_size=1001,
                       max_seq_len=30)


def _batch(mod: ModuleType, cfg, bsz: int = 4, seq: int = 8, seed: int = 0
           ) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    if mod is llama:
        tokens = torch.randint(0, cfg.vocab_size, (bsz, seq + 1), generator=g)
        return tokens[:, :-1], tokens[:, 1:]
    tokens = torch.randint(0, cfg.vocab_size - 1, (bsz, seq), generator=g)
    return bert.mask_tokens(tokens, cfg, g, prob=0.3)


def _model(mod: ModuleType, cfg) -> nn.Module:
    torch.manual_seed(0)
    return llama.Llama(cfg) if mod is llama else bert.Bert(cfg)


def _loss(mod: ModuleType, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return llama.loss_fn(logits, labels) if mod is llama else bert.mlm_loss(logits, labels)


# -- single device ------------------------------------------------------------------------------
@pytest.mark.parametrize("mod", [llama, bert], ids=["llama", "bert"])
def test_logits_shape_and_torchtitan_like_names(mod):
    cfg = mod.PRESETS["tiny"]
    model = _model(mod, cfg)
    inputs, _ = _batch(mod, cfg, bsz=3, seq=5)
    assert model(inputs).shape == (3, 5, cfg.vocab_size)
    names = {n for n, _ in model.named_parameters()}
    if mod is llama:
        want = {"tok_embeddings.weight", "layers.1.attention_norm.weight",
                "layers.1.attention.wk.weight", "layers.0.feed_forward.w3.weight",
                "norm.weight", "output.weight"}
        assert isinstance(model.layers[0].attention_norm, nn.RMSNorm)
    else:
        want = {"embeddings.tok.weight", "embeddings.pos.weight", "layers.1.mlp.fc2.bias",
                "layers.0.attention.wo.weight", "head.dense.weight", "head.decoder.bias"}
    assert want <= names


@pytest.mark.parametrize("mod", [llama, bert], ids=["llama", "bert"])
def test_a_few_sgd_steps_fit_a_fixed_batch(mod):
    cfg = mod.PRESETS["tiny"]
    model = _model(mod, cfg)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    inputs, labels = _batch(mod, cfg, seq=16)
    losses = []
    for _ in range(6):
        loss = _loss(mod, model(inputs), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(b < a for a, b in zip(losses, losses[1:])), losses
    assert losses[-1] < losses[0] - 0.5, losses


def test_llama_logits_at_t_do_not_see_later_tokens():
    model = _model(llama, llama.PRESETS["tiny"])
    tokens, _ = _batch(llama, model.config, bsz=2, seq=12)
    later = tokens.clone()
    later[:, 7:] = (later[:, 7:] + 1) % model.config.vocab_size
    with torch.no_grad():
        a, b = model(tokens), model(later)
    assert torch.allclose(a[:, :7], b[:, :7], atol=1e-6)
    assert not torch.allclose(a[:, 7:], b[:, 7:], atol=1e-3)  # the change does reach them


def test_bert_attends_both_ways():
    model = _model(bert, bert.PRESETS["tiny"])
    tokens = torch.randint(0, 999, (2, 12), generator=torch.Generator().manual_seed(1))
    later = tokens.clone()
    later[:, -1] = (later[:, -1] + 1) % 999
    with torch.no_grad():
        assert not torch.allclose(model(tokens)[:, 0], model(later)[:, 0], atol=1e-5)


def test_rotary_scores_depend_on_relative_position_only():
    cos, sin = llama.rope_tables(8, 16, 10000.0)
    q, k = torch.randn(1, 1, 1, 8).expand(1, 16, 1, 8), torch.randn(1, 1, 1, 8).expand(1, 16, 1, 8)
    rq, rk = llama.apply_rotary(q, cos, sin), llama.apply_rotary(k, cos, sin)
    score = (rq[0, :, 0] @ rk[0, :, 0].T)  # (query position, key position)
    assert torch.allclose(score[3, 1], score[12, 10], atol=1e-5)  # both 2 apart
    assert torch.allclose(rq[0, 0], q[0, 0])  # position 0 is not rotated
    assert torch.allclose(rq.norm(dim=-1), q.norm(dim=-1), atol=1e-5)  # rotations


def test_repeat_kv_serves_each_group_from_its_kv_head():
    x = torch.randn(2, 3, 2, 4)
    assert torch.equal(llama.repeat_kv(x, 3), x.repeat_interleave(3, dim=2))
    assert llama.repeat_kv(x, 1) is x


def test_mask_tokens_labels_only_masked_positions():
    cfg = bert.PRESETS["tiny"]
    tokens = torch.randint(0, 999, (4, 16), generator=torch.Generator().manual_seed(2))
    inputs, labels = bert.mask_tokens(tokens, cfg, torch.Generator().manual_seed(3))
    masked = inputs == cfg.mask_token
    assert masked.any() and torch.equal(labels[masked], tokens[masked])
    assert (labels[~masked] == bert.IGNORE).all() and torch.equal(inputs[~masked], tokens[~masked])


def test_bad_configs_and_inputs_say_what_was_expected():
    with pytest.raises(ValueError, match="dim=60 must be a multiple of n_heads=7"):
        llama.LlamaConfig(dim=60, n_heads=7)
    with pytest.raises(ValueError, match="n_heads=4 must be a multiple of n_kv_heads=3"):
        llama.LlamaConfig(n_kv_heads=3)
    with pytest.raises(ValueError, match="head_dim=3 must be even"):
        llama.LlamaConfig(dim=12, n_heads=4, n_kv_heads=4)
    with pytest.raises(KeyError, match="expected one of"):
        bert.config("huge")
    with pytest.raises(ValueError, match="max_seq_len=4"):
        llama.Llama(llama.config("tiny", max_seq_len=4))(torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="n_layers=0: expected >= 1"):
        bert.BertConfig(n_layers=0)


# -- the plans as data ----------------------------------------------------------------------------
def _placements_in(style: object) -> list:
    found = []
    for v in vars(style).values():
        for x in v if isinstance(v, (tuple, list)) else (v,):
            if type(x).__name__ in ("Shard", "Replicate", "Partial"):
                found.append(x)
            elif hasattr(x, "__dict__") and not isinstance(x, type):
                found += _placements_in(x)
    return found


@pytest.mark.parametrize("mod", [llama, bert], ids=["llama", "bert"])
def test_the_same_plan_builds_from_torch_styles_with_torch_placements(mod):
    import torch.distributed.tensor as torch_dt
    import torch.distributed.tensor.parallel as torch_tp

    import dtensor.parallel

    cfg = mod.PRESETS["tiny"]
    for sp in (True, False):
        ours = mod.tp_plan(cfg, sequence_parallel=sp)
        theirs = mod.tp_plan(cfg, sequence_parallel=sp, styles=torch_tp)
        assert list(ours) == list(theirs)
        for key in ours:
            assert type(ours[key]).__name__ == type(theirs[key]).__name__, key
            assert type(theirs[key]).__module__.startswith("torch.distributed.tensor.parallel")
            assert isinstance(ours[key], dtensor.parallel.ParallelStyle), key
            assert all(type(p).__module__.startswith("dtensor")
                       for p in _placements_in(ours[key])), key
            assert all(isinstance(p, torch_dt.Placement) for p in _placements_in(theirs[key]))
    with pytest.raises(ValueError, match="lack"):
        mod.tp_plan(cfg, styles=torch_tp, placements=torch)  # torch has no Shard

    def body():  # torch's parallelize_module takes the plan: every key matches a module
        from torch.distributed.device_mesh import init_device_mesh as torch_mesh

        model = torch_tp.parallelize_module(_model(mod, cfg), torch_mesh("cpu", (2,)),
                                            mod.tp_plan(cfg, styles=torch_tp))
        return {n: p.placements for n, p in model.named_parameters()}

    placements = simpg.run(body, 2, timeout=60)[0]
    assert placements["layers.0.attention.wq.weight"] == (torch_dt.Shard(0),)
    assert placements["layers.1.attention.wo.weight"] == (torch_dt.Shard(1),)


# -- tensor parallel on simpg ---------------------------------------------------------------------
def _grads(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
            for n, p in model.named_parameters()}


def _tp_matches_one_device(mod: ModuleType, cfg, mesh_shape: tuple[int, ...], *,
                           sequence_parallel: bool, loss_par: bool, seq: int = 8) -> None:
    """Loss and every full gradient equal one device's. On a (dp, tp) mesh each dp rank takes
    its rows of the batch and the gradients are averaged over dp by hand, so the reference is
    the mean of the per-row-block losses."""
    base = _model(mod, cfg)
    dp = mesh_shape[0] if len(mesh_shape) == 2 else 1
    inputs, labels = _batch(mod, cfg, bsz=2 * dp, seq=seq)
    ref = copy.deepcopy(base)
    want_loss = sum(_loss(mod, ref(i), t) for i, t in zip(inputs.chunk(dp), labels.chunk(dp)))
    (want_loss / dp).backward()
    want = _grads(ref)
    plan = mod.tp_plan(cfg, sequence_parallel=sequence_parallel, loss_parallel=loss_par)

    def body():
        names = ("dp", "tp") if dp > 1 else ("tp",)
        mesh = init_device_mesh("cpu", mesh_shape, mesh_dim_names=names)
        model = copy.deepcopy(base)
        # every rank holds the same weights: each keeps its own piece, no broadcast
        parallelize_module(model, mesh["tp"], plan, src_data_rank=None)
        row = mesh.get_local_rank("dp") if dp > 1 else 0
        x, t = inputs.chunk(dp)[row], labels.chunk(dp)[row]
        with fallback_policy("error"):
            if loss_par:
                with loss_parallel():
                    loss = _loss(mod, model(x), t)
            else:
                loss = _loss(mod, model(x), t)
            loss.backward()
        value = (loss.full_tensor() if isinstance(loss, DTensor) else loss).detach()
        if dp > 1:  # data parallel by hand: average the loss and the local gradient pieces
            group = mesh.get_group("dp")
            for p in [value] + [p.grad for p in model.parameters()]:
                piece = p._local_tensor if isinstance(p, DTensor) else p
                dist.all_reduce(piece, group=group)
                piece /= dp
        return value, _grads(model), {n: p.placements for n, p in model.named_parameters()
                                      if isinstance(p, DTensor)}

    for value, grads, placements in simpg.run(body, math.prod(mesh_shape), timeout=120):
        assert torch.allclose(value, want_loss / dp, rtol=1e-5)
        for name, g in grads.items():
            assert torch.allclose(g, want[name], rtol=1e-4, atol=1e-6), name
    # the plan really sharded the model: projections split, norms replicated
    first = "layers.0.attention.wq.weight"
    assert placements[first] == (Shard(0),)
    assert placements[first.replace("wq", "wo")] == (Shard(1),)
    norm = "layers.0.attention_norm.weight"
    assert placements.get(norm) == ((Replicate(),) if sequence_parallel else None)


@pytest.mark.parametrize("mod,cfg", [(llama, LLAMA_ODD), (bert, BERT_ODD)],
                         ids=["llama", "bert"])
def test_tp4_sequence_and_loss_parallel_with_uneven_heads_vocab_and_sequence(mod, cfg):
    # 7 positions over 4 ranks: 2, 2, 2, 1 (the styles learn the global length)
    _tp_matches_one_device(mod, cfg, (4,), sequence_parallel=True, loss_par=True, seq=7)


@pytest.mark.parametrize("mod", [llama, bert], ids=["llama", "bert"])
def test_tp4_without_sequence_or_loss_parallel(mod):
    _tp_matches_one_device(mod, mod.PRESETS["tiny"], (4,), sequence_parallel=False,
                           loss_par=False)


@pytest.mark.parametrize("mod,cfg", [(llama, LLAMA_ODD), (bert, BERT_ODD)],
                         ids=["llama", "bert"])
def test_dp2_by_tp2_mesh(mod, cfg):
    _tp_matches_one_device(mod, cfg, (2, 2), sequence_parallel=True, loss_par=True)


@pytest.mark.parametrize("placements", [[Shard(0)], [Shard(1)], [Shard(0), Shard(1)]],
                         ids=["batch", "sequence", "batch+sequence"])
@pytest.mark.parametrize("mod", [llama, bert], ids=["llama", "bert"])
def test_replicated_model_on_sharded_token_ids(mod, placements):
    # every op of the model has a rule for token ids split by rows (3 over 2) or positions
    # (7 over 2): the whole forward and backward runs without the gathering fallback
    cfg = mod.config("tiny", vocab_size=1001)
    base = _model(mod, cfg)
    inputs, labels = _batch(mod, cfg, bsz=3, seq=7)
    ref = copy.deepcopy(base)
    want_loss = _loss(mod, ref(inputs), labels)
    want_loss.backward()

    def body():
        mesh = init_device_mesh("cpu", (2,) * len(placements))
        model = distribute_module(copy.deepcopy(base), mesh)  # parameters Replicate
        x, t = (distribute_tensor(v, mesh, placements) for v in (inputs, labels))
        with fallback_policy("error"):
            loss = _loss(mod, model(x), t)
            loss.backward()
        return loss.full_tensor().detach(), _grads(model)

    for value, grads in simpg.run(body, 2 ** len(placements), timeout=120):
        assert torch.allclose(value, want_loss.detach(), rtol=1e-5)
        for name, g in grads.items():
            assert torch.allclose(g, ref.get_parameter(name).grad, rtol=1e-4, atol=1e-6), name


# -- runtime fixes the models needed ---------------------------------------------------------------
def test_reshape_of_a_piece_laid_out_unlike_its_global_tensor():
    # after an all-to-all each piece is contiguous while the global tensor is transposed; the
    # transpose back is contiguous globally (reshape picks view) but not on the pieces
    x = torch.randn(4, 6, 8)

    def body(mesh):
        t = distribute_tensor(x, mesh, [Shard(2)]).transpose(1, 2)
        back = t.redistribute(mesh, [Shard(0)]).transpose(1, 2)
        assert back.is_contiguous() and not back.to_local().is_contiguous()
        with fallback_policy("error"):
            y = back.reshape(4, 48)
        assert y.placements == (Shard(0),)
        return y.full_tensor()

    for got in run_on_mesh((2,), body):
        assert torch.equal(got, x.reshape(4, 48))
