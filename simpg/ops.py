"""How each collective runs once every rank of its group has arrived.

Each entry reads the ranks' calls (their payloads hold inputs, output buffers and options),
runs the pure function from ``simpg.collectives`` over all inputs, copies the results into
each rank's buffers, and returns ``(outputs by group rank, traffic)`` where ``traffic()``
gives ``(bytes sent, bytes received)`` by group rank; it is only called when a trace is open.
A ``ValueError`` here means the ranks' inputs disagree; the rendezvous turns it into a
``CollectiveMismatchError`` that shows every rank's call.

Note [hide collective writes from autograd]
Outputs are written through ``.detach()``: c10d's signatures do not declare the mutation, so
autograd must not see it (real backends write from C++, where autograd does not look either).
"""

from __future__ import annotations

import operator
from functools import partial
from typing import Any

import torch

from simpg import collectives as C  # the ring traffic helpers are called directly: hot path
from simpg import kernels as K  # Note [one pass over memory]
from simpg.collectives import Traffic
from simpg.rendezvous import Call, Compute, Result


_SHAPE = operator.attrgetter("shape")


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _write(dst: torch.Tensor, src: torch.Tensor) -> None:
    if dst is not src:
        dst.detach().copy_(src)


def _p(calls: list[Call], key: str) -> list[Any]:
    return [c.payload[key] for c in calls]


def all_reduce(calls: list[Call]) -> Result:
    op = calls[0].payload["reduce_op"]
    per_rank = _p(calls, "tensors")  # each rank: a list of tensors (coalesced)
    n = len(calls)
    for k in range(len(per_rank[0])):
        inputs = [ts[k] for ts in per_rank]
        if n > 1:
            K.reduce_into(inputs, inputs, op)

    def traffic() -> Traffic:
        sent, received = [0] * n, [0] * n
        for t in per_rank[0]:
            s, r = C._all_reduce_traffic(t.numel(), t.element_size(), n)
            sent = [a + b for a, b in zip(sent, s)]
            received = [a + b for a, b in zip(received, r)]
        return tuple(sent), tuple(received)

    return per_rank, traffic


def all_gather(calls: list[Call]) -> Result:
    inputs = _p(calls, "input")
    outputs = _p(calls, "outputs")
    shapes = list(map(_SHAPE, inputs))
    for rank, outs in enumerate(outputs):
        # the common case checked in one comparison; map: no Python frame per tensor (N^2)
        if list(map(_SHAPE, outs)) != shapes:
            src = next(i for i, (o, s) in enumerate(zip(outs, shapes)) if o.shape != s)
            raise ValueError(
                f"rank {rank}'s output_tensor_list[{src}] has shape "
                f"{tuple(outs[src].shape)}, but rank {src} contributes a tensor of shape "
                f"{tuple(shapes[src])}"
            )
    K.gather_into(outputs, inputs)
    return outputs, partial(C._ring_gather_traffic, [_nbytes(t) for t in inputs])


def all_gather_into_tensor(calls: list[Call]) -> Result:
    inputs = _p(calls, "input")
    gathered = torch.cat([t.detach().reshape(-1) for t in inputs])
    for out in _p(calls, "output"):
        _write(out, gathered.view(out.shape))
    traffic = partial(C._ring_gather_traffic, [_nbytes(t) for t in inputs])
    return _p(calls, "output"), traffic


def reduce_scatter(calls: list[Call]) -> Result:
    op = calls[0].payload["reduce_op"]
    outputs = C.reduce_scatter(_p(calls, "inputs"), op)
    for out, res in zip(_p(calls, "output"), outputs):
        _write(out, res)
    traffic = partial(C._reduce_scatter_traffic, [_nbytes(t) for t in outputs])
    return _p(calls, "output"), traffic


def reduce_scatter_tensor(calls: list[Call]) -> Result:
    op = calls[0].payload["reduce_op"]
    n = len(calls)
    flat = [t.detach().reshape(n, -1) for t in _p(calls, "input")]
    outputs = C.reduce_scatter([list(f.unbind(0)) for f in flat], op)
    for out, res in zip(_p(calls, "output"), outputs):
        _write(out, res.view(out.shape))
    traffic = partial(C._reduce_scatter_traffic, [_nbytes(t) for t in outputs])
    return _p(calls, "output"), traffic


