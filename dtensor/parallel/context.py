"""Context parallelism: attention over a sequence split across ranks (Note [context parallel]).

Note [context parallel]
``with context_parallel(mesh, buffers=[tokens, targets, freqs], buffer_seq_dims=[1, 1, 0]):``
(torch's ``torch.distributed.tensor.experimental.context_parallel``) cuts each buffer along
its sequence dim in place, so the model runs on this rank's part of the sequence: every
per-token op (embeddings, norms, projections, the loss) is local. Attention is not: inside
the block (a torch function mode, so per thread) ``F.scaled_dot_product_attention`` gathers
the keys and values of the whole sequence over the mesh (one all-gather each; their
gradients are reduce-scattered back) and attends this rank's queries to them, with the
causal mask built from the tokens' global positions.

Causal attention costs a query in proportion to its position, so a plain split would give the
last rank most of the work. The sequence is cut in 2 x cp equal chunks and rank r holds chunks
r and 2cp-1-r (one early, one late), which balances the work; the order the keys arrive in
does not matter, since the mask is built from positions. All-gathering keys and values moves
(cp-1)/cp of them per layer, as a ring would over cp-1 steps. The ring itself, each step's
transfer overlapped with the previous block's compute, is ``set_rotate_method("alltoall")``
(Note [ring attention] in dtensor.experimental._ring). On exit each buffer gets its whole
value back, unless listed in ``no_restore_buffers``.

Each rank's loss is the mean over its tokens; with the same number of tokens per rank the
sequence's mean is the mean of the ranks', so averaging gradients over the context mesh (as
``fully_shard`` over a mesh that includes it does) gives one device's.

Note [context parallel under tensor parallel]
A tensor-parallel attention hands ``scaled_dot_product_attention`` DTensors on the tp mesh
whose heads (or batch) are sharded: ``(bsz, heads, seq, head_dim)`` with ``Shard(1)``. Each
(batch, head) attends on its own, so the attention runs on each rank's local pieces (the
sequence gathered over the cp mesh as above) and the output is the same DTensor layout; the
last two dims (positions, features) must be whole on the tp mesh and nothing Partial.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from dtensor.mesh import DeviceMesh
from dtensor.placements import Partial, Shard
from dtensor.spec import contiguous_strides
from dtensor.tensor import DTensor

_SDPA = F.scaled_dot_product_attention


class ContextParallelError(ValueError):
    """A ``context_parallel`` call that cannot be split as asked."""


def _chunks(rank: int, cp: int) -> tuple[int, int]:
    """The two of 2 x cp sequence chunks that ``rank`` holds (load balanced)."""
    return rank, 2 * cp - 1 - rank


def _positions(seq: int, cp: int, rank: int, device: Any) -> torch.Tensor:
    """Global positions of the tokens ``rank`` holds, in the order it holds them."""
    c = seq // (2 * cp)
    return torch.cat([torch.arange(i * c, (i + 1) * c, device=device) for i in _chunks(rank, cp)])


def shard_sequence(t: torch.Tensor, dim: int, cp: int, rank: int) -> torch.Tensor:
    """This rank's part of ``t`` along ``dim``: chunks r and 2cp-1-r of 2cp."""
    pieces = t.chunk(2 * cp, dim)
    return torch.cat([pieces[i] for i in _chunks(rank, cp)], dim)


