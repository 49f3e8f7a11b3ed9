"""``loss_parallel()``: cross entropy on logits sharded on the class dim, without gathering them.

``F.cross_entropy(logits, target)`` runs as ``_log_softmax``, then ``nll_loss_forward`` (and,
with ``label_smoothing``, a weighted sum of the log-probs over the classes); its backward as
``nll_loss_backward`` then ``_log_softmax_backward_data``. With the logits sharded on the
class dim (the output of a ColwiseParallel lm-head with ``use_local_output=False``):

- nll_loss and the label-smoothing sum keep the class dim sharded by pure rules
  (Note [class-sharded nll_loss] in dtensor/ops/losses.py): no communication. The loss comes
  out Partial(sum); reading it (``full_tensor()``) reduces one value per position.
- ``_log_softmax`` needs the max and the sum of exp over ALL classes, so it cannot be a pure
  rule. Under ``loss_parallel()`` it is decomposed (Note [decompositions] in
  ``dtensor.dispatch.decomposition_table``) into local steps and two all-reduces of one value
  per position (the max, then the sum of exp); its backward ``g - exp(out) * sum(g)`` into one (the sum of g over the classes). Each rank
  moves O(positions) bytes, never O(positions x classes).

Unlike torch's, the loss stays Partial(sum) where nothing needs it whole (read it with
``full_tensor()``), ``mean`` is exact on any mesh (total_weight is global), and
``label_smoothing`` and class-probability targets work. One ATen path still takes the
gathering fallback: label smoothing + class weight + ``mean`` with a DTensor target and a
plain weight calls ``target.masked_select`` (a data-dependent shape; it moves the target,
O(positions)); pass the weight as a DTensor too, or the target as a plain tensor.

Note [loss_parallel backward outside the block]
``loss.backward()`` usually runs after the ``with loss_parallel():`` block. Only this module's
forward makes a log_softmax output sharded on its softmax dim (the rule never does: it would
need the same communication), so ``_log_softmax_backward_data`` decomposes whenever its saved
output is sharded on ``dim``, in the block or not: the output records it. Every other call of
both ops dispatches as before.

>>> import torch, torch.nn.functional as F, simpg
>>> from dtensor import init_device_mesh, distribute_tensor
>>> def body():
...     logits = distribute_tensor(torch.randn(3, 8), init_device_mesh("cpu", (2,)), [Shard(1)])
...     with loss_parallel():
...         loss = F.cross_entropy(logits.requires_grad_(), torch.tensor([0, 5, 7]),
...                                label_smoothing=0.1)
...     loss.backward()  # after the block: Note [loss_parallel backward outside the block]
...     return logits.grad.placements
>>> simpg.run(body, 2)
[(Shard(dim=1),), (Shard(dim=1),)]
"""

from __future__ import annotations

import contextlib
import contextvars
from functools import lru_cache
from typing import Any, Iterator, Sequence

import torch

from dtensor.dispatch import register_decomposition
from dtensor.mesh import DeviceMesh
from dtensor.placements import Partial, Placement, Replicate, Shard, fmt_placements
from dtensor.redistribute import redistribute_local_tensor
from dtensor.spec import DTensorSpec
from dtensor.tensor import DTensor

aten = torch.ops.aten
_active: contextvars.ContextVar[bool] = contextvars.ContextVar("dtensor_loss_parallel",
                                                               default=False)


class LossParallelError(ValueError):
    """``loss_parallel()`` met logits it cannot handle without gathering them; carries the op,
    the placements and the class dim."""

    def __init__(self, op: Any, placements: Sequence[Placement], dim: int, problem: str
                 ) -> None:
        self.op, self.placements, self.dim = op, tuple(placements), dim
        super().__init__(f"loss_parallel(): {op} on logits with placements "
                         f"{fmt_placements(placements)}: {problem}")


