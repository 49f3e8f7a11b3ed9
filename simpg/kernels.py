"""The data movement of the hot collectives, written straight into the ranks' buffers.

``simpg.collectives`` states what each collective computes, as pure functions; these do the
same into the output buffers with as few torch calls and memory passes as possible, and the
tests check them bitwise against those functions.

Note [one pass over memory]
A reduction must read every input once and write every output once; nothing less is
possible. The pure function (clone, fold, then one copy per rank) makes about five passes
over n buffers, and each torch call costs microseconds of dispatch, which is the whole cost
of a 1 KB collective. So:
- a tensor larger than ``CHUNK`` elements is folded chunk by chunk into a small accumulator
  that stays in cache, and each chunk is copied to every output before the next is read:
  inputs are read once and outputs written once, and an in-place all_reduce (outputs are the
  inputs) stays correct because a chunk is read in full before it is written;
- a chunk never exceeds torch's parallel grain (32768 elements), so no OpenMP team starts
  (simpg runs one rank at a time; a team that spins on a busy machine steals its core);
- the copies to every rank go in one ``torch._foreach_copy_`` call;
- the writes run with grad mode off (Note [hide collective writes from autograd]) instead of
  through a ``.detach()`` of each tensor: grad mode is one thread-local flag, set once,
  where detaching (or asking ``requires_grad``) costs a call per tensor, n * n of them in a
  list all_gather.
The fold keeps rank order, ``((x0 op x1) op x2) ...``, in the tensors' dtype, chunk or not.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from simpg import collectives as C

CHUNK = 1 << 15  # elements: torch's at::internal::GRAIN_SIZE, and 128 KB of float32


class _NoGrad:
    """``torch.no_grad()`` without its Python frames: the calling thread's (the running
    rank's) grad mode is off inside and restored after."""

    __slots__ = ("_was",)

    def __enter__(self) -> None:
        self._was = torch.is_grad_enabled()
        torch._C._set_grad_enabled(False)

    def __exit__(self, *exc: object) -> None:
        torch._C._set_grad_enabled(self._was)


def reduce_into(outs: Sequence[Tensor], ins: Sequence[Tensor], op: str) -> None:
    """Write the rank-order reduction of ``ins`` into every tensor of ``outs``.

    ``outs`` may be ``ins`` themselves (an in-place all_reduce). Shapes and dtypes must
    already agree (``C.check_reduce_op`` and the rendezvous' signature check).

    >>> a, b = torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])
    >>> reduce_into([a, b], [a, b], "sum"); a.tolist(), b.tolist()
    ([4.0, 6.0], [4.0, 6.0])
    """
    was = torch.is_grad_enabled()  # _NoGrad without its two Python calls: the hot path
    torch._C._set_grad_enabled(False)
    try:
        _reduce_into(outs, ins, op)
    finally:
        torch._C._set_grad_enabled(was)


def _reduce_into(outs: Sequence[Tensor], ins: Sequence[Tensor], op: str) -> None:
    n = len(ins)
    if n == 1:
        acc = C.reduce_tensors(ins, op)  # avg of one is a division: keep the same rounding
        torch._foreach_copy_(outs, [acc])
        return
    fn = C._binary(op, ins[0].dtype)
    numel = ins[0].numel()
    if numel <= CHUNK or not all(t.is_contiguous() for t in (*ins, *outs)):
        torch._foreach_copy_(outs, [_fold(fn, ins, None, op)] * n)
        return
    in_chunks = [t.view(-1).split(CHUNK) for t in ins]
    out_chunks = [t.view(-1).split(CHUNK) for t in outs]
    acc = torch.empty(CHUNK, dtype=ins[0].dtype, device=ins[0].device)
    for c, first in enumerate(in_chunks[0]):
        part = acc[:first.numel()] if first.numel() < CHUNK else acc
        _fold(fn, [chunks[c] for chunks in in_chunks], part, op)
        torch._foreach_copy_([chunks[c] for chunks in out_chunks], [part] * n)


def _fold(fn: C._Binary, ins: Sequence[Tensor], out: Tensor | None, op: str) -> Tensor:
    acc = fn(ins[0], ins[1]) if out is None else fn(ins[0], ins[1], out=out)
    for t in ins[2:]:
        fn(acc, t, out=acc)
    if op == "avg":
        acc.div_(len(ins))
    return acc


def gather_into(outs_by_rank: Sequence[Sequence[Tensor]], ins: Sequence[Tensor]) -> None:
    """Copy ``ins[src]`` into ``outs_by_rank[rank][src]`` for every rank and source, in one
    torch call (shapes already checked)."""
    dsts = [o for outs in outs_by_rank for o in outs]
    with _NoGrad():
        torch._foreach_copy_(dsts, list(ins) * len(outs_by_rank))
