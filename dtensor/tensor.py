"""DTensor: a torch.Tensor subclass holding one rank's piece of a global tensor."""

from __future__ import annotations

import copy
import functools
import hashlib
import sys
from typing import Any, Sequence

import torch

from dtensor.symbolic import hint, sizes, sizes_symbolic
from torch.utils import _foreach_utils

from dtensor import _autograd, compile as _compile
from dtensor.dispatch import bind, torch_dispatch
from dtensor.dispatch.checks import check_local_shapes, measured_sizes
from dtensor.foreign import refuse_torch_dtensor, refuse_torch_mesh
from dtensor.mesh import DeviceMesh, resolve_mesh
from dtensor.layout import check_layout, local_shape, split_bounds
from dtensor.placements import (Placement, PlacementError, Replicate, Shard, fmt_placements,
                                MEASURED, has_split_rule, normalize_placements)
from dtensor.spec import DTensorSpec, TensorSpec, contiguous_strides, replicate_partials


_make_wrapper = torch.Tensor._make_wrapper_subclass  # type: ignore[attr-defined]


class DTensor(torch.Tensor):
    """A global tensor laid out over a ``DeviceMesh`` by one placement per mesh dim.

    Its shape, stride and dtype are the global tensor's; ``to_local()`` is this rank's piece
    (``torch.chunk`` semantics along sharded dims, so pieces may be uneven or empty).

    >>> import torch, simpg
    >>> from dtensor import init_device_mesh, distribute_tensor, Shard
    >>> def body():
    ...     x = distribute_tensor(torch.ones(6, 2), init_device_mesh("cpu", (4,)), [Shard(0)])
    ...     return tuple(x.shape), tuple(x.to_local().shape)
    >>> simpg.run(body, 4)
    [((6, 2), (2, 2)), ((6, 2), (2, 2)), ((6, 2), (2, 2)), ((6, 2), (0, 2))]
    """

    # slots, not the instance dict: every op reads and writes these (torch's DTensor does too)
    __slots__ = ("_local_tensor", "_spec", "_tspec")
    _local_tensor: torch.Tensor
    _spec: DTensorSpec
    _tspec: TensorSpec  # what sharding rules see of it; the dispatch cache key
    _pinned: bool = False  # see pin()

    @staticmethod
    def __new__(cls, local_tensor: torch.Tensor, spec: DTensorSpec, *,
                requires_grad: bool) -> DTensor:
        r = torch.Tensor._make_wrapper_subclass(  # type: ignore[attr-defined]
            cls, spec.shape, strides=spec.stride, dtype=spec.dtype, device=local_tensor.device,
            layout=local_tensor.layout, requires_grad=requires_grad,
        )
        r._local_tensor = local_tensor
        r._spec = spec
        r._tspec = spec.tensor
        return r

    @classmethod
    def _wrap(cls, local_tensor: torch.Tensor, spec: DTensorSpec) -> DTensor:
        """A new DTensor around an op's output (no autograd: dispatch runs below it)."""
        r = _make_wrapper(cls, spec.shape, strides=spec.stride, dtype=spec.dtype,
                          device=local_tensor.device, layout=local_tensor.layout)
        r._local_tensor = local_tensor
        r._spec = spec
        r._tspec = spec.tensor
        return r

    def __repr__(self) -> str:  # type: ignore[override]
        return (f"DTensor(local_tensor={_autograd.local_piece(self)}, "
                f"device_mesh={self._spec.mesh}, "
                f"placements={self._spec.placements})")

    # -- copying and pickling (Note [pickling meshes] in dtensor.mesh) ----------------------
    def __deepcopy__(self, memo: dict) -> DTensor:
        new = DTensor(copy.deepcopy(self._local_tensor.detach(), memo), self._spec,
                      requires_grad=self.requires_grad)
        for k, v in self.__dict__.items():  # _is_param (a Parameter), user attributes
            if k not in ("_local_tensor", "_spec", "_tspec"):
                setattr(new, k, copy.deepcopy(v, memo))
        memo[id(self)] = new
        return new

    def __reduce_ex__(self, protocol: int) -> tuple:
        s = self._spec
        # __dict__: a Parameter's _is_param flag and user attributes, as torch keeps them
        return (_rebuild, (self._local_tensor.detach(), s.mesh, s.placements, s.shape,
                           s.stride, self.requires_grad, dict(self.__dict__)))

    # -- tracing (Note [tracing DTensors] in dtensor.compile) ---------------------------------
    def __tensor_flatten__(self) -> tuple[list[str], tuple]:
        # the binding is part of the guard: a graph bakes in this rank's groups and pieces
        _autograd.local_piece(self)  # a piece in flight is finished and put in place first
        guards = sys.modules.get("torch._guards")  # loaded with dynamo, never before a compile
        if guards is not None and guards.TracingContext.try_get() is not None:
            _compile.one_cut_on_every_rank()  # a compile is tracing this DTensor
        return ["_local_tensor"], (self._spec, _compile.binding(self._spec.mesh),
                                   self.requires_grad)

    @classmethod
    def __metadata_guard__(cls, traced: tuple, given: tuple) -> bool:
        # dynamo's guard on the flatten context: mesh, placements, dtype, binding and
        # requires_grad. The sizes and strides are left to dynamo's own guards on the tensor,
        # which know which dims are dynamic (Note [symbolic sizes] in dtensor.symbolic): an
        # equality of specs would recompile at every new sequence length
        (spec, binding, grad), (other, other_binding, other_grad) = traced, given
        return (binding == other_binding and grad == other_grad and spec.mesh == other.mesh
                and spec.placements == other.placements and spec.dtype == other.dtype
                and len(spec.shape) == len(other.shape))

    @staticmethod
    def __tensor_unflatten__(inner: dict[str, torch.Tensor], ctx: tuple, outer_size: Any,
                             outer_stride: Any) -> DTensor:
        spec, _binding, requires_grad = ctx
        spec = _traced_spec(spec, outer_size, outer_stride)
        return DTensor(inner["_local_tensor"], spec, requires_grad=requires_grad)

    def _stable_hash_for_caching(self) -> str:
        # AOTAutograd's cache key for this input: what the guard compares (Note [tracing
        # DTensors]), so no rank and no other binding reuses an entry
        key = repr((self._spec, _compile.binding(self._spec.mesh), self.requires_grad))
        return hashlib.blake2b(key.encode(), digest_size=16).hexdigest()

    def __coerce_tangent_metadata__(self) -> DTensor:
        # Note [tangents] in dtensor.compile: a Partial gradient is only a promise of a sum
        spec = self._spec
        if not spec.has_partial:
            return self
        return self.redistribute(spec.mesh, replicate_partials(spec.placements))

    def __coerce_same_metadata_as_tangent__(self, ctx: tuple,
                                            expected_type: type | None = None) -> DTensor | None:
        if expected_type is not None:
            return None  # a DTensor cannot become another subclass
        spec = ctx[0]
        return self.redistribute(spec.mesh, spec.placements)

    # aten-level dispatch does all the work; the Python-level hook would only re-wrap results
    __torch_function__ = torch._C._disabled_torch_function_impl

    # Note [fast path] in dtensor.dispatch; compiled when built: bound below the class
    __torch_dispatch__ = classmethod(torch_dispatch)

    def pin(self, pinned: bool = True) -> DTensor:
        """Pin this DTensor's placements: ops must pick a strategy that keeps them, or raise
        listing the feasible alternatives, instead of moving it implicitly. Returns self."""
        self._pinned = pinned
        return self

    # -- public API (names follow torch.distributed.tensor) -------------------------------
    @property
    def placements(self) -> tuple[Placement, ...]:
        return self._spec.placements

    @property
    def device_mesh(self) -> DeviceMesh:
        return self._spec.mesh

    @staticmethod
    def from_local(local_tensor: torch.Tensor, device_mesh: DeviceMesh | None = None,
                   placements: Sequence[Placement] | None = None, *, run_check: bool = False,
                   shape: Sequence[int] | None = None,
                   stride: Sequence[int] | None = None) -> DTensor:
        """Wrap each rank's ``local_tensor`` as its piece of a global tensor.

        Without ``shape``, the global shape assumes even shards (local size x mesh size along
        sharded dims); pass ``shape`` or ``run_check=True`` (which gathers every rank's local
        shape, derives the exact global shape, and checks that every piece fits it) for
        uneven shards.
        """
        if isinstance(local_tensor, DTensor):
            raise LocalTensorTypeError(
                "DTensor.from_local takes this rank's piece as a plain tensor, got a DTensor "
                f"with placements {local_tensor.placements}: use redistribute() to change its "
                "placements, or to_local() first")
        refuse_torch_dtensor(local_tensor, "DTensor.from_local")
        mesh = resolve_mesh(_compile.real_mesh(device_mesh), "DTensor.from_local")
        if placements is not None and any(type(p) is Shard and p.sizes == MEASURED
                                          for p in placements):
            placements = measured_sizes(local_tensor, mesh, placements)
        placements = normalize_placements(
            placements if placements is not None else [Replicate()] * mesh.ndim,
            local_tensor.dim(), mesh.ndim, shape=local_tensor.shape)
        if mesh.get_coordinate() is None:
            # not a member: it holds nothing and takes part in no check (as in torch)
            global_shape = (sizes(shape) if shape is not None
                            else _even_global_shape(local_tensor.shape, mesh, placements))
            spec = DTensorSpec(mesh, placements, global_shape,
                               tuple(stride) if stride is not None
                               else contiguous_strides(global_shape), local_tensor.dtype)
            return _autograd.FromLocal.apply(local_tensor.new_empty(0), spec, DTensor)
        if run_check:
            if shape is None and any(type(p) is Shard and type(p.sizes) is tuple
                                     and p.block is None for p in placements):
                shape = _even_global_shape(local_tensor.shape, mesh, placements)  # as given
            global_shape = check_local_shapes(local_tensor, mesh, placements, shape)
        elif shape is not None:
            global_shape = sizes(shape)
        else:
            global_shape = _even_global_shape(local_tensor.shape, mesh, placements)
        if has_split_rule(placements) and not run_check:  # run_check compared every piece
            check_layout(global_shape, mesh.shape, placements)
            want = local_shape(global_shape, mesh.shape, placements, mesh.get_coordinate())
            if tuple(local_tensor.shape) != want:
                raise PlacementError(
                    f"DTensor.from_local: this rank's piece has shape "
                    f"{tuple(local_tensor.shape)}, but {fmt_placements(placements)} of a "
                    f"{global_shape} tensor gives mesh coordinate {mesh.get_coordinate()} "
                    f"a {want} piece")
        strides = (tuple(stride) if stride is not None
                   else strides_like(local_tensor, global_shape))
        spec = DTensorSpec(mesh, placements, global_shape, strides, local_tensor.dtype)
        return _autograd.FromLocal.apply(local_tensor, spec, DTensor)

    def to_local(self, *, grad_placements: Sequence[Placement] | None = None) -> torch.Tensor:
        """This rank's piece; differentiable (the gradient arrives in ``grad_placements``,
        by default this DTensor's placements).

        Of the result of ``redistribute(..., async_op=True)`` not used yet, it is an
        ``AsyncCollectiveTensor``, as torch's is: its collective is still in flight, the
        first op on it waits, and its ``wait()`` gives the plain tensor (Note [async
        redistribute] in dtensor/comm/handles.py)."""
        gp = None
        if grad_placements is not None:  # checked now, not when a backward finds it wrong
            gp = normalize_placements(grad_placements, self.dim(), self._spec.mesh.ndim,
                                      shape=self.shape)
        if not torch.is_grad_enabled():
            return self._local_tensor
        return _autograd.ToLocal.apply(self, gp)

    def redistribute(self, device_mesh: DeviceMesh | None = None,
                     placements: Sequence[Placement] | None = None, *,
                     async_op: bool = False, forward_dtype: torch.dtype | None = None,
                     backward_dtype: torch.dtype | None = None) -> DTensor:
        """The same global tensor in new placements, moved with the least communication.

        ``forward_dtype`` casts before the forward collectives (the result has that dtype);
        ``backward_dtype`` casts the gradient before the backward ones (it returns in this
        DTensor's dtype).

        With ``async_op=True`` it returns as soon as the last collective is issued, and the
        wait happens where the result is first used: any op on it, ``to_local()``'s result's
        first op, ``full_tensor()``, another redistribute, printing, pickling, a backward.
        Work done in between overlaps the collective. A collective that fails raises an
        ``AsyncCollectiveError`` at that first use. Only the forward is asynchronous; the
        backward's collectives run synchronously (Note [async redistribute] in
        dtensor/comm/handles.py).

        >>> import torch, simpg
        >>> from dtensor import init_device_mesh, distribute_tensor, Shard, Replicate
        >>> def body():
        ...     mesh = init_device_mesh("cpu", (2,))
        ...     x = distribute_tensor(torch.arange(4.0), mesh, [Shard(0)])
        ...     y = x.redistribute(mesh, [Replicate()], async_op=True)  # the gather is issued
        ...     z = torch.ones(3) * 2  # local work meanwhile
        ...     return (y + 1).to_local().tolist()  # the first use waits
        >>> simpg.run(body, 2)[0]
        [1.0, 2.0, 3.0, 4.0]
        """
        mesh = self._spec.mesh
        if (device_mesh is None or device_mesh is mesh) and placements is not None \
                and forward_dtype is None and backward_dtype is None:  # the common call
            try:
                target = _normalized(tuple(placements), self.dim(), mesh.ndim)
            except (PlacementError, TypeError):  # said again with the shape (or unhashable)
                target = normalize_placements(placements, self.dim(), mesh.ndim,
                                              shape=self.shape)
            try:
                return _autograd.Redistribute.apply(self, target, async_op, None, None)
            except PlacementError as e:  # sizes that do not cut: at the caller's line
                raise type(e)(str(e)) from None
        mesh = _compile.real_mesh(device_mesh) if device_mesh is not None else mesh
        refuse_torch_mesh(mesh, "DTensor.redistribute")
        if placements is None:
            raise PlacementError("redistribute needs placements, one per mesh dim")
        if mesh != self._spec.mesh:  # Note [cross-mesh moves]
            from dtensor.redistribute.cross_mesh import move_to_mesh
            target = normalize_placements(placements, self.dim(), mesh.ndim, shape=self.shape)
            return move_to_mesh(self, mesh, target)
        for name, dt in (("forward_dtype", forward_dtype), ("backward_dtype", backward_dtype)):
            if dt is not None and not isinstance(dt, torch.dtype):
                raise TypeError(f"redistribute: {name} must be a torch.dtype (e.g. "
                                f"torch.bfloat16), got {dt!r}")
        target = normalize_placements(placements, self.dim(), mesh.ndim, shape=self.shape)
        try:
            return _autograd.Redistribute.apply(self, target, async_op, forward_dtype,
                                                backward_dtype)
        except PlacementError as e:  # sizes that do not cut: at the caller's line
            raise type(e)(str(e)) from None

    def full_tensor(self, *, grad_placements: Sequence[Placement] | None = None) -> torch.Tensor:
        """The whole global tensor on every rank (all_gather / all_reduce as needed)."""
        replicated = self.redistribute(placements=[Replicate()] * self._spec.mesh.ndim)
        return replicated.to_local(grad_placements=grad_placements)


