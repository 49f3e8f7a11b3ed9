"""The one small interface dtensor uses for collectives: four functions over a process group.

Each is a thin wrapper on torch.distributed's c10d API and works on any ``dist.ProcessGroup``
(nccl, gloo, simpg, ...). Unlike c10d they are out of place and take uneven sizes: the caller
passes every group rank's shape, which it knows from ``dtensor.layout``. With
``async_op=True`` they return a ``Handle`` whose ``wait()`` finishes the op and gives the result.


>>> import torch, simpg
>>> simpg.run(lambda: all_reduce(torch.ones(2), dist.group.WORLD, "max").tolist(), 2)
[[1.0, 1.0], [1.0, 1.0]]
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar, overload

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import (AllgatherOptions, AllreduceOptions,
                                                AllToAllOptions, ReduceScatterOptions)

from dtensor.comm import functional as _functional
from dtensor.comm.debug_mode import _comm_log, _note
from dtensor.comm.debug_mode import quiet as _quiet_comm_log
from dtensor.comm.capabilities import capabilities
from dtensor.comm.handles import Handle
from dtensor.symbolic import sizes_symbolic

T = TypeVar("T")
U = TypeVar("U")
ReduceOpName = Literal["sum", "avg", "max", "min", "product"]

_REDUCE_OPS = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "max": dist.ReduceOp.MAX,
               "min": dist.ReduceOp.MIN, "product": dist.ReduceOp.PRODUCT}



# ---------------------------------------------------------------------------------------------
# The four collectives. Each has overloads so the result type follows async_op.


@overload
def all_gather(tensor: torch.Tensor, shapes: Sequence[Sequence[int]], group: dist.ProcessGroup,
               *, async_op: Literal[False] = ...) -> list[torch.Tensor]: ...
@overload
def all_gather(tensor: torch.Tensor, shapes: Sequence[Sequence[int]], group: dist.ProcessGroup,
               *, async_op: Literal[True]) -> Handle[list[torch.Tensor]]: ...
def all_gather(tensor, shapes, group, *, async_op=False):  # noqa: E302
    """Every group rank's tensor, in group-rank order; ``shapes[i]`` is rank i's shape."""
    shapes = _check_shapes("all_gather", tensor, shapes, group)
    if _comm_log.get():  # Note [recording collectives] in dtensor/comm/debug_mode.py
        _note("all_gather", group, (tensor,), shapes)
    x = tensor.contiguous()
    if capabilities(group).uneven_all_gather or len(set(shapes)) == 1:
        outs = [x.new_empty(s) for s in shapes]
        work = dist.all_gather(outs, x, group=group, async_op=True)
        return _result(Handle([work], lambda: outs), async_op)
    # Pad every piece to the largest and gather one flat buffer, then cut the padding off.
    width = max(math.prod(s) for s in shapes)
    send = x.new_zeros(width)
    send[:x.numel()] = x.reshape(-1)
    flat = x.new_empty(width * len(shapes))
    work = dist.all_gather_single(flat, send, group=group, async_op=True)

    def finish() -> list[torch.Tensor]:
        rows = flat.view(len(shapes), width)
        return [rows[i, :math.prod(s)].reshape(s) for i, s in enumerate(shapes)]

    return _result(Handle([work], finish), async_op)


@overload
def all_to_all(inputs: Sequence[torch.Tensor], output_shapes: Sequence[Sequence[int]],
               group: dist.ProcessGroup, *,
               async_op: Literal[False] = ...) -> list[torch.Tensor]: ...
@overload
def all_to_all(inputs: Sequence[torch.Tensor], output_shapes: Sequence[Sequence[int]],
               group: dist.ProcessGroup, *, async_op: Literal[True]) -> Handle[list[torch.Tensor]]:
    ...
def all_to_all(inputs, output_shapes, group, *, async_op=False):  # noqa: E302
    """``inputs[j]`` goes to group rank j; returns what each group rank sent here, shaped
    ``output_shapes[j]``."""
    n = _group(group).size()
    if len(inputs) != n or len(output_shapes) != n:
        raise ValueError(f"all_to_all: got {len(inputs)} inputs and {len(output_shapes)} output "
                         f"shapes, expected {n} of each (one per rank of the group)")
    if _comm_log.get():  # Note [recording collectives] in dtensor/comm/debug_mode.py
        _note("all_to_all", group, inputs, output_shapes)
    ins = [t.contiguous() for t in inputs]
    shapes = [tuple(int(d) for d in s) for s in output_shapes]
    like = ins[0]
    if capabilities(group).uneven_all_to_all:
        outs = [like.new_empty(s) for s in shapes]
        work = dist.all_to_all(outs, ins, group=group, async_op=True)
        return _result(Handle([work], lambda: outs), async_op)
    # One flat buffer each way, cut by split sizes: all_to_all_single takes uneven splits.
    send = torch.cat([t.reshape(-1) for t in ins]) if ins else like.new_empty(0)
    out_sizes = [math.prod(s) for s in shapes]
    recv = like.new_empty(sum(out_sizes))
    work = dist.all_to_all_single(recv, send, out_sizes, [t.numel() for t in ins],
                                  group=group, async_op=True)

    def finish() -> list[torch.Tensor]:
        return [p.reshape(s) for p, s in zip(torch.split(recv, out_sizes), shapes)]

    return _result(Handle([work], finish), async_op)


@overload
def all_reduce(tensor: torch.Tensor, group: dist.ProcessGroup, op: ReduceOpName = ..., *,
               async_op: Literal[False] = ...) -> torch.Tensor: ...
@overload
def all_reduce(tensor: torch.Tensor, group: dist.ProcessGroup, op: ReduceOpName = ..., *,
               async_op: Literal[True]) -> Handle[torch.Tensor]: ...
def all_reduce(tensor, group, op="sum", *, async_op=False):  # noqa: E302
    """The reduction of every group rank's ``tensor`` (out of place)."""
    c10d_op, divide = _reduce_op(op, tensor, group)
    if _comm_log.get():  # Note [recording collectives] in dtensor/comm/debug_mode.py
        _note("all_reduce", group, (tensor,), (tensor.shape,))
    out = tensor.clone(memory_format=torch.contiguous_format)
    work = dist.all_reduce(out, op=c10d_op, group=group, async_op=True)
    return _result(Handle([work], lambda: out.div_(divide) if divide else out), async_op)


