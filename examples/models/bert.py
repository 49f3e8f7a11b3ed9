"""A BERT-style encoder with a masked-LM head: learned positions, post-LayerNorm blocks,
bidirectional attention, GELU MLP, biases everywhere.

Modules: ``embeddings.{tok,pos,norm}``, ``layers.{i}.attention.{wq,wk,wv,wo}``,
``layers.{i}.attention_norm``, ``layers.{i}.mlp.{fc1,fc2}``, ``layers.{i}.mlp_norm``,
``head.{dense,norm,decoder}``. Shapes are global (Note [global shapes] in
``examples.models.llama``). Weights are drawn at random (no downloads).

>>> import torch
>>> cfg = PRESETS["tiny"]
>>> model = Bert(cfg)
>>> tokens = torch.randint(0, cfg.vocab_size, (2, 16))
>>> inputs, labels = mask_tokens(tokens, cfg, torch.Generator().manual_seed(0))
>>> mlm_loss(model(inputs), labels).shape
torch.Size([])
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from examples.models._plan import family

IGNORE = -100  # label of a position the masked-LM loss skips (F.cross_entropy's default)


@dataclass(frozen=True)
class BertConfig:
    vocab_size: int = 1000
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    ffn_hidden: int = 256
    max_seq_len: int = 64
    norm_eps: float = 1e-12

    def __post_init__(self) -> None:
        for name in ("vocab_size", "dim", "n_layers", "n_heads", "ffn_hidden", "max_seq_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"BertConfig.{name}={getattr(self, name)}: expected >= 1")
        if self.dim % self.n_heads:
            raise ValueError(f"BertConfig: dim={self.dim} must be a multiple of "
                             f"n_heads={self.n_heads} (head_dim = dim / n_heads)")
        if self.vocab_size < 2:
            raise ValueError("BertConfig: vocab_size must leave room for the [MASK] token")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def mask_token(self) -> int:
        """The id of [MASK]: the last one."""
        return self.vocab_size - 1


PRESETS: dict[str, BertConfig] = {
    "tiny": BertConfig(),
    "small": BertConfig(vocab_size=8192, dim=256, n_layers=4, n_heads=8, ffn_hidden=1024,
                        max_seq_len=256),
}


def config(name: str, **overrides: Any) -> BertConfig:
    """A preset with some fields replaced: ``config("tiny", n_heads=8)``."""
    if name not in PRESETS:
        raise KeyError(f"no BERT preset {name!r}: expected one of {sorted(PRESETS)}")
    return dataclasses.replace(PRESETS[name], **overrides)


class Embeddings(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.pos = nn.Embedding(cfg.max_seq_len, cfg.dim)
        self.norm = nn.LayerNorm(cfg.dim, eps=cfg.norm_eps)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        seqlen = tokens.shape[1]
        # (1, seqlen): the position table's output then has the sequence on dim 1 like the
        # tokens', so both can be sequence-sharded alike
        positions = torch.arange(seqlen, device=tokens.device).unsqueeze(0)
        return self.norm(self.tok(tokens) + self.pos(positions))


class Attention(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.n_heads, self.head_dim = cfg.n_heads, cfg.head_dim
        self.wq = nn.Linear(cfg.dim, cfg.dim)
        self.wk = nn.Linear(cfg.dim, cfg.dim)
        self.wv = nn.Linear(cfg.dim, cfg.dim)
        self.wo = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bsz, seqlen, _ = x.shape  # global shapes

        def heads(t: torch.Tensor) -> torch.Tensor:  # (bsz, heads, seqlen, head_dim)
            return t.view(bsz, seqlen, self.n_heads, self.head_dim).transpose(1, 2)

        out = F.scaled_dot_product_attention(heads(self.wq(x)), heads(self.wk(x)),
                                             heads(self.wv(x)))
        return self.wo(out.transpose(1, 2).reshape(bsz, seqlen, self.n_heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(cfg.dim, cfg.ffn_hidden)
        self.fc2 = nn.Linear(cfg.ffn_hidden, cfg.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Layer(nn.Module):
    """Post-LN: x = norm(x + attention(x)); x = norm(x + mlp(x))."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.attention = Attention(cfg)
        self.attention_norm = nn.LayerNorm(cfg.dim, eps=cfg.norm_eps)
        self.mlp = MLP(cfg)
        self.mlp_norm = nn.LayerNorm(cfg.dim, eps=cfg.norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attention_norm(x + self.attention(x))
        return self.mlp_norm(x + self.mlp(x))


class MLMHead(nn.Module):
    """dense + GELU + LayerNorm, then the projection onto the vocabulary."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.dim, cfg.dim)
        self.norm = nn.LayerNorm(cfg.dim, eps=cfg.norm_eps)
        self.decoder = nn.Linear(cfg.dim, cfg.vocab_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.norm(F.gelu(self.dense(x))))


class Bert(nn.Module):
    """Token ids (bsz, seqlen) int64 -> masked-LM logits (bsz, seqlen, vocab_size)."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.config = cfg
        self.embeddings = Embeddings(cfg)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.n_layers))
        self.head = MLMHead(cfg)
        self.init_weights()

    @torch.no_grad()
    def init_weights(self) -> None:
        """BERT's init (seed with ``torch.manual_seed`` first): weights N(0, 0.02), biases 0,
        LayerNorms 1 and 0."""
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
            if isinstance(m, nn.LayerNorm):
                m.reset_parameters()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.shape[1] > self.config.max_seq_len:
            raise ValueError(f"Bert: sequence of {tokens.shape[1]} tokens, but the position "
                             f"table has max_seq_len={self.config.max_seq_len} rows")
        x = self.embeddings(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def mask_tokens(tokens: torch.Tensor, cfg: BertConfig, generator: torch.Generator,
                prob: float = 0.15) -> tuple[torch.Tensor, torch.Tensor]:
    """A masked-LM batch: about ``prob`` of the positions (at least one) replaced by [MASK];
    labels hold the original token there and ``IGNORE`` elsewhere."""
    picked = torch.rand(tokens.shape, generator=generator) < prob
    picked.view(-1)[0] = True  # a batch with nothing to predict would give a NaN mean loss
    inputs = tokens.masked_fill(picked, cfg.mask_token)
    labels = tokens.masked_fill(~picked, IGNORE)
    return inputs, labels


def mlm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross entropy over the masked positions (labels ``IGNORE`` elsewhere)."""
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(0, 1), ignore_index=IGNORE)


# -- tensor-parallel plan ----------------------------------------------------------------------
def tp_plan(config: BertConfig, *, sequence_parallel: bool = True, loss_parallel: bool = True,
            styles: ModuleType | None = None, placements: ModuleType | None = None
            ) -> dict[str, Any]:
    """The Megatron-style tensor-parallel plan, as data for ``parallelize_module``; the same
    shape as ``examples.models.llama.tp_plan`` (see there for ``styles``/``placements``).

    - ``embeddings.tok``/``embeddings.pos``: row-sharded tables, Replicate ids in, out Shard(1)
      (sequence) under sequence parallel, else Replicate.
    - LayerNorms: SequenceParallel, returning local pieces (post-LN: a norm's output is the
      residual stream, which stays a plain local piece between blocks, like the outputs of
      the row-sharded wo/fc2).
    - attention/mlp: wq/wk/wv/fc1 column-sharded (outputs kept as DTensors), wo/fc2
      row-sharded, entered through a sequence gather (Shard(1) -> Replicate).
    - head: ``dense`` acts per token, so under sequence parallel its weights are replicated
      (SequenceParallel: their gradients sum over the ranks' tokens); ``decoder`` is
      column-sharded on the vocabulary like Llama's ``output``.

    Without sequence parallel the norms and ``head.dense`` run whole on every rank.
    """
    f = family(styles, placements)
    R, seq = f.Replicate(), f.Shard(1)
    act = seq if sequence_parallel else R
    plan: dict[str, Any] = {
        "embeddings.tok": f.RowwiseParallel(input_layouts=R, output_layouts=act),
        "embeddings.pos": f.RowwiseParallel(input_layouts=R, output_layouts=act),
        "layers.*.attention.wq": f.ColwiseParallel(use_local_output=False),
        "layers.*.attention.wk": f.ColwiseParallel(use_local_output=False),
        "layers.*.attention.wv": f.ColwiseParallel(use_local_output=False),
        "layers.*.attention.wo": f.RowwiseParallel(output_layouts=act),
        "layers.*.mlp.fc1": f.ColwiseParallel(use_local_output=False),
        "layers.*.mlp.fc2": f.RowwiseParallel(output_layouts=act),
        "head.decoder": f.ColwiseParallel(input_layouts=act,
                                          output_layouts=f.Shard(-1) if loss_parallel else R,
                                          use_local_output=not loss_parallel),
    }
    if sequence_parallel:
        gather = f.PrepareModuleInput(input_layouts=(seq,), desired_input_layouts=(R,))
        plan.update({
            "embeddings.norm": f.SequenceParallel(use_local_output=True),
            "layers.*.attention": gather,
            "layers.*.attention_norm": f.SequenceParallel(use_local_output=True),
            "layers.*.mlp": gather,
            "layers.*.mlp_norm": f.SequenceParallel(use_local_output=True),
            "head.dense": f.SequenceParallel(),
            "head.norm": f.SequenceParallel(),
        })
    return plan