@functools.lru_cache(maxsize=1024)
def _normalized(placements: tuple, ndim: int, mesh_ndim: int) -> tuple[Placement, ...]:
    """normalize_placements for the calls that repeat (a redistribute in every step)."""
    return normalize_placements(placements, ndim, mesh_ndim)


class LocalTensorTypeError(TypeError, RuntimeError):
    """``from_local`` given a DTensor: a ``RuntimeError`` too, as torch's is (Note [torch's
    error types] in dtensor/__init__.py)."""


def _rebuild(local: torch.Tensor, mesh: DeviceMesh, placements: tuple[Placement, ...],
             shape: tuple[int, ...], stride: tuple[int, ...], requires_grad: bool,
             attributes: dict[str, Any] | None = None) -> DTensor:
    """Unpickle a DTensor: its piece under its spec, as a leaf. ``torch.load`` with
    ``weights_only`` may call it with any loadable values, so it checks every argument's type
    first (Note [weights_only loading] in dtensor/__init__.py)."""
    if not (isinstance(local, torch.Tensor) and not isinstance(local, DTensor)
            and isinstance(mesh, DeviceMesh) and type(requires_grad) is bool
            and all(_is_int_tuple(v) for v in (shape, stride)) and len(shape) == len(stride)
            and isinstance(placements, (tuple, list))):
        raise TypeError(
            "cannot rebuild a DTensor: expected (plain tensor, DeviceMesh, placements, "
            "shape, stride of equal length, requires_grad), got "
            f"({', '.join(type(a).__name__ for a in (local, mesh, placements, shape, stride))}, "
            f"{requires_grad!r})")
    attributes = {} if attributes is None else attributes
    if not isinstance(attributes, dict) or any(
            not isinstance(k, str) or k.startswith("__") or k in DTensor.__slots__
            for k in attributes):
        raise TypeError(f"cannot rebuild a DTensor with attributes {attributes!r}: expected "
                        "a dict of plain attribute names")
    placements = normalize_placements(placements, len(shape), mesh.ndim, shape=shape)
    spec = DTensorSpec(mesh, placements, tuple(shape), tuple(stride), local.dtype)
    out = DTensor(local, spec, requires_grad=requires_grad)
    for k, v in attributes.items():
        setattr(out, k, v)
    return out