class _GatherSequence(torch.autograd.Function):
    """All-gather along dim -2 over the group; backward reduce-scatters the gradient."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any, size: int) -> torch.Tensor:
        ctx.group, ctx.size = group, size
        parts = [torch.empty_like(x) for _ in range(size)]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=-2)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        parts = [p.contiguous() for p in grad.chunk(ctx.size, dim=-2)]
        out = torch.empty_like(parts[0])
        dist.reduce_scatter(out, parts, group=ctx.group)
        return out, None, None


class _Attention:
    """``F.scaled_dot_product_attention`` on this rank's queries against every rank's keys
    and values (Note [context parallel])."""

    def __init__(self, original: Any, mesh: DeviceMesh, seq: int) -> None:
        self.original, self.mesh, self.seq = original, mesh, seq
        self.group, self.cp = mesh.get_group(0), mesh.size()
        self.rank = mesh.get_local_rank(0)

    def __call__(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                 is_causal: bool = False, scale: float | None = None,
                 enable_gqa: bool = False) -> torch.Tensor:
        if attn_mask is not None or dropout_p != 0.0:
            raise ContextParallelError(
                "scaled_dot_product_attention under context_parallel: attn_mask and dropout_p "
                "are not supported (expected is_causal or no mask, dropout_p=0)")
        if any(isinstance(t, DTensor) for t in (query, key, value)):
            return self._on_local_pieces(query, key, value, is_causal, scale, enable_gqa)
        local = query.shape[-2]
        if local * self.cp != self.seq:
            raise ContextParallelError(
                f"scaled_dot_product_attention under context_parallel: the queries hold "
                f"{local} positions, expected {self.seq // self.cp} (the sharded sequence of "
                f"{self.seq} over {self.cp} ranks)")
        k = _GatherSequence.apply(key, self.group, self.cp)
        v = _GatherSequence.apply(value, self.group, self.cp)
        mask = None
        if is_causal:
            pos_q = _positions(self.seq, self.cp, self.rank, query.device)
            pos_k = torch.cat([_positions(self.seq, self.cp, r, query.device)
                               for r in range(self.cp)])
            mask = pos_q[:, None] >= pos_k[None, :]
        return self.original(query, k, v, attn_mask=mask, scale=scale, enable_gqa=enable_gqa)

    def _on_local_pieces(self, query: Any, key: Any, value: Any, is_causal: bool,
                         scale: float | None, enable_gqa: bool) -> DTensor:
        """Note [context parallel under tensor parallel]."""
        for name, t in (("query", query), ("key", key), ("value", value)):
            if not isinstance(t, DTensor) or t.device_mesh != query.device_mesh \
                    or tuple(t.placements) != tuple(query.placements):
                raise ContextParallelError(
                    f"scaled_dot_product_attention under context_parallel: {name} is "
                    f"{_describe(t)} but query is {_describe(query)}; expected query, key and "
                    f"value as DTensors of one layout")
            whole = {t.dim() - 2, t.dim() - 1}
            if any(isinstance(p, Partial) or isinstance(p, Shard) and p.dim % t.dim() in whole
                   for p in t.placements):
                raise ContextParallelError(
                    f"scaled_dot_product_attention under context_parallel: {name} is "
                    f"{_describe(t)}; expected the positions and features (the last two "
                    f"dims) whole and nothing Partial: shard only the batch or the heads")
        out = self(query.to_local(), key.to_local(), value.to_local(), is_causal=is_causal,
                   scale=scale, enable_gqa=enable_gqa)
        shape = (*query.shape[:-1], value.shape[-1])
        return DTensor.from_local(out, query.device_mesh, query.placements, shape=shape,
                                  stride=contiguous_strides(shape))


def _describe(t: Any) -> str:
    if isinstance(t, DTensor):
        return f"a DTensor {tuple(t.placements)} on {t.device_mesh!r}"
    return f"a {type(t).__name__}"


class _AttentionMode(TorchFunctionMode):
    """Routes ``F.scaled_dot_product_attention`` to the context-parallel attention. A torch
    function mode is per thread, so simulated ranks each have their own."""

    def __init__(self, attention: _Attention) -> None:
        super().__init__()
        self.attention = attention

    def __torch_function__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        if func is _SDPA:
            return self.attention(*args, **(kwargs or {}))
        if func is torch.Tensor.backward or func is torch.autograd.backward:
            return self._backward(func, args, kwargs or {})
        return func(*args, **(kwargs or {}))

    def _backward(self, func: Any, args: tuple, kwargs: dict) -> None:
        """Note [context parallel in the backward]
        ``Tensor.backward`` is itself a torch function: a mode handles it with the mode taken
        off the stack, so the autograd engine, which runs the backward under the mode stack
        of its call, would run it without this one; then ``torch.utils.checkpoint``
        (non-reentrant) recomputes a checkpointed block's attention locally and fails (a
        different number of saved tensors; pytorch/pytorch#147995). So the backward of a
        plain ``loss.backward()`` is started here with this mode back on the stack, from the
        outputs' gradient edges: ``torch.autograd.backward`` of edges is no torch function
        call. Explicit gradients (a pipeline stage's ``torch.autograd.backward(outputs,
        grads)``) and ``inputs`` (a zero-bubble schedule's input half) go the same way.
        Anything else (outputs that need no gradient, non-scalars without gradients) goes to
        torch as called, its errors included."""
        options = dict(kwargs)
        grad = args[1] if len(args) > 1 else options.pop("gradient",
                                                         options.pop("grad_tensors", None))
        tensors = (args[0],) if isinstance(args[0], torch.Tensor) else tuple(args[0])
        grads = None if grad is None else [grad] if isinstance(grad, torch.Tensor) \
            else list(grad)
        if len(args) > 2 or any(
                not isinstance(t, torch.Tensor) or not t.requires_grad for t in tensors) \
                or (grads is None and any(t.numel() != 1 for t in tensors)) \
                or (grads is not None and (len(grads) != len(tensors) or any(
                    not isinstance(g, torch.Tensor) for g in grads))):
            return func(*args, **kwargs)
        edges = [torch.autograd.graph.get_gradient_edge(t) for t in tensors]
        inputs = options.get("inputs")  # as edges too: a tensor would come back here
        if inputs is not None:
            inputs = [torch.autograd.graph.get_gradient_edge(t)
                      if isinstance(t, torch.Tensor) else t
                      for t in ((inputs,) if isinstance(inputs, torch.Tensor) else inputs)]
        with self:
            torch.autograd.backward(edges, grads or [torch.ones_like(t) for t in tensors],
                                    retain_graph=options.get("retain_graph"),
                                    create_graph=options.get("create_graph", False),
                                    inputs=inputs)
        return None


@contextlib.contextmanager
def context_parallel(mesh: DeviceMesh, *, buffers: Sequence[torch.Tensor] | None = None,
                     buffer_seq_dims: Sequence[int] | None = None,
                     no_restore_buffers: set[torch.Tensor] | None = None) -> Iterator[None]:
    """Run the block with ``buffers`` cut along ``buffer_seq_dims`` over the 1-D ``mesh`` and
    attention made whole across it (Note [context parallel]). The sequence length must be a
    multiple of 2 x the mesh size, the same in every buffer."""
    buffers = list(buffers or [])
    dims = list(buffer_seq_dims or [])
    if len(buffers) != len(dims):
        raise ContextParallelError(f"context_parallel: {len(buffers)} buffers and "
                                   f"{len(dims)} buffer_seq_dims: expected one dim per buffer")
    if mesh.ndim != 1:
        raise ContextParallelError(f"context_parallel: a {mesh.ndim}-D mesh; expected the 1-D "
                                   f"context mesh (e.g. mesh['cp'])")
    cp = mesh.size()
    lengths = {b.shape[d] for b, d in zip(buffers, dims)}
    if len(lengths) > 1:
        raise ContextParallelError(f"context_parallel: buffers have sequence lengths "
                                   f"{sorted(lengths)}; expected one length")
    seq = lengths.pop() if lengths else None
    if seq is not None and seq % (2 * cp):
        raise ContextParallelError(f"context_parallel: a sequence of {seq} over {cp} ranks; "
                                   f"expected a multiple of {2 * cp} (2 chunks per rank)")
    coordinate = mesh.get_coordinate()
    if coordinate is None:
        raise ContextParallelError("context_parallel: this rank is not in the mesh")
    rank = coordinate[0]
    whole = [b.data for b in buffers]
    for b, d in zip(buffers, dims):
        b.data = shard_sequence(b.data, d, cp, rank)
    mode = _AttentionMode(_Attention(_SDPA, mesh, seq)) if seq is not None else None
    try:
        with mode if mode is not None else contextlib.nullcontext():
            yield
    finally:
        keep = no_restore_buffers or set()
        for b, w in zip(buffers, whole):
            if not any(b is k for k in keep):
                b.data = w