@overload
def reduce_scatter(inputs: Sequence[torch.Tensor], group: dist.ProcessGroup,
                   op: ReduceOpName = ..., *, async_op: Literal[False] = ...) -> torch.Tensor: ...
@overload
def reduce_scatter(inputs: Sequence[torch.Tensor], group: dist.ProcessGroup,
                   op: ReduceOpName = ..., *, async_op: Literal[True]) -> Handle[torch.Tensor]: ...
def reduce_scatter(inputs, group, op="sum", *, async_op=False):  # noqa: E302
    """Group rank i gets the reduction over ranks of their ``inputs[i]`` (pieces may differ
    in shape between i's, not between ranks)."""
    n, me = _group(group).size(), _group(group).rank()
    if len(inputs) != n:
        raise ValueError(f"reduce_scatter: got {len(inputs)} pieces, expected {n} (one per "
                         f"rank of the group)")
    c10d_op, divide = _reduce_op(op, inputs[0], group)
    if _comm_log.get():  # Note [recording collectives] in dtensor/comm/debug_mode.py
        _note("reduce_scatter", group, inputs, (inputs[me].shape,))
    ins = [t.contiguous() for t in inputs]
    if capabilities(group).reduce_scatter:
        out = ins[me].new_empty(ins[me].shape)
        work = dist.reduce_scatter(out, ins, op=c10d_op, group=group, async_op=True)
        return _result(Handle([work], lambda: out.div_(divide) if divide else out), async_op)
    # Send piece i to rank i, then reduce the n copies of this rank's piece here: the same
    # bytes on the wire as a ring reduce_scatter.
    mine = ins[me].shape
    with _quiet_comm_log():  # recorded above, as the reduce_scatter it stands for
        gathered = all_to_all(ins, [mine] * n, group, async_op=True)

    def finish() -> torch.Tensor:
        stacked = torch.stack(gathered.wait())
        if op in ("sum", "avg"):
            total = stacked.sum(0, dtype=stacked.dtype)
            return total / n if op == "avg" else total
        if op == "product":
            return stacked.prod(0, dtype=stacked.dtype)
        return stacked.amax(0) if op == "max" else stacked.amin(0)

    return _result(Handle([], finish), async_op)


