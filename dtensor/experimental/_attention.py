"""``context_parallel`` with a choice of how keys and values move: torch's
``torch.distributed.tensor.experimental._attention`` names (``set_rotate_method``).

Note [rotate method]
``set_rotate_method("allgather")`` all-gathers the keys and values once per attention
(Note [context parallel] in ``dtensor.parallel.context``); ``"alltoall"`` passes them around
the ring point to point (Note [ring attention] in ``dtensor.experimental._ring``; torch's
name, for torch's ring that permutes blocks with an all-to-all; ours sends each block to the
next rank with ``batch_isend_irecv``, the same bytes). The setting is process-wide, as
torch's: on a real backend one process is one rank. It is read when ``context_parallel`` is
entered, so every attention of one block uses one method on every rank; simulated ranks
share it, so set it before starting them.

The default stays torch's, ``"allgather"``: per rank, the forward moves the same bytes both
ways (cp-1 kv blocks), and the backward moves fewer with the all-gather (its reduce-scatter
returns cp-1 dk/dv blocks; the ring sends the cp-1 kv blocks again and cp-1 dk/dv
accumulators). On simpg's cost model, which charges communication without overlap, the
all-gather is therefore the cheaper one (the table in docs/large-models.md). The ring pays off
where its transfers hide behind each block's compute (a real backend with long sequences) and
where the all-gather's memory is the limit: it keeps one kv block for the backward, the
all-gather cp of them.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence

import torch

from dtensor.experimental._ring import RingAttention, Ring
from dtensor.mesh import DeviceMesh
from dtensor.parallel import context as _context
from dtensor.parallel.context import ContextParallelError
from dtensor.tensor import DTensor

_METHODS = ("allgather", "alltoall")
_rotate_method = "allgather"  # Note [rotate method]: process-wide, as torch's


def set_rotate_method(rotate_method: str) -> None:
    """How ``context_parallel`` moves keys and values (Note [rotate method]): ``"allgather"``
    (the default) gathers them over the mesh, ``"alltoall"`` passes them around the ring.
    torch's ``torch.distributed.tensor.experimental._attention.set_rotate_method``.

    >>> from dtensor.experimental import set_rotate_method
    >>> set_rotate_method("alltoall")
    >>> set_rotate_method("allgather")
    """
    global _rotate_method
    if rotate_method not in _METHODS:
        raise NotImplementedError(f"set_rotate_method({rotate_method!r}): expected one of "
                                  f"{', '.join(map(repr, _METHODS))}")
    _rotate_method = rotate_method


def get_rotate_method() -> str:
    """The method ``set_rotate_method`` set (``"allgather"`` unless changed)."""
    return _rotate_method


class _RingAttention(_context._Attention):
    """``F.scaled_dot_product_attention`` as ring attention over the mesh. What the all-gather
    attention refuses or unwraps (a mask, dropout, DTensor inputs) goes through it, and its
    unwrapped call comes back here."""

    def __call__(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                 is_causal: bool = False, scale: float | None = None,
                 enable_gqa: bool = False) -> torch.Tensor:
        if attn_mask is not None or dropout_p != 0.0 or any(
                isinstance(t, DTensor) for t in (query, key, value)):
            return super().__call__(query, key, value, attn_mask, dropout_p, is_causal, scale,
                                    enable_gqa)
        local = query.shape[-2]
        if local * self.cp != self.seq or key.shape[-2] != local or value.shape[-2] != local:
            raise ContextParallelError(
                f"scaled_dot_product_attention under context_parallel: query, key and value "
                f"hold {local}, {key.shape[-2]} and {value.shape[-2]} positions, expected "
                f"{self.seq // self.cp} each (the sharded sequence of {self.seq} over "
                f"{self.cp} ranks)")
        heads, kv_heads = _heads(query), _heads(key)
        if heads != kv_heads and not (enable_gqa and heads % kv_heads == 0):
            raise ContextParallelError(
                f"scaled_dot_product_attention under context_parallel: {heads} query heads "
                f"and {kv_heads} key heads (enable_gqa={enable_gqa}); expected equal heads, "
                f"or enable_gqa=True with query heads a multiple of key heads")
        scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else scale
        ring = Ring(self.group, self.rank, self.cp)
        return RingAttention.apply(query, key, value, ring, is_causal, scale,
                                   heads // kv_heads)


def _heads(t: torch.Tensor) -> int:
    return t.shape[-3] if t.dim() > 2 else 1


@contextlib.contextmanager
def context_parallel(mesh: DeviceMesh, *, buffers: Sequence[torch.Tensor] | None = None,
                     buffer_seq_dims: Sequence[int] | None = None,
                     no_restore_buffers: set[torch.Tensor] | None = None) -> Iterator[None]:
    """Run the block with ``buffers`` cut along ``buffer_seq_dims`` over the 1-D ``mesh`` and
    attention made whole across it, by the method ``set_rotate_method`` chose (Note [context
    parallel], Note [rotate method]). The sequence length must be a multiple of 2 x the mesh
    size, the same in every buffer. torch's
    ``torch.distributed.tensor.experimental.context_parallel``.
    """
    method = _rotate_method
    buffers = list(buffers or [])
    dims = list(buffer_seq_dims or [])
    seq = buffers[0].shape[dims[0]] if buffers and dims else None  # before the cut
    with _context.context_parallel(mesh, buffers=buffers, buffer_seq_dims=dims,
                                   no_restore_buffers=no_restore_buffers):
        ring = method == "alltoall" and seq is not None
        # inside the all-gather's mode, so this one sees scaled_dot_product_attention first
        mode = _context._AttentionMode(_RingAttention(_context._SDPA, mesh, seq)) if ring \
            else contextlib.nullcontext()
        with mode:
            yield
