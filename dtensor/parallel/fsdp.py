"""Data parallelism on DTensors: ``fully_shard`` (parameters sharded over the data-parallel
mesh dim, gathered around each use) and ``replicate`` (parameters replicated, gradients
all-reduced).

Note [fully_shard layout]
A parameter of a fully sharded module is one DTensor over the mesh that the data-parallel
mesh and the parameter's own (tensor-parallel) mesh were both cut from: ``Shard(d)`` on the
dp dim, the parameter's placements on the others, e.g. ``[Shard(0), Shard(1)]`` on a
``dp x tp`` mesh for a row-wise weight. That is all it stores, and what the optimizer steps:
parameter, gradient and optimizer state each take about 1/dp of the replicated bytes.
``d`` is the first dim that tensor parallelism leaves whole (0 unless tp shards dim 0, so a
column-wise weight is ``[Shard(1), Shard(0)]``): then each tp rank's piece is cut by dp on
its own, and the gather is one all-gather over dp. ``[Shard(0), Shard(0)]`` would cut dim 0
by dp first and by tp inside each dp chunk, so a tp rank's piece is spread over dp ranks'
chunks and gathering it needs an all-to-all over the whole mesh first (torch's FSDP2 keeps
dim 0 and adds a strided placement to express the other nesting). Only a 1-d parameter
sharded by tp (a column-wise bias) nests, with the extra exchange.

Note [gather and reduce-scatter as one autograd function]
Before a module's forward, each of its parameters is redistributed to Replicate on the dp
dim (an all-gather) and handed to the forward as a DTensor on the tp mesh (or a plain tensor
without tp): the module computes exactly as without data parallelism, on this rank's batch.
The gather is an autograd function whose backward takes the gradient, a sum over this rank's
batch, as ``Partial(avg)`` over dp and redistributes it to the stored placements: a
reduce-scatter that averages, which equals the gradient of the global mean loss when every
rank holds an equal share of the batch. The gradient lands in ``param.grad`` by ordinary
accumulation, already sharded. ``replicate`` is the same function with Replicate on dp: the
gather is free and the backward an all-reduce.

Note [free after forward]
After the forward, the gathered parameters are freed (their storage resized to zero) and the
module's outputs get a hook that gathers them again into the same storage just before the
module's backward needs them; autograd's saved views of them are valid again. After the
backward the gathered copies are freed once more. ``reshard_after_forward=False`` keeps them
from forward to backward instead (less communication, more memory).
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
from torch import nn
from torch.utils import _pytree as pytree

from dtensor.mesh import DeviceMesh
from dtensor.parallel.errors import FullyShardError
from dtensor.parallel.fsdp_comm import Pieces, gather_all, pieces_of, reduce_scatter_all
from dtensor.placements import Partial, Placement, Replicate, Shard
from dtensor.redistribute import redistribute_local_tensor
from dtensor.spec import DTensorSpec, contiguous_strides
from dtensor.tensor import DTensor


@dataclass
class _Managed:
    """One parameter of a data-parallel module."""

    owner: nn.Module
    name: str
    param: nn.Parameter  # the stored DTensor (Note [fully_shard layout])
    mesh: DeviceMesh  # the mesh it is stored on
    dp_dim: int  # which dim of ``mesh`` is data parallel
    compute_mesh: DeviceMesh | None  # the tp mesh the forward sees, None for plain tensors
    pieces: Pieces | None = None  # Note [one collective per module]
    gathered: torch.Tensor | None = None  # this rank's piece of the gathered parameter
    owns_gathered: bool = False  # the gathered piece has storage of its own (may be freed)


@dataclass
class _State:
    module: nn.Module
    mode: str  # "shard" or "replicate"
    reshard_after_forward: bool
    params: list[_Managed] = field(default_factory=list)
    handles: list[Any] = field(default_factory=list)
    is_root: bool | None = None  # decided at the first forward (Note [free after forward])


def fully_shard(module: nn.Module, mesh: DeviceMesh, *,
                reshard_after_forward: bool = True) -> nn.Module:
    """Shard ``module``'s parameters (those not already managed by a fully sharded or
    replicated submodule) over the 1-d data-parallel ``mesh``, gather them around the
    module's forward and backward, and reduce-scatter their gradients (averaged over the dp
    ranks). Apply it to each block, then to the root. Parameters that are DTensors on a
    tensor-parallel mesh cut from the same mesh as ``mesh`` keep that sharding too
    (Note [fully_shard layout]). Returns ``module``.

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
    return _data_parallel(module, mesh, "shard", reshard_after_forward)


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
    return _data_parallel(module, mesh, "replicate", False)


def data_parallel_state(module: nn.Module) -> _State | None:
    return module.__dict__.get("_dtensor_dp_state")


