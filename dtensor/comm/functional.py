"""The four collectives of ``dtensor.comm`` as torch's functional collectives, for tracing.

Note [functional collectives]
c10d's collectives write into tensors they are given (``dist.all_gather(outs, x)``) and
return a ``Work``: a tracer can record neither on fake tensors under functionalization.
torch's functional collectives (``torch.ops._c10d_functional``) are out-of-place aten ops
naming their group by ``group_name``; AOTAutograd and inductor trace and schedule them.
While a graph is being traced (``tracing``), ``dtensor.comm`` sends its four collectives
here. Each has ``comm``'s signature and meaning, uneven shapes included, built from the
three ops every backend implements (all_gather_into_tensor, all_reduce, all_to_all_single)
and reduce_scatter_tensor where the backend has it: uneven pieces are padded to the largest
and cut after, as ``comm``'s portable paths do. They return results, not handles: the
``wait_tensor`` follows each op, and the compiler may move it.

Ranks that are threads (simpg) see no difference: a group's name resolves to this rank's
group, as ``group.group_name`` does in eager.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensor
from torch._subclasses.functional_tensor import FunctionalTensor

from dtensor.symbolic import largest, sizes

_ops = torch.ops._c10d_functional
_PROXY = torch._C._TorchDispatchModeKey.PROXY
_FUNCTIONAL_OPS = {"sum": "sum", "avg": "avg", "max": "max", "min": "min", "product": "product"}
Caps = Callable[[dist.ProcessGroup], Any]  # dtensor.comm.capabilities


def tracing(t: torch.Tensor) -> bool:
    """Whether collectives on ``t`` are being traced rather than run: ``t`` is fake or
    functional, or a tracer (make_fx, AOTAutograd) is recording.

    >>> from torch._subclasses.fake_tensor import FakeTensorMode
    >>> with FakeTensorMode():
    ...     fake = torch.ones(2)
    >>> tracing(torch.ones(2)), tracing(fake)
    (False, True)
    """
    return (isinstance(t, (FakeTensor, FunctionalTensor))
            or torch._C._get_dispatch_mode(_PROXY) is not None
            or torch.compiler.is_compiling())


def _wait(t: torch.Tensor) -> torch.Tensor:
    return _ops.wait_tensor(t)


def _name(group: dist.ProcessGroup) -> str:
    return group.group_name


def all_gather(tensor: torch.Tensor, shapes: Sequence[Sequence[int]],
               group: dist.ProcessGroup, *, caps: Caps) -> list[torch.Tensor]:
    """``comm.all_gather``: every group rank's tensor, in group-rank order."""
    n = dist.get_world_size(group)
    shapes = [sizes(s) for s in shapes]
    width = largest(math.prod(s) for s in shapes)
    flat = tensor.contiguous().reshape(-1)
    if flat.numel() < width:  # uneven: pad to the largest piece
        flat = torch.cat([flat, flat.new_zeros(width - flat.numel())])
    rows = _wait(_ops.all_gather_into_tensor(flat, n, _name(group))).view(n, width)
    return [rows[i, :math.prod(s)].reshape(s) for i, s in enumerate(shapes)]


def all_to_all(inputs: Sequence[torch.Tensor], output_shapes: Sequence[Sequence[int]],
               group: dist.ProcessGroup, *, caps: Caps) -> list[torch.Tensor]:
    """``comm.all_to_all``: ``inputs[j]`` goes to group rank j."""
    n = dist.get_world_size(group)
    if len(inputs) != n or len(output_shapes) != n:
        raise ValueError(f"all_to_all: got {len(inputs)} inputs and {len(output_shapes)} output "
                         f"shapes, expected {n} of each (one per rank of the group)")
    shapes = [sizes(s) for s in output_shapes]
    send = torch.cat([t.contiguous().reshape(-1) for t in inputs])
    out_sizes = [math.prod(s) for s in shapes]
    recv = _wait(_ops.all_to_all_single(send, out_sizes, [t.numel() for t in inputs],
                                        _name(group)))
    return [p.reshape(s) for p, s in zip(torch.split(recv, out_sizes), shapes)]


def all_reduce(tensor: torch.Tensor, group: dist.ProcessGroup, op: str = "sum", *,
               caps: Caps) -> torch.Tensor:
    """``comm.all_reduce``: the reduction of every group rank's ``tensor``."""
    name, divide = _op(op, tensor, group, caps)
    out = _wait(_ops.all_reduce(tensor.contiguous(), name, _name(group)))
    return out / divide if divide else out


def reduce_scatter(inputs: Sequence[torch.Tensor], group: dist.ProcessGroup, op: str = "sum",
                   *, caps: Caps) -> torch.Tensor:
    """``comm.reduce_scatter``: group rank i gets the reduction of the ranks' ``inputs[i]``."""
    n, me = dist.get_world_size(group), dist.get_rank(group)
    if len(inputs) != n:
        raise ValueError(f"reduce_scatter: got {len(inputs)} pieces, expected {n} (one per "
                         f"rank of the group)")
    mine = tuple(inputs[me].shape)
    if not caps(group).reduce_scatter:  # as comm: send piece i to rank i, reduce here
        stacked = torch.stack(all_to_all(list(inputs), [mine] * n, group, caps=caps))
        return _reduce_stacked(stacked, op, n)
    name, divide = _op(op, inputs[0], group, caps)
    width = largest(t.numel() for t in inputs)
    flat = [t.contiguous().reshape(-1) for t in inputs]
    if isinstance(width, torch.SymInt):  # traced: pad every piece, comparing no sizes
        flat = [torch.constant_pad_nd(f, (0, width - f.numel())) for f in flat]
    else:
        flat = [f if f.numel() == width else torch.cat([f, f.new_zeros(width - f.numel())])
                for f in flat]
    out = _wait(_ops.reduce_scatter_tensor(torch.cat(flat), name, n, _name(group)))
    out = out[:math.prod(mine)].reshape(mine)
    return out / divide if divide else out


def _reduce_stacked(stacked: torch.Tensor, op: str, n: int) -> torch.Tensor:
    if op in ("sum", "avg"):
        total = stacked.sum(0, dtype=stacked.dtype)
        return total / n if op == "avg" else total
    if op == "product":
        return stacked.prod(0, dtype=stacked.dtype)
    if op in ("max", "min"):
        return stacked.amax(0) if op == "max" else stacked.amin(0)
    raise ValueError(f"reduce op {op!r}: expected one of {', '.join(_FUNCTIONAL_OPS)}")


def _op(op: str, tensor: torch.Tensor, group: dist.ProcessGroup, caps: Caps) -> tuple[str, int]:
    """The functional op's name, and the group size to divide by afterwards (0: none)."""
    if op not in _FUNCTIONAL_OPS:
        raise ValueError(f"reduce op {op!r}: expected one of {', '.join(_FUNCTIONAL_OPS)}")
    if op != "avg":
        return op, 0
    if not (tensor.is_floating_point() or tensor.is_complex()):
        raise ValueError(f"reduce op 'avg' on {tensor.dtype} would round: expected a floating "
                         f"dtype")
    if caps(group).avg:
        return "avg", 0
    return "sum", dist.get_world_size(group)