# ---------------------------------------------------------------------------------------------
# One buffer each way (Note [one buffer per collective]): what redistribute issues.
#
# Note [one buffer per collective]
# The list forms above move one tensor per peer: at n ranks a rank allocates, fills and
# concatenates n tensors per collective, n^2 over the group. Where the pieces allow, these
# forms move one buffer each way (all_gather_single, reduce_scatter_single,
# all_to_all_single with split sizes) laid out so that the result is a view of the received
# buffer, or one copy away from it (a movedim when the pieces join along a dim other than 0).
# Bytes decide between forms, so the planner's counts stay exact: padding uneven pieces to
# the largest moves n * largest where the list form moves their sum, never fewer; so uneven
# pieces take the list form where the backend has it, and the padded buffer only where it
# does not (gloo's uneven all_gather; the planner then undercounts by the padding).


@overload
def all_gather_cat(tensor: torch.Tensor, shapes: Sequence[Sequence[int]], dim: int,
                   group: dist.ProcessGroup, *,
                   async_op: Literal[False] = ...) -> torch.Tensor: ...
@overload
def all_gather_cat(tensor: torch.Tensor, shapes: Sequence[Sequence[int]], dim: int,
                   group: dist.ProcessGroup, *, async_op: Literal[True]) -> Handle[torch.Tensor]:
    ...
def all_gather_cat(tensor, shapes, dim, group, *, async_op=False):  # noqa: E302
    """Every group rank's tensor joined along ``dim`` in group-rank order; ``shapes[i]`` is
    rank i's shape (the shapes may differ along ``dim`` only).

    >>> import torch, simpg
    >>> def body():
    ...     mine = torch.full((1, 2), float(dist.get_rank()))
    ...     return all_gather_cat(mine, [(1, 2)] * 2, 1, dist.group.WORLD).tolist()
    >>> simpg.run(body, 2)[0]
    [[0.0, 0.0, 1.0, 1.0]]
    """
    shapes = _check_shapes("all_gather", tensor, shapes, group)
    first = shapes[0]
    even = _all_equal(shapes)
    if not even and any(s[:dim] + s[dim + 1:] != first[:dim] + first[dim + 1:] for s in shapes):
        raise ValueError(f"all_gather_cat along dim {dim}: shapes {shapes} differ in another dim")
    if _comm_log.get():  # Note [recording collectives] in dtensor/comm/debug_mode.py
        _note("all_gather", group, (tensor,), shapes)
    x = tensor.contiguous()
    if not even and capabilities(group).uneven_all_gather:
        outs = [x.new_empty(s) for s in shapes]
        work = dist.all_gather(outs, x, group=group, async_op=True)
        return _result(Handle([work], lambda: torch.cat(outs, dim)), async_op)
    n, width = len(shapes), _widest(shapes, dim)
    if not even:  # pad along dim: chunk-like pieces then lie where they belong, at i * width
        padded = x.new_zeros(first[:dim] + (width,) + first[dim + 1:])
        padded.narrow(dim, 0, x.shape[dim]).copy_(x)
        x = padded
    # shaped as the inputs stacked along dim 0, which gloo requires; viewed per rank after
    out = x.new_empty((n * x.shape[0], *x.shape[1:]))
    work = dist.all_gather_single(out, x, group=group, async_op=True)
    buf = out.view((n, *x.shape))
    joined = first[:dim] + (n * width,) + first[dim + 1:]

    def finish() -> torch.Tensor:
        if even:  # a view for dim 0, one copy otherwise
            return buf.view(joined) if dim == 0 else buf.movedim(0, dim).reshape(joined)
        sizes = [s[dim] for s in shapes]
        total = sum(sizes)
        if dim == 0 and sizes == _chunk_sizes(total, width, n):
            return buf.view(joined)[:total]  # torch.chunk pieces: a prefix of the rows
        return torch.cat([buf[i].narrow(dim, 0, k) for i, k in enumerate(sizes)], dim)

    return _result(Handle([work], finish), async_op)


@overload
def all_gather_in_place(buffer: torch.Tensor, group: dist.ProcessGroup, *,
                        async_op: Literal[False] = ...) -> torch.Tensor: ...
@overload
def all_gather_in_place(buffer: torch.Tensor, group: dist.ProcessGroup, *,
                        async_op: Literal[True]) -> Handle[torch.Tensor]: ...