def _is_int_tuple(v: object) -> bool:
    return isinstance(v, (tuple, list)) and all(type(n) is int for n in v)


def _traced_spec(spec: DTensorSpec, outer_size: Any, outer_stride: Any) -> DTensorSpec:
    """The spec a traced DTensor is rebuilt with: its sizes as the tracer gives them, ints
    or SymInts (Note [symbolic sizes] in dtensor.symbolic)."""
    size, stride = tuple(outer_size), tuple(outer_stride)
    # compared with ints, a SymInt would be guarded to them; and a traced spec's SymInts must
    # not outlive their trace (a compiled graph's outputs are rebuilt from this context)
    if sizes_symbolic(size + stride) or sizes_symbolic(spec.shape + spec.stride):
        return DTensorSpec(spec.mesh, spec.placements, size, stride, spec.dtype)
    if size == spec.shape and stride == spec.stride:
        return spec
    return DTensorSpec(spec.mesh, spec.placements, size, stride, spec.dtype)


def strides_like(local: torch.Tensor, shape: Sequence[int]) -> tuple[int, ...]:
    """Contiguous strides for ``shape`` with the dims in the order of ``local``'s strides
    (outermost first), as torch derives a DTensor's stride from its piece: a piece built
    transposed gives a transposed global layout."""
    # ordered at the hints: a comparison of symbolic strides would guard them
    order = sorted(range(local.dim()), key=lambda d: (-hint(local.stride(d)), d))
    out = [0] * len(shape)
    acc = 1
    for d in reversed(order):
        out[d] = acc
        size = shape[d]
        acc *= torch.sym_max(size, 1) if isinstance(size, torch.SymInt) else max(int(size), 1)
    return tuple(out)


