"""Data parallelism on DTensors: ``fully_shard`` (parameters sharded over the data-parallel
mesh dim, gathered around each use) and ``replicate`` (parameters replicated, gradients
all-reduced).

Note [fully_shard layout]
A parameter of a fully sharded module is one DTensor over the mesh that the data-parallel
mesh and the parameter's own (tensor-parallel) mesh were both cut from, with the dp dim moved
last (Note [nested dp inside tp]): ``Shard(0)`` on the dp dim, the parameter's placements on
the others, e.g. ``[Shard(1), Shard(0)]`` on ``mesh['tp', 'dp']`` for a row-wise weight
(``Shard(1)`` on tp). That is all it stores, and what the optimizer steps:
parameter, gradient and optimizer state each take about 1/dp of the replicated bytes.
dp cuts dim 0 (torch's FSDP2 does too): each dp rank's piece is then a block of rows of this
rank's gathered piece, contiguous in its memory, so the all-gather's buffer is the gathered
piece and the reduce-scatter's input is the gradient itself, no reordering copy either way
(Note [copy-out in one kernel] in fsdp_comm). When tp shards dim 0 too (a column-wise weight,
a vocab-sharded embedding, a column-wise bias), dp cuts inside each tp piece: Note [nested dp
inside tp]. (Cutting the first dim tp leaves whole instead, dim 1 of a column-wise weight,
also gathers over dp alone, but its pieces are column blocks: one reordering copy more each
way, a gradient-sized buffer held at the reduce-scatter.)

Note [nested dp inside tp]
A parameter whose dim 0 tp shards (``Shard(0)`` on tp) has dp cut dim 0 too. On the mesh
``(dp, tp)`` that is ``[Shard(0), Shard(0)]``: dp cuts first, so tp rank t's piece is
spread over several tp ranks' stores and no all-gather over dp alone rebuilds it. We store it
instead on the same ranks with the dp dim last, the sub-mesh ``mesh['tp', 'dp']`` (dims
moved, no new group: its dim groups are the root's), as ``[Shard(0), Shard(0)]`` there: tp
cuts first, dp cuts each tp piece, which is torch's ``[_StridedShard(0, split_factor=tp),
Shard(0)]`` on ``(dp, tp)`` said with placements we have. Every dp peer's piece then lies
inside this rank's tp piece, a block of its rows, so the parameter rides the module's one
all-gather and one reduce-scatter (Note [one collective per module] groups by process group,
not by mesh object). Every other parameter is stored on that mesh too (a row-wise weight as
``[Shard(1), Shard(0)]``, a plain one as ``[Replicate(), Shard(0)]``: the same pieces as on
``(dp, tp)``), so a model's parameters share one mesh, and ops over all of them (the
optimizer's foreach ops, ``clip_grad_norm_``'s norms and their one all-reduce per mesh dim)
see one group, as before. The stored DTensor is an ordinary one on that mesh:
``full_tensor`` and checkpoints see the true values. It needs the mesh's dim names to slice
by, which any mesh a tp mesh and a dp mesh were sliced from has; without them a parameter
keeps ``[Shard(0), Shard(0)]`` on the root and is gathered on its own.

Note [HSDP]
Given a 2-d mesh, ``fully_shard`` shards over its second dim and replicates over its first
(torch's hybrid sharding): each parameter is ``[Replicate(), Shard(d)]`` there (tp dims
aside), gathered over the shard dim alone, its gradient reduce-scattered over the shard dim
and the 1/shard piece all-reduced (averaged) across the replicas. A replica group holds a
whole copy of the model, so the bytes that cross the (slower) replica links are 1/shard of a
replicated all-reduce's.

Note [meta-device init]
A model too large for one device is built on ``meta`` (shapes, no storage), parallelized,
then given storage with ``to_empty(device=...)`` and initialised (``reset_parameters``). Nothing
on meta holds values, so nothing is communicated: ``distribute_tensor`` skips its broadcast
and ``fully_shard`` makes each rank's piece as an empty meta tensor of the shape the layout
gives, so ``to_empty`` allocates only that piece. The hooks read the parameters from their
modules at each forward, where ``to_empty`` put the new ones. Random fills of sharded
DTensors equal one device's for the same seed (Note [sharded random ops]), drawn a chunk of
rows at a time (Note [fills in chunks]): no rank holds a whole parameter.

Note [parameters of a pipeline stage]
A stage of a pipeline lives on one coordinate of the mesh's pp dim; the other stages hold
other parameters, so no parameter is laid out over pp (Replicate there would claim the other
stages hold copies, and a checkpoint would write only one stage's). The mesh a fully sharded
parameter lives on is therefore the one dp and tp were cut from, less a dim named
``PIPELINE_DIM`` ("pp", torchtitan's name) that neither of them uses: on a
``("pp", "dp", "tp")`` mesh, ``mesh["dp", "tp"]``.

The hooks (gather before forward, free after, gather again before backward, reduce-scatter
in the backward, checkpointed recomputation, accumulation) are in ``fsdp_hooks``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from torch import nn

from dtensor.layout import box_shape, check_layout, local_box
from dtensor.mesh import DeviceMesh
from dtensor.parallel.errors import FullyShardError
from dtensor.parallel.fsdp_comm import GradPiece, PendingGather, Pieces, pieces_of
from dtensor.parallel.fsdp_hooks import (Run, after_forward, backward_outside, before_forward,
                                         reduce_accumulated)
from dtensor.parallel.mixed_precision import MixedPrecisionPolicy
from dtensor.placements import Partial, Placement, PlacementError, Replicate, Shard
from dtensor.redistribute import redistribute_local_tensor
from dtensor.spec import DTensorSpec, contiguous_strides
from dtensor.tensor import DTensor

PIPELINE_DIM = "pp"  # Note [parameters of a pipeline stage]


@dataclass
class _Managed:
    """One parameter of a data-parallel module."""

    owner: nn.Module
    name: str
    param: nn.Parameter  # the stored DTensor (Note [fully_shard layout])
    mesh: DeviceMesh  # the mesh it is stored on
    dp_dim: int  # which dim of ``mesh`` dp shards (or replicates, for ``replicate``)
    replicate_dim: int | None  # Note [HSDP]: the dim of ``mesh`` across replicas, if any
    compute_mesh: DeviceMesh | None  # the tp mesh the forward sees, None for plain tensors
    pieces: Pieces | None = None  # Note [one collective per module]
    gathered: torch.Tensor | None = None  # this rank's piece of the gathered parameter
    owns_gathered: bool = False  # the gathered piece has storage of its own (may be freed)
    accumulated: GradPiece | None = None  # Note [gradient accumulation]

    @property
    def dp_dims(self) -> tuple[int, ...]:
        return (self.dp_dim,) if self.replicate_dim is None else (self.replicate_dim,
                                                                  self.dp_dim)

    @property
    def tp_dims(self) -> list[int]:
        return [m for m in range(self.mesh.ndim) if m not in self.dp_dims]


@dataclass(eq=False)  # compared by identity: states sit in lists of each other
class _State:
    module: nn.Module
    mode: str  # "shard" or "replicate"
    reshard_after_forward: bool
    mp: MixedPrecisionPolicy = field(default_factory=MixedPrecisionPolicy)
    params: list[_Managed] = field(default_factory=list)
    handles: list[Any] = field(default_factory=list)
    is_root: bool | None = None  # decided at the first forward (Note [free after forward])
    in_backward: bool = False  # Note [recomputed forward]
    open_graphs: int = 0  # forwards whose backward has not run: Note [forwards before backwards]
    requires_gradient_sync: bool = True  # Note [gradient accumulation]
    # what to prefetch (Note [prefetch])
    forward_prefetch: list[_State] | None = None  # None: the next module of the last forward
    next_in_forward: _State | None = None  # the module whose forward started after this one's
    backward_prefetch: list[_State] | None = None  # None: the previous module in forward order
    prefetched: PendingGather | None = None  # the next forward's gather, issued early
    # Note [gradient accumulation]: _GatherModule's outputs, joined to the forward's outputs
    joining: list[torch.Tensor] | None = None
    regathering: PendingGather | None = None  # the backward's regather, issued early
    run: Run | None = None  # shared by the modules of the last forward


class FSDPModule:
    """The methods ``fully_shard`` and ``replicate`` add to a module, under torch's names: the
    module's class becomes a subclass of this and of its own class (as torch's FSDP2 does;
    the new class keeps the old name, so reprs and module paths read as before).

    >>> import torch, simpg
    >>> from torch import nn
    >>> from dtensor import init_device_mesh
    >>> def body():
    ...     m = fully_shard(nn.Linear(4, 3), init_device_mesh("cpu", (2,)))
    ...     m.set_requires_gradient_sync(False)  # accumulate: no reduce-scatter
    ...     m(torch.ones(2, 4)).sum().backward()
    ...     return isinstance(m, FSDPModule), m.weight.grad
    >>> simpg.run(body, 2)
    [(True, None), (True, None)]
    """

    def set_requires_gradient_sync(self, requires_gradient_sync: bool, *,
                                   recurse: bool = True) -> None:
        """Whether the backward reduces gradients over dp (Note [gradient accumulation]);
        with ``recurse``, for every data-parallel module inside this one too."""
        if not isinstance(requires_gradient_sync, bool):
            raise FullyShardError(f"set_requires_gradient_sync: expected a bool, got "
                                  f"{requires_gradient_sync!r}")
        assert isinstance(self, nn.Module)
        for module in (self.modules() if recurse else [self]):
            state = data_parallel_state(module)
            if state is not None:
                state.requires_gradient_sync = requires_gradient_sync

    def reduce_accumulated_gradients(self, *, recurse: bool = True) -> None:
        """Reduce over dp, now, the gradients the backwards summed while gradient sync was
        off, into each parameter's ``.grad`` (what the next backward with sync on would do at
        its end); with ``recurse``, for every data-parallel module inside this one too. For a
        caller whose backward runs in pieces (the zero-bubble pipeline schedules run each in
        an input and a weight half: Note [zero bubble] in dtensor/pipelining/schedules.py)."""
        assert isinstance(self, nn.Module)
        for module in (self.modules() if recurse else [self]):
            state = data_parallel_state(module)
            if state is not None:
                reduce_accumulated(state)

    def backward_outside(self) -> Callable[[], None]:
        """Treat what runs from now until the returned function is called as part of this
        module's backward (not recursive): a forward of the module in between (a checkpointed
        region recomputed) is a recomputation, and the gathered parameters are freed at the
        end. For a caller that runs part of a backward outside autograd's pass through the
        module (a pipeline's weight half: Note [a weight half inside fully_shard] in
        dtensor/parallel/fsdp_hooks.py)."""
        assert isinstance(self, nn.Module)
        state = data_parallel_state(self)
        return (lambda: None) if state is None else backward_outside(state)

    def set_modules_to_forward_prefetch(self, modules: list[FSDPModule]) -> None:
        """Issue the gathers of ``modules`` right after this module's own, before its forward
        computes (Note [prefetch]); torch's name. Each prefetched module holds its gathered
        parameters from then until its own forward frees them. Replaces the default, which
        prefetches the module whose forward came next in the last forward (``[]``: none)."""
        self._state_of_self("set_modules_to_forward_prefetch").forward_prefetch = \
            _states_of(modules, "set_modules_to_forward_prefetch")

    def set_modules_to_backward_prefetch(self, modules: list[FSDPModule]) -> None:
        """Issue the backward regathers of ``modules`` right after this module's own, before
        its backward computes (Note [prefetch]); torch's name. Replaces the default, which
        prefetches the module that ran just before this one in the forward."""
        self._state_of_self("set_modules_to_backward_prefetch").backward_prefetch = \
            _states_of(modules, "set_modules_to_backward_prefetch")

    def _state_of_self(self, what: str) -> _State:
        assert isinstance(self, nn.Module)
        state = data_parallel_state(self)
        assert state is not None, f"{what}: an FSDPModule without its state"
        return state


def _states_of(modules: Any, what: str) -> list[_State]:
    if isinstance(modules, nn.Module) or not isinstance(modules, (list, tuple)):
        raise FullyShardError(f"{what}: expected a list of modules passed to fully_shard, got "
                              f"{type(modules).__name__}")
    states = []
    for module in modules:
        state = data_parallel_state(module) if isinstance(module, nn.Module) else None
        if state is None:
            raise FullyShardError(f"{what}: expected modules passed to fully_shard or "
                                  f"replicate, got {type(module).__name__}, which is not")
        states.append(state)
    return states


_fsdp_classes: dict[type, type] = {}
_fsdp_classes_lock = threading.Lock()


def _become_fsdp_module(module: nn.Module) -> None:
    cls = type(module)
    if issubclass(cls, FSDPModule):
        return
    with _fsdp_classes_lock:  # one class per base, shared by every rank's thread
        new = _fsdp_classes.get(cls)
        if new is None:
            new = type(cls.__name__, (FSDPModule, cls), {"__qualname__": cls.__qualname__,
                                                         "__module__": cls.__module__})
            _fsdp_classes[cls] = new
    module.__class__ = new


def fully_shard(module: nn.Module, mesh: DeviceMesh, *, reshard_after_forward: bool = True,
                shard_placement_fn: Callable[[nn.Parameter], Shard | None] | None = None,
                mp_policy: MixedPrecisionPolicy = MixedPrecisionPolicy()) -> nn.Module:
    """Shard ``module``'s parameters (those not already managed by a fully sharded or
    replicated submodule) over the data-parallel ``mesh``, gather them around the module's
    forward and backward, and reduce-scatter their gradients (averaged over the dp ranks).
    Apply it to each block, then to the root. A 2-d ``mesh`` is (replicate, shard): hybrid
    sharding (Note [HSDP]). Parameters that are DTensors on a tensor-parallel mesh cut from
    the same mesh as ``mesh`` keep that sharding too (Note [fully_shard layout]).
    ``mp_policy`` sets the dtypes (Note [mixed precision in fully_shard]).
    ``shard_placement_fn(param)``, as torch's, picks a parameter's dp placement (None: the
    default ``Shard(0)``); it may return a split rule, ``Shard(0, sizes="balanced")`` or
    explicit sizes per dp rank (Note [split rules] in dtensor/layout.py), on parameters that
    are not also tensor-parallel. Returns ``module``, now also an :class:`FSDPModule`.

    >>> import torch, simpg
    >>> from torch import nn
    >>> from dtensor import init_device_mesh
    >>> def body():
    ...     m = fully_shard(nn.Linear(4, 3), init_device_mesh("cpu", (2,)))
    ...     m(torch.ones(2, 4)).sum().backward()
    ...     w = m.weight
    ...     return w.placements, tuple(w.to_local().shape), tuple(w.grad.to_local().shape)
    >>> simpg.run(body, 2)
    [((Shard(dim=0),), (2, 4), (2, 4)), ((Shard(dim=0),), (1, 4), (1, 4))]
    """
    return _data_parallel(module, mesh, "shard", reshard_after_forward, mp_policy,
                          shard_placement_fn)


def replicate(module: nn.Module, mesh: DeviceMesh) -> nn.Module:
    """Replicated data parallelism: ``module``'s parameters stay whole on every dp rank and
    their gradients are all-reduced (averaged) in the backward. Composes with tensor
    parallelism like ``fully_shard``.

    >>> import torch, torch.distributed as dist, simpg
    >>> from torch import nn
    >>> from dtensor import init_device_mesh
    >>> def body():  # rank r's input is all r: the gradients average to 0.5
    ...     m = replicate(nn.Linear(4, 3), init_device_mesh("cpu", (2,)))
    ...     m(torch.full((1, 4), float(dist.get_rank()))).sum().backward()
    ...     return m.weight.placements, m.weight.grad.to_local()[0].tolist()
    >>> simpg.run(body, 2)
    [((Replicate(),), [0.5, 0.5, 0.5, 0.5]), ((Replicate(),), [0.5, 0.5, 0.5, 0.5])]
    """
    return _data_parallel(module, mesh, "replicate", False, MixedPrecisionPolicy())


def data_parallel_state(module: nn.Module) -> _State | None:
    return module.__dict__.get("_dtensor_dp_state")


def _data_parallel(module: nn.Module, mesh: DeviceMesh, mode: str, reshard_after_forward: bool,
                   mp_policy: MixedPrecisionPolicy,
                   shard_placement_fn: Callable[[nn.Parameter], Shard | None] | None = None
                   ) -> nn.Module:
    what = "fully_shard" if mode == "shard" else "replicate"
    if not isinstance(module, nn.Module):
        raise TypeError(f"{what}: expected an nn.Module, got {type(module).__name__}")
    existing = data_parallel_state(module)
    if existing is not None:
        raise FullyShardError(f"{what}({type(module).__name__}): the module is already "
                              f"{'fully sharded' if existing.mode == 'shard' else 'replicated'}"
                              f"; apply fully_shard/replicate once per module")
    if not isinstance(mesh, DeviceMesh):
        raise FullyShardError(f"{what}: mesh must be a dtensor DeviceMesh, got "
                              f"{type(mesh).__name__}")
    takes = "1-d data-parallel mesh" + (" or a 2-d (replicate, shard) one (HSDP)"
                                        if mode == "shard" else "")
    if mesh.ndim > (2 if mode == "shard" else 1):
        raise FullyShardError(f"{what} takes the {takes}, got the {mesh.ndim}-d {mesh!r}: pass "
                              f"e.g. mesh['dp']")
    if not isinstance(mp_policy, MixedPrecisionPolicy):
        raise FullyShardError(f"{what}: mp_policy must be a MixedPrecisionPolicy, got "
                              f"{type(mp_policy).__name__}")
    state = _State(module, mode, reshard_after_forward, mp_policy)
    for owner, name, param in _own_parameters(module):
        dp_shard = shard_placement_fn(param) if shard_placement_fn is not None else None
        state.params.append(_shard_parameter(owner, name, param, mesh, mode, what, dp_shard))
    module.__dict__["_dtensor_dp_state"] = state
    _become_fsdp_module(module)
    state.handles.append(module.register_forward_pre_hook(
        lambda _m, args, kwargs: before_forward(state, args, kwargs), with_kwargs=True))
    state.handles.append(module.register_forward_hook(
        lambda _m, _i, out: after_forward(state, out)))
    return module


def _own_parameters(module: nn.Module) -> list[tuple[nn.Module, str, nn.Parameter]]:
    """Parameters of ``module`` not already managed by a data-parallel submodule."""
    found: list[tuple[nn.Module, str, nn.Parameter]] = []
    seen: set[int] = set()

    def visit(m: nn.Module, is_root: bool) -> None:
        if not is_root and data_parallel_state(m) is not None:
            return
        for name, p in m._parameters.items():
            if p is not None and id(p) not in seen:
                seen.add(id(p))
                found.append((m, name, p))
        for child in m.children():
            visit(child, False)

    visit(module, True)
    return found


def _stage_mesh(root: DeviceMesh, dp_dims: tuple[int, ...]
                ) -> tuple[DeviceMesh, tuple[int, ...]]:
    """``root`` less its pipeline dim when dp does not use it, and dp's dims on what is left
    (Note [parameters of a pipeline stage])."""
    names = root.mesh_dim_names
    if names is None or PIPELINE_DIM not in names or names.index(PIPELINE_DIM) in dp_dims:
        return root, dp_dims
    keep = [m for m in range(root.ndim) if names[m] != PIPELINE_DIM]
    return root[tuple(names[m] for m in keep)], tuple(keep.index(m) for m in dp_dims)


def _shard_parameter(owner: nn.Module, name: str, param: nn.Parameter, dp_mesh: DeviceMesh,
                     mode: str, what: str, dp_shard: Shard | None = None) -> _Managed:
    root, dp_dims = _stage_mesh(*dp_mesh.root_mesh())
    dp_placement: Placement = Replicate()
    if mode == "shard" and param.dim() > 0:  # a scalar has nothing to shard
        dp_placement = Shard(0)  # Note [fully_shard layout]
        if dp_shard is not None:
            dp_placement = _chosen_shard(dp_shard, param, dp_mesh, owner, name, what)
    dp_dim = dp_dims[-1]  # the shard dim; Note [HSDP]: replicas on the first of two
    shape = tuple(param.shape)
    if not isinstance(param, DTensor):
        # on the mesh dp was cut from, replicated on its other dims: every parameter of a
        # model then lives on one mesh, so an optimizer's foreach ops can take them together
        mesh, compute_mesh = root, None
        placements: tuple[Placement, ...] = tuple(
            dp_placement if m == dp_dim else Replicate() for m in range(mesh.ndim))
    else:
        compute_mesh = param.device_mesh
        mesh, placements = _combined_layout(param, root, dp_dims, dp_placement, owner, name,
                                            what)
    mesh, placements, dp_dims = _dp_last(mesh, placements, dp_dims)  # Note [nested dp inside tp]
    replicate_dim = dp_dims[0] if len(dp_dims) == 2 else None
    dp_dim = dp_dims[-1]
    tp_dims = [m for m in range(mesh.ndim) if m not in dp_dims]
    source = tuple(param.placements[tp_dims.index(m)]
                   if isinstance(param, DTensor) and m in tp_dims else Replicate()
                   for m in range(mesh.ndim))
    mine = getattr(param, "_local_tensor", param).detach()
    if mine.is_meta:  # Note [meta-device init]: a shape, no values to move
        coord = mesh.get_coordinate()
        piece = (0,) if coord is None else box_shape(local_box(shape, mesh.shape, placements,
                                                               coord))
        local = torch.empty(piece, dtype=param.dtype, device="meta")
    else:
        local = redistribute_local_tensor(mine, mesh, source, placements, shape)
    spec = DTensorSpec(mesh, placements, shape, contiguous_strides(shape), param.dtype)
    stored = nn.Parameter(DTensor(local.contiguous(), spec, requires_grad=False),
                          requires_grad=param.requires_grad)
    owner._parameters[name] = stored
    managed = _Managed(owner, name, stored, mesh, dp_dim, replicate_dim, compute_mesh)
    managed.pieces = pieces_of(managed)
    return managed


def _chosen_shard(chosen: Any, param: nn.Parameter, dp_mesh: DeviceMesh, owner: nn.Module,
                  name: str, what: str) -> Shard:
    """``shard_placement_fn``'s answer for ``param``, checked: a Shard of one of its dims; a
    split rule only on a parameter that is not also tensor-parallel."""
    where = f"{what}: shard_placement_fn for {type(owner).__name__}.{name} {tuple(param.shape)}"
    if not isinstance(chosen, Shard):
        raise FullyShardError(f"{where} returned {chosen!r}: expected a Shard or None")
    if not -param.dim() <= chosen.dim < param.dim():
        raise FullyShardError(f"{where} returned {chosen!r}: expected a dim in "
                              f"[{-param.dim()}, {param.dim() - 1}]")
    chosen = chosen.with_dim(chosen.dim % param.dim())
    if isinstance(param, DTensor) and chosen != Shard(0):
        raise FullyShardError(f"{where} returned {chosen}: a parameter that is also "
                              f"tensor-parallel is cut on dim 0 by chunk's rule (Note "
                              f"[nested dp inside tp])")
    if chosen.block is not None:
        raise FullyShardError(f"{where} returned {chosen!r}: fully_shard cuts each parameter "
                              f"into one box per rank; expected Shard(d) or a split rule "
                              f"without a block")
    if chosen.sizes is not None:
        try:
            check_layout(tuple(param.shape), (dp_mesh.shape[-1],), (chosen,))
        except PlacementError as e:
            raise FullyShardError(f"{where} returned {chosen!r}: {e}") from None
    return chosen


def _combined_layout(param: DTensor, root: DeviceMesh, dp_dims: tuple[int, ...],
                     dp_placement: Placement, owner: nn.Module, name: str,
                     what: str) -> tuple[DeviceMesh, tuple[Placement, ...]]:
    """The combined placements on ``root``, the mesh dp was cut from (less a pipeline dim:
    Note [parameters of a pipeline stage]), where the parameter's own mesh must be cut too."""
    tp_mesh = param.device_mesh
    where = f"{what}: parameter {type(owner).__name__}.{name} is a DTensor on {tp_mesh!r}"
    tp_root, tp_root_dims = tp_mesh.root_mesh()
    dp_root, kept = root.root_mesh()
    if dp_root != tp_root:
        raise FullyShardError(f"{where}, which is not cut from the same mesh as the "
                              f"data-parallel mesh: slice both from one mesh, e.g. "
                              f"mesh['dp'] and mesh['tp'] of init_device_mesh(..., "
                              f"mesh_dim_names=('dp', 'tp'))")
    tp_dims = tuple(kept.index(m) if m in kept else -1 for m in tp_root_dims)
    if -1 in tp_dims:
        raise FullyShardError(f"{where}: a parameter laid out over the pipeline dim "
                              f"{PIPELINE_DIM!r}; expected its mesh without it (Note "
                              f"[parameters of a pipeline stage])")
    if set(dp_dims) & set(tp_dims) or len(dp_dims) + len(tp_dims) != root.ndim:
        raise FullyShardError(f"{where}: expected the dp mesh and the parameter's mesh to be "
                              f"complementary dims of {root!r}")
    if list(tp_dims) != sorted(tp_dims):
        raise FullyShardError(f"{where}: its mesh dims are permuted relative to {root!r}")
    placements: list[Placement] = []
    others = iter(param.placements)
    for m in range(root.ndim):
        placements.append(dp_placement if m == dp_dims[-1] else
                          Replicate() if m in dp_dims else next(others))
    if any(isinstance(p, Partial) for p in placements):
        raise FullyShardError(f"{where} with Partial placements: expected a parameter "
                              f"holding values, not pending sums")
    return root, tuple(placements)