def all_gather_in_place(buffer, group, *, async_op=False):  # noqa: E302
    """``buffer`` (contiguous, one row per group rank along dim 0) with every rank's row
    filled in from that rank: this rank's row, which the caller has written, is the input,
    so no input buffer lives beside the gathered one (torch FSDP2's all_gather_copy_in does
    the same).

    >>> import torch, simpg
    >>> def body():
    ...     rows = torch.zeros(2, 2)
    ...     rows[dist.get_rank()] = float(dist.get_rank() + 1)
    ...     return all_gather_in_place(rows, dist.group.WORLD).tolist()
    >>> simpg.run(body, 2)[0]
    [[1.0, 1.0], [2.0, 2.0]]
    """
    n = group.size()
    if buffer.dim() == 0 or buffer.shape[0] != n or not buffer.is_contiguous():
        raise ValueError(f"all_gather_in_place: got a buffer of shape {tuple(buffer.shape)} "
                         f"(contiguous: {buffer.is_contiguous()}), expected a contiguous "
                         f"buffer with one row per rank of the group ({n} rows)")
    mine = buffer[group.rank()]
    if _comm_log.get():  # Note [recording collectives] in dtensor/comm/debug_mode.py
        _note("all_gather", group, (mine,), [tuple(mine.shape)] * n)
    flat = buffer.view((n * mine.shape[0], *mine.shape[1:]) if mine.dim() else (n,))
    work = dist.all_gather_single(flat, mine, group=group, async_op=True)
    return _result(Handle([work], lambda: buffer), async_op)


@overload
def reduce_scatter_cat(tensor: torch.Tensor, sizes: Sequence[int], dim: int,
                       group: dist.ProcessGroup, op: ReduceOpName = ..., *,
                       async_op: Literal[False] = ...) -> torch.Tensor: ...
@overload
def reduce_scatter_cat(tensor: torch.Tensor, sizes: Sequence[int], dim: int,
                       group: dist.ProcessGroup, op: ReduceOpName = ..., *,
                       async_op: Literal[True]) -> Handle[torch.Tensor]: ...
def reduce_scatter_cat(tensor, sizes, dim, group, op="sum", *,  # noqa: E302
                       async_op=False):
    """``reduce_scatter`` of ``tensor`` cut along ``dim`` into consecutive pieces of
    ``sizes``: group rank i gets the reduction over ranks of piece i.

    >>> import torch, simpg
    >>> def body():
    ...     return reduce_scatter_cat(torch.arange(4.0), [2, 2], 0, dist.group.WORLD).tolist()
    >>> simpg.run(body, 2)
    [[0.0, 2.0], [4.0, 6.0]]
    """
    n, me = _group(group).size(), _group(group).rank()
    sizes = [int(k) for k in sizes]
    if len(sizes) != n or sum(sizes) != tensor.shape[dim]:
        raise ValueError(f"reduce_scatter_cat: sizes {sizes} must be {n} (one per rank of the "
                         f"group) summing to dim {dim} of shape {tuple(tensor.shape)}")
    if any(k != sizes[0] for k in sizes) or not capabilities(group).reduce_scatter:
        # uneven: padding moves more bytes than the list form (Note [one buffer per collective])
        return reduce_scatter(list(tensor.split(sizes, dim)), group, op, async_op=async_op)
    c10d_op, divide = _reduce_op(op, tensor, group)
    mine = tensor.shape[:dim] + (sizes[me],) + tensor.shape[dim + 1:]
    if _comm_log.get():  # Note [recording collectives] in dtensor/comm/debug_mode.py
        _note("reduce_scatter", group, list(tensor.split(sizes, dim)), (mine,))
    # piece i becomes block i of one buffer: a view for dim 0, one copy otherwise
    inp = tensor.unflatten(dim, (n, sizes[0])).movedim(dim, 0).contiguous()
    out = tensor.new_empty(mine)
    inp = inp.view((n * mine[0], *mine[1:]))  # stacked along dim 0, as gloo requires
    work = dist.reduce_scatter_single(out, inp, op=c10d_op, group=group, async_op=True)
    return _result(Handle([work], lambda: out.div_(divide) if divide else out), async_op)


@overload
def all_to_all_single(send: torch.Tensor, send_sizes: Sequence[int], recv_sizes: Sequence[int],
                      group: dist.ProcessGroup, *,
                      async_op: Literal[False] = ...) -> torch.Tensor: ...
