"""A Llama-style decoder: RMSNorm, rotary embeddings, grouped-query attention, SwiGLU.

Modules are named like torchtitan's (``tok_embeddings``, ``layers.{i}.attention.wq``,
``layers.{i}.feed_forward.w1``, ``norm``, ``output``), so a tensor-parallel plan reads the
same. Weights are drawn at random (no downloads).

Note [global shapes]
Under the tensor-parallel plan the activations inside attention and the feed-forward stay
DTensors (``use_local_output=False``): their ``.shape`` is the global shape whatever the
sharding. So every shape here is written in global terms, ``view(bsz, seqlen, n_heads,
head_dim)``, never ``-1`` standing for "the heads this rank holds". The same code is then
right for heads that do not divide the mesh (6 heads over 4 ranks) and for any vocabulary.

>>> import torch
>>> model = Llama(PRESETS["tiny"])
>>> tokens = torch.randint(0, 1000, (2, 16))
>>> logits = model(tokens)
>>> logits.shape
torch.Size([2, 16, 1000])
>>> loss = loss_fn(logits, tokens)
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from examples.models._plan import family


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int = 1000
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    ffn_hidden: int = 192
    max_seq_len: int = 64
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    def __post_init__(self) -> None:
        for name in ("vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "ffn_hidden",
                     "max_seq_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"LlamaConfig.{name}={getattr(self, name)}: expected >= 1")
        if self.dim % self.n_heads:
            raise ValueError(f"LlamaConfig: dim={self.dim} must be a multiple of "
                             f"n_heads={self.n_heads} (head_dim = dim / n_heads)")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"LlamaConfig: n_heads={self.n_heads} must be a multiple of "
                             f"n_kv_heads={self.n_kv_heads} (each kv head serves a group)")
        if self.head_dim % 2:
            raise ValueError(f"LlamaConfig: head_dim={self.head_dim} must be even: rotary "
                             "embeddings rotate pairs of features")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


PRESETS: dict[str, LlamaConfig] = {
    # 0.23M parameters: a step of 4 x 64 tokens in ~15 ms on one CPU core
    "tiny": LlamaConfig(n_heads=8, n_kv_heads=4),  # 8 and 4 heads split evenly over tp=4
    # a bit larger: 8 heads over 4 kv heads, 7.1M parameters (~0.16 s a step of 4 x 64)
    "small": LlamaConfig(vocab_size=8192, dim=256, n_layers=4, n_heads=8, n_kv_heads=4,
                         ffn_hidden=688, max_seq_len=256),
}


def config(name: str, **overrides: Any) -> LlamaConfig:
    """A preset with some fields replaced: ``config("tiny", n_heads=8)``."""
    if name not in PRESETS:
        raise KeyError(f"no Llama preset {name!r}: expected one of {sorted(PRESETS)}")
    return dataclasses.replace(PRESETS[name], **overrides)


# -- rotary embeddings --------------------------------------------------------------------------
def rope_tables(head_dim: int, max_seq_len: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin, each (max_seq_len, head_dim): position t rotates feature pair
    (i, i + head_dim/2) by t * theta^(-2i/head_dim)."""
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(max_seq_len, dtype=torch.float64), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().float(), angles.sin().float()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` (bsz, seqlen, heads, head_dim) by position with real ops only:
    (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin) on the two halves of head_dim."""
    bsz, seqlen, heads, head_dim = x.shape
    half = head_dim // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    # (seqlen, head_dim) -> (1, seqlen, 1, head_dim): broadcast over batch and heads
    cos = cos.view(1, seqlen, 1, head_dim)
    sin = sin.view(1, seqlen, 1, head_dim)
    return x * cos + rotated * sin


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """(bsz, seqlen, n_kv_heads, head_dim) -> (bsz, seqlen, n_kv_heads * n_rep, head_dim),
    kv head j serving q heads j * n_rep ... (j + 1) * n_rep - 1, by expand and reshape."""
    if n_rep == 1:
        return x
    bsz, seqlen, n_kv, head_dim = x.shape
    x = x.unsqueeze(3).expand(bsz, seqlen, n_kv, n_rep, head_dim)
    return x.reshape(bsz, seqlen, n_kv * n_rep, head_dim)


# -- modules --------------------------------------------------------------------------------------
class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        self.wq = nn.Linear(cfg.dim, cfg.n_heads * cfg.head_dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.wo = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        bsz, seqlen, _ = x.shape  # Note [global shapes]
        q = self.wq(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        k = self.wk(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        n_rep = self.n_heads // self.n_kv_heads
        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)
        # (bsz, heads, seqlen, head_dim): sdpa attends over the second-to-last dim
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                             v.transpose(1, 2), is_causal=True)
        out = out.transpose(1, 2).reshape(bsz, seqlen, self.n_heads * self.head_dim)
        return self.wo(out)


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.ffn_hidden, bias=False)
        self.w2 = nn.Linear(cfg.ffn_hidden, cfg.dim, bias=False)
        self.w3 = nn.Linear(cfg.dim, cfg.ffn_hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.feed_forward = FeedForward(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    """Token ids (bsz, seqlen) int64 -> logits (bsz, seqlen, vocab_size).

    ``checkpoint_activations``: each transformer block runs under ``torch.utils.checkpoint``
    (non-reentrant), keeping only its inputs and recomputing the rest in the backward. It is
    an attribute, not a wrapper module, so parameter names (plans, checkpoints) stay the same.
    """

    def __init__(self, cfg: LlamaConfig, *, checkpoint_activations: bool = False) -> None:
        super().__init__()
        self.config = cfg
        self.checkpoint_activations = checkpoint_activations
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(TransformerBlock(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        cos, sin = rope_tables(cfg.head_dim, cfg.max_seq_len, cfg.rope_theta)
        # derived from the config, so not saved with the weights
        self.register_buffer("freqs_cos", cos, persistent=False)
        self.register_buffer("freqs_sin", sin, persistent=False)
        self.init_weights()

    @torch.no_grad()
    def init_weights(self) -> None:
        """Random init (seed with ``torch.manual_seed`` first for a reproducible model):
        embeddings N(0, 1), projections N(0, 0.02) with the residual outputs (wo, w2) scaled
        by 1/sqrt(2 n_layers) so the residual stream's variance does not grow with depth,
        the output N(0, dim^-1/2), norms 1."""
        cfg = self.config
        nn.init.normal_(self.tok_embeddings.weight)
        residual_std = 0.02 / math.sqrt(2 * cfg.n_layers)
        for layer in self.layers:
            for lin in (layer.attention.wq, layer.attention.wk, layer.attention.wv,
                        layer.feed_forward.w1, layer.feed_forward.w3):
                nn.init.normal_(lin.weight, std=0.02)
            for lin in (layer.attention.wo, layer.feed_forward.w2):
                nn.init.normal_(lin.weight, std=residual_std)
            layer.attention_norm.reset_parameters()
            layer.ffn_norm.reset_parameters()
        self.norm.reset_parameters()
        nn.init.normal_(self.output.weight, std=cfg.dim ** -0.5)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        bsz, seqlen = tokens.shape
        if seqlen > self.config.max_seq_len:
            raise ValueError(f"Llama: sequence of {seqlen} tokens, but the rotary tables "
                             f"cover max_seq_len={self.config.max_seq_len}")
        h = self.tok_embeddings(tokens)
        cos, sin = self.freqs_cos[:seqlen], self.freqs_sin[:seqlen]
        for layer in self.layers:
            if self.checkpoint_activations and torch.is_grad_enabled():
                h = checkpoint(layer, h, cos, sin, use_reentrant=False)
            else:
                h = layer(h, cos, sin)
        return self.output(self.norm(h))


class LlamaStage(nn.Module):
    """Stage ``stage`` of ``n_stages`` of a ``Llama`` for pipeline parallelism: its share of
    the blocks (in order, as equal as the count allows), the embedding on the first stage, the
    final norm and the output on the last, and the rotary tables on every one. Parameters keep
    the whole model's names (the blocks sit in a ``ModuleDict`` under their index, as in
    torchtitan), so a checkpoint saved from the stages loads into the whole model and back.
    The modules are the model's own, not copies: build the model, take the stage, drop the
    rest.

    >>> model = Llama(PRESETS["tiny"])
    >>> first, last = LlamaStage(model, 0, 2), LlamaStage(model, 1, 2)
    >>> tokens = torch.randint(0, 1000, (2, 16))
    >>> torch.equal(last(first(tokens)), model(tokens))
    True
    >>> [n for n, _ in last.named_parameters()][-2:]
    ['norm.weight', 'output.weight']
    """

    def __init__(self, model: Llama, stage: int, n_stages: int) -> None:
        super().__init__()
        n = len(model.layers)
        if not 0 <= stage < n_stages <= n:
            raise ValueError(f"LlamaStage: stage {stage} of {n_stages} over {n} blocks: "
                             f"expected 0 <= stage < n_stages <= n_layers ({n})")
        self.config = model.config
        self.checkpoint_activations = model.checkpoint_activations
        first, last = stage == 0, stage == n_stages - 1
        self.tok_embeddings = model.tok_embeddings if first else None
        lo, hi = stage * n // n_stages, (stage + 1) * n // n_stages
        self.layers = nn.ModuleDict({str(i): model.layers[i] for i in range(lo, hi)})
        self.norm = model.norm if last else None
        self.output = model.output if last else None
        # from the config, not the model's: a model built on the meta device has none
        where = "cpu" if model.freqs_cos.is_meta else model.freqs_cos.device
        cos, sin = rope_tables(self.config.head_dim, self.config.max_seq_len,
                               self.config.rope_theta)
        self.register_buffer("freqs_cos", cos.to(where), persistent=False)
        self.register_buffer("freqs_sin", sin.to(where), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Token ids in on the first stage, the residual stream (bsz, seqlen, dim) on the
        others; the residual stream out, or the logits on the last stage."""
        h = self.tok_embeddings(x) if self.tok_embeddings is not None else x
        seqlen = h.shape[1]
        cos, sin = self.freqs_cos[:seqlen], self.freqs_sin[:seqlen]
        for layer in self.layers.values():
            if self.checkpoint_activations and torch.is_grad_enabled():
                h = checkpoint(layer, h, cos, sin, use_reentrant=False)
            else:
                h = layer(h, cos, sin)
        return self.output(self.norm(h)) if self.output is not None else h


class RankStages(nn.Module):
    """The stages one rank holds under an interleaved or V schedule, as one module under the
    whole model's names (the blocks of every stage in one ``ModuleDict``, the embedding and
    the output where a stage has them), for what sees the rank's parameters at once: the
    optimizer, checkpoints, gradient clipping, reports. The modules are the stages' own; each
    stage (``stages``, not registered here) runs its own forward in the schedule.

    >>> model = Llama(PRESETS["small"])
    >>> both = RankStages([LlamaStage(model, 0, 4), LlamaStage(model, 3, 4)])
    >>> sorted(both.layers), both.output is model.output
    (['0', '3'], True)
    """

    def __init__(self, stages: list[LlamaStage]) -> None:
        super().__init__()
        self.stages = list(stages)  # a plain list: their modules are registered below
        self.config = stages[0].config
        self.tok_embeddings = next((s.tok_embeddings for s in stages
                                    if s.tok_embeddings is not None), None)
        self.layers = nn.ModuleDict({k: m for s in stages for k, m in s.layers.items()})
        self.norm = next((s.norm for s in stages if s.norm is not None), None)
        self.output = next((s.output for s in stages if s.output is not None), None)

    def forward(self, *args: Any) -> Any:
        raise RuntimeError("RankStages holds several pipeline stages: each runs its own "
                           "forward in the schedule (RankStages.stages)")


def stage_plan(plan: dict[str, Any], stage: LlamaStage) -> dict[str, Any]:
    """The keys of a plan for the whole model (``tp_plan``) that name modules this stage
    holds: the embedding's on the first stage only, the norm's and output's on the last."""
    return {key: style for key, style in plan.items()
            if getattr(stage, key.split(".")[0], None) is not None
            and (not key.startswith("layers.") or len(stage.layers))}


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross entropy over every position: logits (bsz, seqlen, vocab), targets (bsz,
    seqlen)."""
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(0, 1))


# -- tensor-parallel plan ----------------------------------------------------------------------
def tp_plan(config: LlamaConfig, *, sequence_parallel: bool = True, loss_parallel: bool = True,
            styles: ModuleType | None = None, placements: ModuleType | None = None
            ) -> dict[str, Any]:
    """The standard (torchtitan) tensor-parallel plan, as data for ``parallelize_module``.

    ``styles`` is the module of style classes, ``dtensor.parallel`` by default or
    ``torch.distributed.tensor.parallel``; placements come from the same family (see
    ``examples.models._plan.family``).

    - ``tok_embeddings``: vocab-sharded rows; token ids Replicate in; out Shard(1) (sequence)
      under sequence parallel, else Replicate.
    - norms: SequenceParallel (each rank normalizes its tokens), or left whole without it.
    - ``attention``/``feed_forward``: gather the sequence (Shard(1) -> Replicate) on entry;
      the rotary tables enter attention as Replicate DTensors, so no op mixes a DTensor with
      a plain tensor (torch's DTensor refuses that outside ``implicit_replication``).
    - wq/wk/wv/w1/w3 column-sharded, their outputs kept as DTensors (Note [global shapes]);
      wo/w2 row-sharded, their Partial sums reduce-scattered to Shard(1) (or all-reduced).
    - ``output``: column-sharded on the vocabulary; logits stay Shard(-1) DTensors for a
      class-sharded loss, else are gathered to a plain Replicate tensor.

    The residual stream between blocks stays a DTensor (``use_local_output=False`` on the
    embedding, wo and w2; torchtitan passes plain local pieces instead): then the norms'
    SequenceParallel and the next block's PrepareModuleInput see its global length, with no
    collective to learn it, and the residual adds are DTensor adds on matching shards. Our
    styles also accept plain pieces of any length (one small gather per module to learn the
    global length); torch's assume even pieces: keep seqlen a multiple of tp there.

    >>> plan = tp_plan(PRESETS["tiny"])  # doctest: +SKIP
    >>> parallelize_module(model, mesh["tp"], plan)  # doctest: +SKIP
    """
    f = family(styles, placements)
    R, seq = f.Replicate(), f.Shard(1)
    act = seq if sequence_parallel else R  # the residual stream between blocks
    plan: dict[str, Any] = {
        "tok_embeddings": f.RowwiseParallel(input_layouts=R, output_layouts=act,
                                            use_local_output=False),
        "layers.*.attention": f.PrepareModuleInput(input_layouts=(act, R, R),
                                                   desired_input_layouts=(R, R, R)),
        "layers.*.attention.wq": f.ColwiseParallel(use_local_output=False),
        "layers.*.attention.wk": f.ColwiseParallel(use_local_output=False),
        "layers.*.attention.wv": f.ColwiseParallel(use_local_output=False),
        "layers.*.attention.wo": f.RowwiseParallel(output_layouts=act, use_local_output=False),
        "layers.*.feed_forward.w1": f.ColwiseParallel(use_local_output=False),
        "layers.*.feed_forward.w2": f.RowwiseParallel(output_layouts=act,
                                                      use_local_output=False),
        "layers.*.feed_forward.w3": f.ColwiseParallel(use_local_output=False),
        "output": f.ColwiseParallel(input_layouts=act,
                                    output_layouts=f.Shard(-1) if loss_parallel else R,
                                    use_local_output=not loss_parallel),
    }
    if sequence_parallel:
        plan.update({
            "layers.*.attention_norm": f.SequenceParallel(),
            "layers.*.ffn_norm": f.SequenceParallel(),
            "layers.*.feed_forward": f.PrepareModuleInput(input_layouts=(seq,),
                                                          desired_input_layouts=(R,)),
            "norm": f.SequenceParallel(),
        })
    return plan