def _dp_last(root: DeviceMesh, placements: tuple[Placement, ...], dp_dims: tuple[int, ...]
             ) -> tuple[DeviceMesh, tuple[Placement, ...], tuple[int, ...]]:
    """Note [nested dp inside tp]: the same placements on ``root`` with the dp shard dim
    moved last, so dp cuts inside each tp piece; ``root`` itself where it already is last or
    the mesh has no names to slice by."""
    dp_dim = dp_dims[-1]
    if root.mesh_dim_names is None or dp_dim == root.ndim - 1:
        return root, placements, dp_dims
    order = [m for m in range(root.ndim) if m != dp_dim] + [dp_dim]
    mesh = root[tuple(root.mesh_dim_names[m] for m in order)]
    return (mesh, tuple(placements[m] for m in order),
            tuple(order.index(m) for m in dp_dims))


def state_bytes(params: Sequence[torch.Tensor], optimizer: torch.optim.Optimizer | None = None
                ) -> dict[str, int]:
    """This rank's bytes of parameters, their gradients and the optimizer's state (of any
    tensor subclass that keeps its piece in ``_local_tensor``, torch's DTensor too).

    >>> import torch, simpg
    >>> from torch import nn
    >>> from dtensor import init_device_mesh
    >>> state_bytes(list(nn.Linear(4, 4, bias=False).parameters()))
    {'parameters': 64, 'gradients': 0, 'optimizer': 0}
    >>> def body():
    ...     m = fully_shard(nn.Linear(4, 4, bias=False), init_device_mesh("cpu", (2,)))
    ...     return state_bytes(list(m.parameters()))["parameters"]
    >>> simpg.run(body, 2)
    [32, 32]
    """

    def local_bytes(t: torch.Tensor) -> int:
        t = getattr(t, "_local_tensor", t)
        return t.numel() * t.element_size()

    out = {"parameters": sum(local_bytes(p) for p in params),
           "gradients": sum(local_bytes(p.grad) for p in params if p.grad is not None),
           "optimizer": 0}
    if optimizer is not None:
        for st in optimizer.state.values():
            out["optimizer"] += sum(local_bytes(v) for v in st.values()
                                    if isinstance(v, torch.Tensor) and v.dim() > 0)
    return out