@overload
def all_to_all_single(send: torch.Tensor, send_sizes: Sequence[int], recv_sizes: Sequence[int],
                      group: dist.ProcessGroup, *,
                      async_op: Literal[True]) -> Handle[torch.Tensor]: ...
def all_to_all_single(send, send_sizes, recv_sizes, group, *, async_op=False):  # noqa: E302
    """``all_to_all`` of flat buffers: the first ``send_sizes[0]`` elements of 1-d ``send`` go
    to group rank 0, the next ``send_sizes[1]`` to rank 1, ...; returns, flat and in
    group-rank order, the ``recv_sizes[j]`` elements each rank j sent here. Every backend
    has it (uneven sizes included).

    >>> import torch, simpg
    >>> def body():
    ...     sizes = [1, 2] if dist.get_rank() == 0 else [2, 1]
    ...     send = torch.arange(3.0) + 10 * dist.get_rank()
    ...     return all_to_all_single(send, sizes, sizes, dist.group.WORLD).tolist()
    >>> simpg.run(body, 2)
    [[0.0, 10.0, 11.0], [1.0, 2.0, 12.0]]
    """
    n = _group(group).size()
    send_sizes, recv_sizes = list(send_sizes), list(recv_sizes)
    if send.dim() != 1 or len(send_sizes) != n or len(recv_sizes) != n \
            or sum(send_sizes) != send.numel():
        raise ValueError(f"all_to_all_single: expected a 1-d buffer and {n} sizes each way "
                         f"(one per rank of the group), the send sizes summing to its length; "
                         f"got shape {tuple(send.shape)}, send sizes {send_sizes}, receive "
                         f"sizes {recv_sizes}")
    if _comm_log.get():  # Note [recording collectives] in dtensor/comm/debug_mode.py
        _note("all_to_all", group, send.split(send_sizes), [(k,) for k in recv_sizes])
    recv = send.new_empty(sum(recv_sizes))
    work = dist.all_to_all_single(recv, send.contiguous(), recv_sizes, send_sizes, group=group,
                                  async_op=True)
    return _result(Handle([work], lambda: recv), async_op)


# ---------------------------------------------------------------------------------------------
# Prepared collectives (Note [prepared collectives]): what a cached redistribute plan issues.
#
# Note [prepared collectives]
# A redistribute step issues the same collective, with the same shapes, on the same group at
# every call. ``prepare_*`` checks the shapes and picks the buffer form once, and returns a
# function of the tensor alone that issues the op on the process group itself: the c10d
# method dist.* ends in (as torch's functional collectives do), without dist.*'s Python layer
# that re-checks the group, the tensors and the coalescing state at every call (two dozen
# Python calls, 4 µs a collective on simpg). Anything unusual takes the general function of
# the same name instead, which records, traces and converts: a recorder open
# (comm.debug_mode), a tensor that is not a plain real torch.Tensor (fake, functional, complex, a
# subclass), a tracer or a torch function mode active. Like torch's functional collectives,
# a prepared collective is issued at once inside ``dist._coalescing_manager``.

_PROXY_MODE = torch._C._TorchDispatchModeKey.PROXY
_dispatch_mode = torch._C._get_dispatch_mode
_function_mode_on = torch._C._is_torch_function_mode_enabled
_compiling = torch.compiler.is_compiling
Prepared = Callable[[torch.Tensor], Handle[torch.Tensor]]


def _plain(t: torch.Tensor) -> bool:
    """Whether the prepared form may issue ``t``'s collective directly (Note [prepared
    collectives])."""
    return (type(t) is torch.Tensor and not t.is_complex() and not _comm_log.get()
            and _dispatch_mode(_PROXY_MODE) is None and not _function_mode_on()
            and not _compiling())


def _opts(kind: type, reduce_op: Any = None) -> Any:
    opts = kind()
    opts.asyncOp = True
    if reduce_op is not None:
        opts.reduceOp = reduce_op
    return opts


def _check_piece(what: str, t: torch.Tensor, want: tuple[int, ...]) -> None:
    if t.shape != want:
        raise ValueError(f"{what}: this rank holds shape {tuple(t.shape)}, prepared for {want}")


