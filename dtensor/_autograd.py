"""The differentiable boundaries of a DTensor: from_local, to_local, redistribute.

Note [gradient placements]
A DTensor stands for one global tensor; changing its placements changes only how that tensor
is stored. So the backward of every boundary is the identity on the global gradient, moved
back to the forward input's placements: the backward of Shard->Replicate turns the gradient
back into a Shard (a reduce_scatter when it arrives Partial), and so on. A forward input held
as Partial(sum) addends gets the whole gradient on each rank (Replicate), since each addend
enters the sum with weight one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dtensor.comm import AsyncCollectiveTensor, Handle
from dtensor.placements import Placement, Replicate, fmt_placements
from dtensor.redistribute import program_to
from dtensor.spec import DTensorSpec, replicate_partials

if TYPE_CHECKING:
    from dtensor.tensor import DTensor


def _grad_parts(grad: torch.Tensor, spec: DTensorSpec,
                cls: type) -> tuple[torch.Tensor, DTensorSpec]:
    """(local piece, spec) of an incoming gradient. Autograd materializes a missing gradient
    as a plain tensor of the global shape (zeros): that is a Replicate value."""
    if isinstance(grad, cls):
        return grad._local_tensor, grad._spec
    replicated = tuple(Replicate() for _ in spec.placements)
    return grad, DTensorSpec(spec.mesh, replicated, spec.shape, spec.stride, grad.dtype)


class FromLocal(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, local: torch.Tensor,  # type: ignore[override]
                spec: DTensorSpec, cls: type) -> DTensor:
        ctx.spec = spec
        ctx.cls = cls
        return cls(local.view_as(local), spec, requires_grad=local.requires_grad)

    @staticmethod
    def backward(ctx: Any, grad: DTensor) -> tuple[torch.Tensor, None, None]:  # type: ignore[override]
        local, spec = _grad_parts(grad, ctx.spec, ctx.cls)
        return program_to(spec, gradient_spec(ctx.spec).placements)[1](local), None, None


class ToLocal(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, dt: DTensor, grad_placements: tuple[Placement, ...] | None
                ) -> torch.Tensor:  # type: ignore[override]
        ctx.spec = dt._spec
        ctx.cls = type(dt)
        ctx.grad_placements = grad_placements
        local = dt._local_tensor
        if type(local) is AsyncCollectiveTensor:  # still in flight (Note [async redistribute])
            return local.alias()
        return local.view_as(local)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[DTensor, None]:  # type: ignore[override]
        spec: DTensorSpec = ctx.spec
        placements = ctx.grad_placements or spec.placements
        grad_spec = DTensorSpec(spec.mesh, tuple(placements), spec.shape, spec.stride, grad.dtype)
        return ctx.cls(grad, grad_spec, requires_grad=False), None


class Redistribute(torch.autograd.Function):
    """Note [gradient placements]. ``forward_dtype`` casts the piece before the forward
    collectives (the result has that dtype); ``backward_dtype`` casts the gradient before the
    backward ones, and the gradient is cast back to the input's dtype after them (as torch's
    ``redistribute(..., forward_dtype=, backward_dtype=)``).

    Where no gradient can flow (grad mode off, or the input needs none) ``apply`` runs the
    move without autograd's Function machinery, which costs more than a cached move itself.
    With ``async_op`` the forward returns with its last collective in flight (Note [async
    redistribute] in dtensor/comm/handles.py); the backward is synchronous.
    """

    @classmethod
    def apply(cls, dt: DTensor, placements: tuple[Placement, ...],  # type: ignore[override]
              async_op: bool = False, forward_dtype: torch.dtype | None = None,
              backward_dtype: torch.dtype | None = None) -> DTensor:
        if not (dt.requires_grad and torch.is_grad_enabled()):
            return _redistributed(dt, placements, forward_dtype, False, async_op)
        return super().apply(dt, placements, async_op, forward_dtype, backward_dtype)

    @staticmethod
    def forward(ctx: Any, dt: DTensor, placements: tuple[Placement, ...],  # type: ignore[override]
                async_op: bool, forward_dtype: torch.dtype | None = None,
                backward_dtype: torch.dtype | None = None) -> DTensor:
        ctx.src_spec = dt._spec
        ctx.cls = type(dt)
        ctx.backward_dtype = backward_dtype
        return _redistributed(dt, placements, forward_dtype, dt.requires_grad, async_op)

    @staticmethod
    def backward(ctx: Any, grad: DTensor) -> tuple:  # type: ignore[override]
        src: DTensorSpec = ctx.src_spec
        local, spec = _grad_parts(grad, src, ctx.cls)
        if ctx.backward_dtype is not None and ctx.backward_dtype != local.dtype:
            local = local.to(ctx.backward_dtype)
        out_spec = gradient_spec(src)
        local = program_to(spec, out_spec.placements)[1](local).to(src.dtype)
        return ctx.cls(local, out_spec, requires_grad=False), None, None, None, None


def _redistributed(dt: DTensor, placements: tuple[Placement, ...],
                   forward_dtype: torch.dtype | None, requires_grad: bool,
                   async_op: bool = False) -> DTensor:
    """``dt`` moved to ``placements`` by its cached program (Note [compiled plans]); with
    ``async_op``, before its last collective is done (Note [async redistribute] in
    dtensor/comm/handles.py)."""
    local, spec = dt._local_tensor, dt._spec
    if forward_dtype is not None and forward_dtype != local.dtype:
        local = local.to(forward_dtype)
        spec = DTensorSpec(spec.mesh, spec.placements, spec.shape, spec.stride, forward_dtype)
    if placements == spec.placements:
        if type(local) is AsyncCollectiveTensor:  # in flight: Note [async redistribute]
            if not async_op:  # a synchronous redistribute returns a finished piece
                return type(dt)(local.wait(), spec, requires_grad=requires_grad)
            out = type(dt)(local, spec, requires_grad=requires_grad)
            local.held_by(out)  # one more holder, given the finished piece on the wait
            return out
        return type(dt)(local, spec, requires_grad=requires_grad)
    out_spec, move = program_to(spec, placements)
    if async_op:
        return _in_flight(dt, move(local, True), local, out_spec, requires_grad)
    return type(dt)(move(local), out_spec, requires_grad=requires_grad)


def _in_flight(dt: DTensor, handle: Handle[torch.Tensor], local: torch.Tensor,
               spec: DTensorSpec, requires_grad: bool) -> DTensor:
    """A DTensor of ``spec`` whose piece is ``handle``'s result, waited at its first use
    (Note [async redistribute] in dtensor/comm/handles.py)."""
    if not handle.in_flight:  # only local steps, or nothing to move
        return type(dt)(handle.wait(), spec, requires_grad=requires_grad)
    src = dt._spec

    def describe() -> str:
        return (f"redistribute {fmt_placements(src.placements)}->"
                f"{fmt_placements(spec.placements)} of shape {src.shape} on {src.mesh!r}")

    piece = AsyncCollectiveTensor.issued(handle, spec.local_shape(), local, describe)
    out = type(dt)(piece, spec, requires_grad=requires_grad)
    piece.held_by(out)
    return out


def local_piece(dt: DTensor) -> torch.Tensor:
    """``dt``'s piece as a plain tensor: waited for if a collective still computes it."""
    local = dt._local_tensor
    return local.wait() if type(local) is AsyncCollectiveTensor else local


def gradient_spec(src: DTensorSpec) -> DTensorSpec:
    """The spec a gradient goes back to the input of a boundary in: ``src`` with Partial as
    Replicate (Note [gradient placements]), kept on ``src`` under ``None``."""
    found = src.moves.get(None)
    if found is None:
        target = replicate_partials(src.placements)
        found = src.moves[None] = (DTensorSpec(src.mesh, target, src.shape, src.stride,
                                               src.dtype), None)
    return found[0]