def all_to_all_single(calls: list[Call]) -> Result:
    inputs = _p(calls, "input")
    in_splits, out_splits = _p(calls, "input_splits"), _p(calls, "output_splits")
    outputs = C.all_to_all_single(inputs, in_splits, out_splits)
    n = len(calls)
    row = [t[0].numel() * t.element_size() if t.shape[0] else 0 for t in inputs]
    splits = [s or [t.shape[0] // n] * n for s, t in zip(in_splits, inputs)]
    for rank, (out, res) in enumerate(zip(_p(calls, "output"), outputs)):
        if out.shape != res.shape:
            raise ValueError(
                f"rank {rank}'s output has shape {tuple(out.shape)}, but the ranks send it "
                f"{res.shape[0] if res.dim() else 0} rows in all (shape {tuple(res.shape)})"
            )
        _write(out, res)
    send_bytes = [[int(k) * row[i] for k in splits[i]] for i in range(n)]
    return _p(calls, "output"), partial(C._all_to_all_traffic, send_bytes)


def all_to_all(calls: list[Call]) -> Result:
    inputs = _p(calls, "inputs")
    outputs = C.all_to_all(inputs)
    for rank, (outs, results) in enumerate(zip(_p(calls, "outputs"), outputs)):
        for src, (out, res) in enumerate(zip(outs, results)):
            if out.shape != res.shape:
                raise ValueError(
                    f"rank {rank}'s output_tensor_list[{src}] has shape {tuple(out.shape)}, but "
                    f"rank {src} sends it a tensor of shape {tuple(res.shape)}"
                )
            _write(out, res)
    send_bytes = [[_nbytes(t) for t in ins] for ins in inputs]
    return _p(calls, "outputs"), partial(C._all_to_all_traffic, send_bytes)


def broadcast(calls: list[Call]) -> Result:
    root = calls[0].payload["root"]
    tensors = _p(calls, "tensor")
    for t in tensors:
        _write(t, tensors[root])
    n = len(calls)
    return tensors, partial(C._broadcast_traffic, _nbytes(tensors[root]), root, n)


def reduce(calls: list[Call]) -> Result:
    root, op = calls[0].payload["root"], calls[0].payload["reduce_op"]
    tensors = _p(calls, "tensor")
    _write(tensors[root], C.reduce_tensors(tensors, op))
    n = len(calls)
    return tensors, partial(C._reduce_traffic, _nbytes(tensors[root]), root, n)


def gather(calls: list[Call]) -> Result:
    root = calls[0].payload["root"]
    inputs = _p(calls, "input")
    outs = calls[root].payload["outputs"]
    for src, (out, inp) in enumerate(zip(outs, inputs)):
        if out.shape != inp.shape:
            raise ValueError(
                f"the root's gather_list[{src}] has shape {tuple(out.shape)}, but rank {src} "
                f"sends a tensor of shape {tuple(inp.shape)}"
            )
        _write(out, inp)
    traffic = partial(C._gather_traffic, [_nbytes(t) for t in inputs], root)
    return _p(calls, "outputs"), traffic


def scatter(calls: list[Call]) -> Result:
    root = calls[0].payload["root"]
    pieces = calls[root].payload["inputs"]
    outputs = _p(calls, "output")
    for rank, (out, piece) in enumerate(zip(outputs, pieces)):
        if out.shape != piece.shape:
            raise ValueError(
                f"rank {rank}'s output has shape {tuple(out.shape)}, but the root's "
                f"scatter_list[{rank}] has shape {tuple(piece.shape)}"
            )
        _write(out, piece)
    traffic = partial(C._scatter_traffic, [_nbytes(t) for t in pieces], root)
    return outputs, traffic


def barrier(calls: list[Call]) -> Result:
    return [None] * len(calls), partial(C._barrier_traffic, len(calls))


COMPUTE: dict[str, Compute] = {
    "all_reduce": all_reduce,
    "all_gather": all_gather,
    "all_gather_into_tensor": all_gather_into_tensor,
    "reduce_scatter": reduce_scatter,
    "reduce_scatter_tensor": reduce_scatter_tensor,
    "all_to_all_single": all_to_all_single,
    "all_to_all": all_to_all,
    "broadcast": broadcast,
    "reduce": reduce,
    "gather": gather,
    "scatter": scatter,
    "barrier": barrier,
}