def prepare_all_gather_cat(shapes: Sequence[Sequence[int]], dim: int,
                           group: dist.ProcessGroup) -> Prepared:
    """``all_gather_cat(t, shapes, dim, group, async_op=True)`` as a function of ``t``.

    >>> import torch, simpg
    >>> def body():
    ...     gather = prepare_all_gather_cat([(1, 2)] * 2, 0, dist.group.WORLD)
    ...     return gather(torch.full((1, 2), float(dist.get_rank()))).wait().tolist()
    >>> simpg.run(body, 2)[0]
    [[0.0, 0.0], [1.0, 1.0]]
    """
    if any(sizes_symbolic(s) for s in shapes):  # traced: int() would pin each size
        return lambda t: all_gather_cat(t, shapes, dim, group, async_op=True)
    shapes = _normalized_shapes(tuple(tuple(s) for s in shapes))
    n, me = group.size(), group.rank()
    if len(shapes) != n:
        raise ValueError(f"all_gather: got {len(shapes)} shapes, expected {n} (one per rank of "
                         f"the group)")
    mine, first = shapes[me], shapes[0]

    def general(t: torch.Tensor) -> Handle[torch.Tensor]:
        return all_gather_cat(t, shapes, dim, group, async_op=True)

    if not _all_equal(shapes):  # uneven: the general function pads or takes the list form
        return general
    stacked = (n * first[0], *first[1:]) if first else (n,)
    joined = first[:dim] + (n * first[dim],) + first[dim + 1:]
    opts = _opts(AllgatherOptions)
    issue = group.all_gather_single

    def gather(t: torch.Tensor) -> Handle[torch.Tensor]:
        if not _plain(t):
            return general(t)
        _check_piece("all_gather", t, mine)
        x = t.contiguous()
        out = x.new_empty(stacked)  # stacked along dim 0, as gloo requires
        work = issue(out, x, opts)
        if dim == 0:
            return Handle((work,), lambda: out.view(joined))
        return Handle((work,), lambda: out.view((n, *first)).movedim(0, dim).reshape(joined))

    return gather


def prepare_reduce_scatter_cat(sizes: Sequence[int], dim: int, shape: Sequence[int],
                               group: dist.ProcessGroup, op: ReduceOpName = "sum") -> Prepared:
    """``reduce_scatter_cat(t, sizes, dim, group, op, async_op=True)`` as a function of ``t``,
    a tensor of ``shape``.

    >>> import torch, simpg
    >>> def body():
    ...     scatter = prepare_reduce_scatter_cat([2, 2], 0, (4,), dist.group.WORLD)
    ...     return scatter(torch.arange(4.0)).wait().tolist()
    >>> simpg.run(body, 2)
    [[0.0, 2.0], [4.0, 6.0]]
    """
    if sizes_symbolic(tuple(sizes) + tuple(shape)):  # traced: int() would pin each size
        return lambda t: reduce_scatter_cat(t, sizes, dim, group, op, async_op=True)
    sizes, shape = tuple(int(k) for k in sizes), tuple(int(d) for d in shape)
    n, me = group.size(), group.rank()
    if op not in _REDUCE_OPS:
        raise ValueError(f"reduce op {op!r}: expected one of {', '.join(_REDUCE_OPS)}")
    if len(sizes) != n or sum(sizes) != shape[dim]:
        raise ValueError(f"reduce_scatter_cat: sizes {list(sizes)} must be {n} (one per rank "
                         f"of the group) summing to dim {dim} of shape {shape}")

    def general(t: torch.Tensor) -> Handle[torch.Tensor]:
        return reduce_scatter_cat(t, sizes, dim, group, op, async_op=True)

    caps = capabilities(group)
    if any(k != sizes[0] for k in sizes) or not caps.reduce_scatter \
            or (op == "avg" and not caps.avg):
        return general
    mine = shape[:dim] + (sizes[me],) + shape[dim + 1:]
    stacked = (n * mine[0], *mine[1:])
    opts = _opts(ReduceScatterOptions, _REDUCE_OPS[op])
    issue = group.reduce_scatter_single

    def scatter(t: torch.Tensor) -> Handle[torch.Tensor]:
        if not _plain(t) or (op == "avg" and not t.is_floating_point()):
            return general(t)  # which also says why avg on an integer tensor would round
        _check_piece("reduce_scatter", t, shape)
        # piece i becomes block i of one buffer: a view for dim 0, one copy otherwise
        inp = t.contiguous() if dim == 0 else t.unflatten(dim, (n, sizes[0])).movedim(dim, 0)
        inp = inp.reshape(stacked)
        out = t.new_empty(mine)
        return Handle((issue(out, inp, opts),), lambda: out)

    return scatter