@contextlib.contextmanager
def loss_parallel() -> Iterator[None]:
    """Within the block (on this rank), ``F.cross_entropy`` on logits sharded on the class
    dim runs without gathering them: every reduction, ``ignore_index``, class ``weight`` and
    ``label_smoothing``, forward and backward (the backward may run after the block: Note
    [loss_parallel backward outside the block]). Logits whose class dim is not sharded, or
    that are Partial, raise ``LossParallelError``.

    >>> import torch, torch.nn.functional as F, simpg
    >>> from dtensor import init_device_mesh, distribute_tensor
    >>> logits, target = torch.arange(12.0).reshape(2, 6) / 4, torch.tensor([0, 5])
    >>> round(F.cross_entropy(logits, target).item(), 4)
    1.8812
    >>> def body():
    ...     x = distribute_tensor(logits, init_device_mesh("cpu", (2,)), [Shard(1)])
    ...     with loss_parallel():
    ...         loss = F.cross_entropy(x, target)
    ...     return loss.placements, round(loss.full_tensor().item(), 4)
    >>> simpg.run(body, 2)[0]
    ((Partial(reduce_op='sum'),), 1.8812)
    """
    token = _active.set(True)
    try:
        yield
    finally:
        _active.reset(token)


def _arg(args: tuple, kwargs: dict, index: int, name: str) -> Any:
    return args[index] if index < len(args) else kwargs[name]


def _class_mesh_dims(x: DTensor, dim: int, func: Any) -> tuple[int, ...]:
    """The mesh dims that shard the class dim; raises for logits loss_parallel cannot take."""
    placements = x._spec.placements
    if any(isinstance(p, Partial) for p in placements):
        raise LossParallelError(func, placements, dim, "Partial logits would be reduced whole "
                                "(softmax is not linear); expected Shard on the class dim "
                                f"{dim} and Shard/Replicate elsewhere: redistribute first")
    mesh_dims = tuple(m for m, p in enumerate(placements) if isinstance(p, Shard)
                      and p.dim == dim)
    if not mesh_dims:
        raise LossParallelError(func, placements, dim, f"the class dim {dim} is not sharded; "
                                f"expected Shard({dim}) on some mesh dim (e.g. the output of "
                                "ColwiseParallel(use_local_output=False)), or no loss_parallel()")
    return mesh_dims


def _all_reduce(local: torch.Tensor, spec: DTensorSpec, mesh_dims: tuple[int, ...],
                reduce_op: str, dim: int) -> torch.Tensor:
    """``local``, a keepdim reduction over ``dim`` of this rank's piece, reduced over the mesh
    dims that shard ``dim``: Partial(reduce_op) -> Replicate there, other placements kept."""
    src = tuple(Partial(reduce_op) if m in mesh_dims else p
                for m, p in enumerate(spec.placements))
    dst = tuple(Replicate() if m in mesh_dims else p for m, p in enumerate(spec.placements))
    shape = tuple(1 if d == dim else n for d, n in enumerate(spec.shape))
    return redistribute_local_tensor(local, spec.mesh, src, dst, shape)


@lru_cache(maxsize=1024)
def _out_meta(func: Any, shape: tuple[int, ...], stride: tuple[int, ...], dtype: torch.dtype,
              args: tuple) -> tuple[tuple[int, ...], torch.dtype]:
    """Stride and dtype of the op's output, from running it on meta tensors."""
    x = torch.empty_strided(shape, stride, dtype=dtype, device="meta")
    out = func(x, *args) if func is aten._log_softmax.default else func(x, x, *args)
    return tuple(out.stride()), out.dtype


def _wrap(local: torch.Tensor, spec: DTensorSpec, stride: tuple[int, ...]) -> DTensor:
    out_spec = DTensorSpec(spec.mesh, spec.placements, spec.shape, stride, local.dtype)
    return DTensor(local, out_spec, requires_grad=False)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Reduced-precision logits are normalized in float32, as aten's CPU kernels do."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _log_softmax(func: Any, args: tuple, kwargs: dict) -> Any:
    """log_softmax(x) = x - max - log(sum(exp(x - max))), max and sum over every rank's
    classes: one all-reduce of each per position."""
    if not _active.get():
        return NotImplemented
    x = _arg(args, kwargs, 0, "self")
    dim, half_to_float = _arg(args, kwargs, 1, "dim"), _arg(args, kwargs, 2, "half_to_float")
    dim = dim % max(x.ndim, 1)
    mesh_dims = _class_mesh_dims(x, dim, func)
    spec = x._spec
    local = x._local_tensor.to(_compute_dtype(x.dtype))
    if local.shape[dim] > 0:
        top = local.amax(dim, keepdim=True)
    else:  # an empty piece of the classes: max is the identity of max
        shape = tuple(1 if d == dim else n for d, n in enumerate(local.shape))
        top = local.new_full(shape, float("-inf"))
    shifted = local - _all_reduce(top, spec, mesh_dims, "max", dim)
    total = _all_reduce(shifted.exp().sum(dim, keepdim=True), spec, mesh_dims, "sum", dim)
    stride, dtype = _out_meta(func, spec.shape, spec.stride, spec.dtype, (dim, half_to_float))
    # shifted and total are this call's own: subtract in place, no third piece-sized buffer
    return _wrap(shifted.sub_(total.log()).to(dtype), spec, stride)