def _even_global_shape(local: Sequence[int], mesh: DeviceMesh,
                       placements: Sequence[Placement]) -> tuple[int, ...]:
    """The global shape if every piece were this rank's size, except where explicit split
    sizes say the extent (innermost mesh dim first: each undoes one level of nesting)."""
    shape = list(local)
    for mesh_dim in reversed(range(len(placements))):
        p = placements[mesh_dim]
        if isinstance(p, Shard):
            shape[p.dim] = (_runs_extent(p, shape[p.dim], mesh, mesh_dim) if p.block
                            else sum(p.sizes) if type(p.sizes) is tuple
                            else shape[p.dim] * mesh.size(mesh_dim))
    return tuple(shape)


def _runs_extent(p: Shard, local: int, mesh: DeviceMesh, mesh_dim: int) -> int:
    """A block shard's extent from this rank's piece: its part of each run, times the runs
    (Note [block shards] in dtensor/layout.py); every rank's part alike where unknown."""
    coord = mesh.get_coordinate()
    n = mesh.size(mesh_dim)
    try:
        lo, hi = split_bounds(p.block, n, coord[mesh_dim] if coord else 0, p.sizes)
    except PlacementError:
        return local * n
    return local // (hi - lo) * p.block if hi > lo else 0


def make_dtensor(local: torch.Tensor, mesh: DeviceMesh, placements: Sequence[Placement],
                 global_shape: Sequence[int], *, requires_grad: bool = False) -> DTensor:
    """A leaf DTensor from this rank's piece (no autograd edge)."""
    shape = sizes(global_shape)
    spec = DTensorSpec(mesh, tuple(placements), shape, contiguous_strides(shape), local.dtype)
    expected = spec.local_shape()
    if tuple(local.shape) != expected:
        raise ValueError(f"local piece has shape {tuple(local.shape)}, expected {expected} for "
                         f"{spec} at mesh coordinate {mesh.get_coordinate()}")
    return DTensor(local, spec, requires_grad=requires_grad)


# Note [native fast path] in dtensor.dispatch.native: the compiled entry, when built, falls
# back on torch_dispatch for every call it does not take
DTensor.__torch_dispatch__ = classmethod(bind(DTensor))  # type: ignore

# torch's optimizers and clip_grad_norm_ take their foreach path (one kernel, and for us one
# sharding decision and one collective per list) only for the types listed here
if DTensor not in _foreach_utils._foreach_supported_types:
    _foreach_utils._foreach_supported_types.append(DTensor)

__all__ = ["DTensor", "make_dtensor"]
_compile.when_dynamo_loads(lambda: torch.compiler.allow_in_graph(DTensor.from_local))