def prepare_all_reduce(group: dist.ProcessGroup, op: ReduceOpName = "sum") -> Prepared:
    """``all_reduce(t, group, op, async_op=True)`` as a function of ``t``.

    >>> import torch, simpg
    >>> simpg.run(lambda: prepare_all_reduce(dist.group.WORLD)(torch.ones(2)).wait().tolist(), 2)
    [[2.0, 2.0], [2.0, 2.0]]
    """
    if op not in _REDUCE_OPS:
        raise ValueError(f"reduce op {op!r}: expected one of {', '.join(_REDUCE_OPS)}")

    def general(t: torch.Tensor) -> Handle[torch.Tensor]:
        return all_reduce(t, group, op, async_op=True)

    if op == "avg" and not capabilities(group).avg:
        return general
    opts = _opts(AllreduceOptions, _REDUCE_OPS[op])
    issue = group.allreduce

    def reduce(t: torch.Tensor) -> Handle[torch.Tensor]:
        if not _plain(t) or (op == "avg" and not t.is_floating_point()):
            return general(t)
        out = t.clone(memory_format=torch.contiguous_format)
        return Handle((issue([out], opts),), lambda: out)

    return reduce


def prepare_all_to_all_single(send_sizes: Sequence[int], recv_sizes: Sequence[int],
                              group: dist.ProcessGroup) -> Prepared:
    """``all_to_all_single(send, send_sizes, recv_sizes, group, async_op=True)`` as a
    function of ``send``.

    >>> import torch, simpg
    >>> def body():
    ...     swap = prepare_all_to_all_single([1, 1], [1, 1], dist.group.WORLD)
    ...     return swap(torch.arange(2.0) + 10 * dist.get_rank()).wait().tolist()
    >>> simpg.run(body, 2)
    [[0.0, 10.0], [1.0, 11.0]]
    """
    if sizes_symbolic(tuple(send_sizes) + tuple(recv_sizes)):  # traced: keep them symbolic
        return lambda send: all_to_all_single(send, send_sizes, recv_sizes, group, async_op=True)
    send_sizes, recv_sizes = [int(k) for k in send_sizes], [int(k) for k in recv_sizes]
    n = group.size()
    if len(send_sizes) != n or len(recv_sizes) != n:
        raise ValueError(f"all_to_all_single: expected {n} sizes each way (one per rank of the "
                         f"group), got send sizes {send_sizes}, receive sizes {recv_sizes}")
    total, sent = sum(recv_sizes), sum(send_sizes)
    opts = _opts(AllToAllOptions)
    issue = group.all_to_all_single

    def exchange(send: torch.Tensor) -> Handle[torch.Tensor]:
        if not _plain(send) or send.dim() != 1 or send.numel() != sent:
            return all_to_all_single(send, send_sizes, recv_sizes, group, async_op=True)
        recv = send.new_empty(total)
        return Handle((issue(recv, send.contiguous(), recv_sizes, send_sizes, opts),),
                      lambda: recv)

    return exchange


# ---------------------------------------------------------------------------------------------
# Helpers


def _group(group: dist.ProcessGroup | None) -> dist.ProcessGroup:
    """``group``, or the default group for None. Its ``size()`` and ``rank()`` are what
    ``dist.get_world_size`` / ``dist.get_rank(group)`` return for a member, without their
    Python layers (a dozen calls each)."""
    return dist.group.WORLD if group is None else group  # type: ignore[return-value]


def _result(handle: Handle[T], async_op: bool) -> T | Handle[T]:
    return handle if async_op else handle.wait()


def _chunk_sizes(total: int, width: int, n: int) -> list[int]:
    """Sizes of ``n`` pieces of ``total`` cut ``width`` at a time (torch.chunk's, empty
    ones last)."""
    return [max(0, min(width, total - i * width)) for i in range(n)]