def _data_parallel(module: nn.Module, mesh: DeviceMesh, mode: str,
                   reshard_after_forward: bool) -> nn.Module:
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
    if mesh.ndim != 1:
        raise FullyShardError(f"{what} takes the 1-d data-parallel mesh, got the {mesh.ndim}-d "
                              f"{mesh!r}: pass e.g. mesh['dp']")
    state = _State(module, mode, reshard_after_forward)
    for owner, name, param in _own_parameters(module):
        state.params.append(_shard_parameter(owner, name, param, mesh, mode, what))
    module.__dict__["_dtensor_dp_state"] = state
    state.handles.append(module.register_forward_pre_hook(lambda _m, _i: _unshard(state)))
    state.handles.append(module.register_forward_hook(
        lambda _m, _i, out: _after_forward(state, out)))
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


def _shard_parameter(owner: nn.Module, name: str, param: nn.Parameter, dp_mesh: DeviceMesh,
                     mode: str, what: str) -> _Managed:
    dp_placement: Placement = Replicate()
    if mode == "shard" and param.dim() > 0:  # a scalar has nothing to shard
        dp_placement = Shard(_dp_shard_dim(param))
    if not isinstance(param, DTensor):
        # on the mesh dp was cut from, replicated on its other dims: every parameter of a
        # model then lives on one mesh, so an optimizer's foreach ops can take them together
        mesh, dp_dims = dp_mesh.root_mesh()
        dp_dim, compute_mesh = dp_dims[0], None
        placements: tuple[Placement, ...] = tuple(
            dp_placement if m == dp_dim else Replicate() for m in range(mesh.ndim))
        local = redistribute_local_tensor(param.detach(), mesh, (Replicate(),) * mesh.ndim,
                                          placements, tuple(param.shape))
    else:
        compute_mesh = param.device_mesh
        mesh, dp_dim, placements = _combined_layout(param, dp_mesh, dp_placement, owner, name,
                                                    what)
        source = tuple(param.placements[_other_dims(mesh, dp_dim).index(m)]
                       if m != dp_dim else Replicate() for m in range(mesh.ndim))
        local = redistribute_local_tensor(param._local_tensor.detach(), mesh, source,
                                          placements, tuple(param.shape))
    shape = tuple(param.shape)
    spec = DTensorSpec(mesh, placements, shape, contiguous_strides(shape), param.dtype)
    stored = nn.Parameter(DTensor(local.contiguous(), spec, requires_grad=False),
                          requires_grad=param.requires_grad)
    owner._parameters[name] = stored
    managed = _Managed(owner, name, stored, mesh, dp_dim, compute_mesh)
    managed.pieces = pieces_of(managed)
    return managed


def _dp_shard_dim(param: torch.Tensor) -> int:
    """Note [fully_shard layout]: the first dim tensor parallelism leaves whole."""
    taken = {p.dim for p in param.placements if isinstance(p, Shard)} \
        if isinstance(param, DTensor) else set()
    return next((d for d in range(param.dim()) if d not in taken), 0)


def _other_dims(mesh: DeviceMesh, dp_dim: int) -> list[int]:
    return [m for m in range(mesh.ndim) if m != dp_dim]


def _combined_layout(param: DTensor, dp_mesh: DeviceMesh, dp_placement: Placement,
                     owner: nn.Module, name: str,
                     what: str) -> tuple[DeviceMesh, int, tuple[Placement, ...]]:
    """The mesh both meshes were cut from, the dp dim on it, and the combined placements."""
    tp_mesh = param.device_mesh
    where = f"{what}: parameter {type(owner).__name__}.{name} is a DTensor on {tp_mesh!r}"
    root, tp_dims = tp_mesh.root_mesh()
    dp_root, dp_dims = dp_mesh.root_mesh()
    if dp_root != root:
        raise FullyShardError(f"{where}, which is not cut from the same mesh as the "
                              f"data-parallel {dp_mesh!r}: slice both from one mesh, e.g. "
                              f"mesh['dp'] and mesh['tp'] of init_device_mesh(..., "
                              f"mesh_dim_names=('dp', 'tp'))")
    if set(dp_dims) & set(tp_dims) or len(dp_dims) + len(tp_dims) != root.ndim:
        raise FullyShardError(f"{where}: expected the dp mesh and the parameter's mesh to be "
                              f"complementary dims of {root!r}")
    if list(tp_dims) != sorted(tp_dims):
        raise FullyShardError(f"{where}: its mesh dims are permuted relative to {root!r}")
    dp_dim = dp_dims[0]
    placements: list[Placement] = []
    others = iter(param.placements)
    for m in range(root.ndim):
        placements.append(dp_placement if m == dp_dim else next(others))
    if any(isinstance(p, Partial) for p in placements):
        raise FullyShardError(f"{where} with Partial placements: expected a parameter "
                              f"holding values, not pending sums")
    return root, dp_dim, tuple(placements)