def _log_softmax_backward(func: Any, args: tuple, kwargs: dict) -> Any:
    """grad_input = g - exp(out) * sum(g) over every rank's classes: one all-reduce per
    position. Runs when the saved output is sharded on ``dim`` (Note [loss_parallel backward
    outside the block])."""
    grad, out = _arg(args, kwargs, 0, "grad_output"), _arg(args, kwargs, 1, "output")
    dim, input_dtype = _arg(args, kwargs, 2, "dim"), _arg(args, kwargs, 3, "input_dtype")
    if not isinstance(out, DTensor):
        return NotImplemented
    dim = dim % max(out.ndim, 1)
    spec = out._spec
    if spec.has_partial or not any(isinstance(p, Shard) and p.dim == dim
                                   for p in spec.placements):
        return NotImplemented
    mesh_dims = _class_mesh_dims(out, dim, func)
    g = _localize(grad, spec)
    total = _all_reduce(g.sum(dim, keepdim=True), spec, mesh_dims, "sum", dim)
    saved = out._local_tensor
    if g.dtype == saved.dtype:  # into exp's own buffer: no second piece-sized one
        scaled = saved.exp().mul_(total)
        local = torch.sub(g, scaled, out=scaled)
    else:  # mixed dtypes promote as the plain expression does
        local = g - saved.exp() * total
    stride, dtype = _out_meta(func, spec.shape, spec.stride, spec.dtype, (dim, input_dtype))
    return _wrap(local.to(dtype), spec, stride)


def _localize(t: torch.Tensor, spec: DTensorSpec) -> torch.Tensor:
    """This rank's piece of ``t`` under ``spec``'s placements (a plain tensor is Replicate)."""
    mesh: DeviceMesh = spec.mesh
    if isinstance(t, DTensor):
        if t._spec.placements == spec.placements:
            return t._local_tensor
        src, local = t._spec.placements, t._local_tensor
    else:
        src, local = (Replicate(),) * mesh.ndim, t
    return redistribute_local_tensor(local, mesh, src, spec.placements, spec.shape)


def _check_targets(func: Any, args: tuple, kwargs: dict) -> Any:
    """Under loss_parallel, a target past the last class would be picked by no rank (a
    silent 0) where the unsharded op raises: check it against the global class count, then
    run the op as usual."""
    if not _active.get():
        return NotImplemented
    x, target = _arg(args, kwargs, 0, "self"), _arg(args, kwargs, 1, "target")
    ignore_index = _arg(args, kwargs, 4, "ignore_index")
    n = x.shape[1 if x.ndim >= 2 else 0]
    t = target._local_tensor if isinstance(target, DTensor) else target
    bad = (t != ignore_index) & ((t < 0) | (t >= n))
    torch._assert_async(~bad.any(), f"loss_parallel(): {func}: a target is out of bounds: "
                                    f"expected 0 <= target < {n} classes, or ignore_index")
    return NotImplemented


register_decomposition(aten._log_softmax.default, _log_softmax)
register_decomposition(aten._log_softmax_backward_data.default, _log_softmax_backward)
register_decomposition(aten.nll_loss_forward.default, _check_targets)
register_decomposition(aten.nll_loss2d_forward.default, _check_targets)

__all__ = ["LossParallelError", "loss_parallel"]