def _reduce_op(op: str, tensor: torch.Tensor, group: dist.ProcessGroup) -> tuple[Any, int]:
    """The c10d op to issue, and the group size to divide by afterwards (0: none)."""
    if op not in _REDUCE_OPS:
        raise ValueError(f"reduce op {op!r}: expected one of {', '.join(_REDUCE_OPS)}")
    if op != "avg":
        return _REDUCE_OPS[op], 0
    if not (tensor.is_floating_point() or tensor.is_complex()):
        raise ValueError(f"reduce op 'avg' on {tensor.dtype} would round: expected a floating "
                         f"dtype")
    if capabilities(group).avg:
        return dist.ReduceOp.AVG, 0
    return dist.ReduceOp.SUM, _group(group).size()


def _check_shapes(what: str, tensor: torch.Tensor, shapes: Sequence[Sequence[int]],
                  group: dist.ProcessGroup) -> tuple[tuple[int, ...], ...]:
    n, me = _group(group).size(), _group(group).rank()
    out = _normalized_shapes(shapes)
    if len(out) != n:
        raise ValueError(f"{what}: got {len(out)} shapes, expected {n} (one per rank of the "
                         f"group)")
    if out[me] != tuple(tensor.shape):
        raise ValueError(f"{what}: this rank (group rank {me}) holds shape "
                         f"{tuple(tensor.shape)} but shapes[{me}] is {out[me]}")
    return out


def _normalized_shapes(shapes: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], ...]:
    # A caller passing the same tuple each call (redistribute's layouts are cached) pays a
    # lookup, not n conversions: at 64 ranks those were most of a gather's Python time.
    if isinstance(shapes, tuple):
        try:
            return _normalized_tuple(shapes)
        except TypeError:  # unhashable entries (lists)
            pass
    return tuple(tuple(int(d) for d in s) for s in shapes)


@functools.lru_cache(maxsize=1024)
def _normalized_tuple(shapes: tuple) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(int(d) for d in s) for s in shapes)


@functools.lru_cache(maxsize=1024)
def _all_equal(items: tuple) -> bool:
    return all(x == items[0] for x in items)


@functools.lru_cache(maxsize=1024)
def _widest(shapes: tuple[tuple[int, ...], ...], dim: int) -> int:
    return max(s[dim] for s in shapes)


# ---------------------------------------------------------------------------------------------
# While a graph is traced, the four run as functional collectives (Note [functional
# collectives] in dtensor/comm/functional.py); eager calls pay one check.


def _traceable(eager: Callable[..., Any], functional: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(eager)
    def call(first: Any, *args: Any, async_op: bool = False, **kwargs: Any) -> Any:
        t = first if isinstance(first, torch.Tensor) else first[0]
        if not _functional.tracing(t):
            return eager(first, *args, async_op=async_op, **kwargs)
        out = functional(first, *args, caps=capabilities, **kwargs)
        return Handle.done(out) if async_op else out

    return call


all_gather = _traceable(all_gather, _functional.all_gather)
all_to_all = _traceable(all_to_all, _functional.all_to_all)
all_reduce = _traceable(all_reduce, _functional.all_reduce)
reduce_scatter = _traceable(reduce_scatter, _functional.reduce_scatter)


def _traced_all_gather_cat(t: torch.Tensor, shapes: Sequence[Sequence[int]], dim: int,
                           group: dist.ProcessGroup, *, caps: Any) -> torch.Tensor:
    return torch.cat(_functional.all_gather(t, shapes, group, caps=caps), dim)


def _traced_reduce_scatter_cat(t: torch.Tensor, sizes: Sequence[int], dim: int,
                               group: dist.ProcessGroup, op: str = "sum", *,
                               caps: Any) -> torch.Tensor:
    return _functional.reduce_scatter(list(t.split(list(sizes), dim)), group, op, caps=caps)


def _traced_all_to_all_single(send: torch.Tensor, send_sizes: Sequence[int],
                              recv_sizes: Sequence[int], group: dist.ProcessGroup, *,
                              caps: Any) -> torch.Tensor:
    pieces = _functional.all_to_all(list(send.split(list(send_sizes))),
                                    [(k,) for k in recv_sizes], group, caps=caps)
    return torch.cat(pieces)


all_gather_cat = _traceable(all_gather_cat, _traced_all_gather_cat)
reduce_scatter_cat = _traceable(reduce_scatter_cat, _traced_reduce_scatter_cat)
all_to_all_single = _traceable(all_to_all_single, _traced_all_to_all_single)