# -- gather / reduce-scatter -----------------------------------------------------------------
class _GatherModule(torch.autograd.Function):
    """Note [gather and reduce-scatter as one autograd function], for all of a module's
    parameters at once (Note [one collective per module]): autograd calls the backward once,
    when the gradients of every gathered parameter the module used are complete."""

    @staticmethod
    def forward(ctx: Any, state: _State, *stored: DTensor) -> tuple:  # type: ignore[override]
        ctx.state = state
        ctx.set_materialize_grads(False)  # an unused parameter gets no gradient, not zeros
        with torch.no_grad():
            gathered = gather_all(state.params)
        outs = []
        for m, local in zip(state.params, gathered):
            m.gathered = local
            # only a piece with storage of its own may be freed: not the stored shard itself
            # (replicate, or a dp mesh of one rank). Decided now: freed storage has no address
            mine = m.param._local_tensor
            m.owns_gathered = (local.untyped_storage().data_ptr()
                               != mine.untyped_storage().data_ptr()
                               or (local.numel() > 0 and mine.numel() == 0))
            outs.append(_as_compute(local, m))
        return tuple(outs)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple:  # type: ignore[override]
        state: _State = ctx.state
        with torch.no_grad():
            locals_ = reduce_scatter_all(state.params, grads)
        out: list[DTensor | None] = [None]
        for m, local in zip(state.params, locals_):
            out.append(None if local is None else
                       DTensor(local.contiguous(), m.param._spec, requires_grad=False))
        if state.reshard_after_forward:
            for m in state.params:
                _free(m)
        return tuple(out)


def _as_compute(local: torch.Tensor, m: _Managed) -> torch.Tensor:
    if m.compute_mesh is None:
        # a fresh tensor is returned as is; the stored shard itself (nothing to gather) as a
        # view, so autograd does not take over the parameter's own storage
        return local if m.owns_gathered else local.view_as(local)
    spec = m.param._spec
    tp = tuple(spec.placements[i] for i in _other_dims(m.mesh, m.dp_dim))
    tp_spec = DTensorSpec(m.compute_mesh, tp, spec.shape, spec.stride, spec.dtype)
    return DTensor(local, tp_spec, requires_grad=False)  # autograd marks the output


def _free(m: _Managed) -> None:
    if m.owns_gathered and m.gathered is not None:
        m.gathered.untyped_storage().resize_(0)


def _regather(state: _State) -> None:
    """Gather the freed parameters again, into the same storage (Note [free after forward])."""
    freed = [m for m in state.params if m.owns_gathered and m.gathered is not None
             and m.gathered.untyped_storage().size() == 0]
    if not freed:
        return
    with torch.no_grad():
        fresh = gather_all(freed)
    for m, new in zip(freed, fresh):
        g = m.gathered
        assert g is not None
        storage = g.untyped_storage()
        storage.resize_(new.untyped_storage().nbytes())
        # write through an alias with its own version counter: autograd's saved views of the
        # gathered parameter must not look modified in place (they hold the same values again)
        alias = torch.empty(0, dtype=g.dtype, device=g.device)
        alias.set_(storage, g.storage_offset(), g.shape, g.stride())
        with torch.no_grad():
            alias.copy_(new)


# -- hooks -----------------------------------------------------------------------------------
_forwards_open: contextvars.ContextVar[int] = contextvars.ContextVar("dtensor_fsdp_open",
                                                                     default=0)


def _unshard(state: _State) -> None:
    if state.is_root is None:  # the outermost data-parallel module of the first forward
        state.is_root = _forwards_open.get() == 0
    _forwards_open.set(_forwards_open.get() + 1)
    outs = _GatherModule.apply(state, *[m.param for m in state.params])
    for m, gathered in zip(state.params, outs):
        m.owner._parameters[m.name] = gathered


def _after_forward(state: _State, out: Any) -> Any:
    _forwards_open.set(max(_forwards_open.get() - 1, 0))
    for m in state.params:
        m.owner._parameters[m.name] = m.param
    if not state.reshard_after_forward:
        return out
    if state.is_root and torch.is_grad_enabled():
        return out  # the backward starts with the root: freeing now means gathering again
    for m in state.params:
        _free(m)
    outputs = [t for t in pytree.tree_leaves(out)
               if isinstance(t, torch.Tensor) and t.requires_grad]
    if outputs and torch.is_grad_enabled():
        torch.autograd.graph.register_multi_grad_hook(
            outputs, lambda _grads: _regather(state), mode="any")
    return out


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
