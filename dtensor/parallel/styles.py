"""Tensor- and sequence-parallel module styles, with the names and signatures of
``torch.distributed.tensor.parallel``.

A style does two things to the module it is applied to: it replaces the parameters by
DTensors on a 1-d (tensor-parallel) mesh, and it hooks the forward so that inputs arrive in
the layout the sharded computation needs and outputs leave in the layout the caller asked
for. Everything in between is ordinary sharding propagation.

Note [activations stay global]
With ``use_local_output=False`` the module returns a DTensor, so the code that follows sees
global shapes (``view(bsz, seqlen, n_heads, head_dim)``) and stays right whatever the
sharding: 6 heads over 4 ranks still compute exactly (propagation moves what does not line
up). ``use_local_output=True`` returns this rank's piece, as torch does, for code written
against local shapes.

Note [grads keep the parameter's placements]
A replicated parameter used on sharded activations (a norm's weight under sequence
parallelism) gets a Partial(sum) gradient from propagation: each rank holds its sequence
chunk's contribution. A hook after gradient accumulation reduces it to the parameter's own
placements, so ``param.grad`` always lays out like ``param`` and an optimizer never mixes
the two.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Sequence

import torch
from torch import nn

from dtensor import comm
from dtensor.api import distribute_tensor
from dtensor.mesh import DeviceMesh
from dtensor.parallel.errors import (AlreadyParallelizedError, ParallelStyleError,
                                     StyleLayoutsError, UnsupportedModuleError)
from dtensor.placements import (Placement, PlacementError, Replicate, Shard,
                                normalize_placements)
from dtensor.tensor import DTensor

Layout = Placement | None


class ParallelStyle(ABC):
    """A way to parallelize one module over a 1-d mesh; apply with ``parallelize_module``.

    A style of one's own implements ``_apply(module, device_mesh)`` and returns the module:

    >>> import simpg
    >>> from torch import nn
    >>> from dtensor import Replicate, init_device_mesh
    >>> from dtensor.parallel import parallelize_module
    >>> class ReplicateWeights(ParallelStyle):
    ...     def _apply(self, module, device_mesh):
    ...         for name, _ in list(module.named_parameters(recurse=False)):
    ...             distribute_parameter(module, name, device_mesh, [Replicate()],
    ...                              self.src_data_rank)
    ...         return module
    >>> def body():
    ...     model = parallelize_module(nn.Linear(4, 4), init_device_mesh("cpu", (2,)),
    ...                                ReplicateWeights())
    ...     return str(model.weight.placements[0])
    >>> simpg.run(body, 2)
    ['R', 'R']
    """

    src_data_rank: int | None = 0  # where parameters are read from (None: every rank's own)

    @abstractmethod
    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module: ...

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if k != "src_data_rank")
        return f"{type(self).__name__}({fields})"


# -- shared pieces ---------------------------------------------------------------------------
def check_tp_mesh(style: object, mesh: DeviceMesh) -> None:
    if not isinstance(mesh, DeviceMesh):
        raise ParallelStyleError(f"{type(style).__name__}: device_mesh must be a dtensor "
                                 f"DeviceMesh, got {type(mesh).__name__}")
    if mesh.ndim != 1:
        raise ParallelStyleError(
            f"{type(style).__name__} shards over one mesh dim, but got the {mesh.ndim}-d "
            f"{mesh!r}: pass the tensor-parallel sub-mesh, e.g. mesh['tp']")


def _grad_like_param(param: torch.Tensor) -> None:
    """Note [grads keep the parameter's placements]."""
    grad = param.grad
    if isinstance(grad, DTensor) and isinstance(param, DTensor) \
            and grad.placements != param.placements:
        param.grad = grad.redistribute(param.device_mesh, param.placements)


def distribute_parameter(module: nn.Module, name: str, mesh: DeviceMesh,
                         placements: Sequence[Placement], src_data_rank: int | None) -> None:
    """Replace ``module.<name>`` by a DTensor parameter in ``placements`` (no-op if None)."""
    param = module._parameters.get(name)
    if param is None:
        return
    if isinstance(param, DTensor):
        raise AlreadyParallelizedError(
            f"{type(module).__name__}.{name} is already a DTensor on {param.device_mesh!r} "
            f"with {param.placements}: a module can be parallelized once per mesh")
    dt = distribute_tensor(param.detach(), mesh, placements, src_data_rank=src_data_rank)
    new = nn.Parameter(dt, requires_grad=param.requires_grad)
    if new.requires_grad:
        new.register_post_accumulate_grad_hook(_grad_like_param)
    module.register_parameter(name, new)


def to_layout(x: Any, mesh: DeviceMesh, layout: Layout, desired: Layout, *,
              what: str, global_size: int | None = None, async_op: bool = True) -> Any:
    """``x`` as a DTensor on ``mesh`` in ``desired`` (plain tensors are taken to be in
    ``layout``, DTensors are moved from wherever they are). None layouts leave ``x`` alone.
    The move is left in flight unless ``async_op`` is False (Note [styles move
    asynchronously]).

    A plain tensor in a Shard layout is one rank's piece of a dim whose global size is
    ``global_size`` when the caller knows it (a Linear's in_features), else the sum of the
    pieces' sizes, gathered (Note [uneven local inputs])."""
    if layout is None or not isinstance(x, torch.Tensor):
        return x
    if isinstance(x, DTensor):
        if x.device_mesh is not mesh and x.device_mesh != mesh:
            raise ParallelStyleError(f"{what}: got a DTensor on {x.device_mesh!r}, expected one "
                                     f"on {mesh!r} (or a plain tensor in {layout})")
        dt = x
    else:
        dt = _from_local_piece(x, mesh, layout, global_size)
    target = desired if desired is not None else layout
    try:
        placements = _one_placement(target, dt.dim())
    except PlacementError:  # again, for a message that names the shape
        normalize_placements([target], dt.dim(), 1, shape=dt.shape)
        raise
    if dt.placements != placements:
        # the tensor method, not Redistribute.apply: dynamo inlines hooks, and puts the
        # method in a graph as it is (Note [from_local in a graph] in dtensor/compile.py);
        # (Note [styles move asynchronously])
        dt = dt.redistribute(mesh, placements, async_op=async_op)
    return dt


# Note [styles move asynchronously]
# As torch's ColwiseParallel, RowwiseParallel and SequenceParallel do, their moves are issued
# with async_op=True (Note [async redistribute] in dtensor/comm/handles.py): the hook returns
# with the collective in flight and the wait happens at the first op on the result. That op
# may be far: a module's output goes back to the caller (a row-wise projection's all_reduce overlaps
# whatever runs before the residual add; with use_local_output the local piece stays in
# flight too). PrepareModuleInput moves asynchronously too, where torch's waits: it issues
# the collectives of all its inputs before any is waited, and a DTensor input (the default,
# use_local_output=False) is of the same type either way. PrepareModuleOutput waits, as
# torch's does: its default local output is then a plain tensor, as torch's. Results are the
# same as with synchronous moves, bit for bit: the same collectives run on the same pieces.


def _one_placement(target: Placement, ndim: int) -> tuple[Placement, ...]:
    """``target`` as a 1-d mesh's placements for an ``ndim``-d tensor (a hook's per-call
    normalization, looked up). A dict, not functools.lru_cache: hooks run under Dynamo too,
    which warns about lru_cache wrappers it traces through. Traced, it is not looked up:
    dynamo would guard on the dict's keys, placements it holds as opaque values."""
    if torch.compiler.is_compiling():
        return normalize_placements([target], ndim, 1)
    key = (target, ndim)
    found = _ONE_PLACEMENT.get(key)
    if found is None:
        found = _ONE_PLACEMENT[key] = normalize_placements([target], ndim, 1)
    return found


_ONE_PLACEMENT: dict[tuple[Placement, int], tuple[Placement, ...]] = {}


# Note [uneven local inputs]
# from_local without a shape assumes even pieces (local size x mesh size), which is wrong for
# 14 features over 4 ranks (4, 4, 4, 2). torch's styles make that assumption silently; ours
# take the global size from the module when it is known and otherwise gather the one size
# along the sharded dim (a collective of one int per rank).
def _from_local_piece(x: torch.Tensor, mesh: DeviceMesh, layout: Placement,
                      global_size: int | None) -> DTensor:
    if not isinstance(layout, Shard):
        return DTensor.from_local(x, mesh, [layout], run_check=False)
    dim = layout.dim % max(x.dim(), 1)
    if global_size is None:
        mine = torch.tensor([x.shape[dim]], dtype=torch.int64, device=x.device)
        sizes = comm.all_gather(mine, [(1,)] * mesh.size(), mesh.get_group(0))
        global_size = int(sum(int(t) for t in sizes))
    shape = list(x.shape)
    shape[dim] = global_size
    return DTensor.from_local(x, mesh, [layout], run_check=False, shape=shape)


def finish(x: Any, use_local_output: bool) -> Any:
    return x.to_local() if use_local_output and isinstance(x, DTensor) else x


def _kind(module: nn.Module, style: object) -> str:
    if isinstance(module, nn.Linear):
        return "linear"
    if isinstance(module, nn.Embedding):
        return "embedding"
    raise UnsupportedModuleError(
        f"{type(style).__name__} shards nn.Linear or nn.Embedding weights, but was applied to "
        f"{type(module).__name__}: use SequenceParallel for norms and dropout, "
        f"PrepareModuleInput/PrepareModuleOutput for containers, or distribute_module with a "
        f"partition_fn for custom modules")


# -- column- and row-wise --------------------------------------------------------------------
class _WeightSharding(ParallelStyle):
    """What ColwiseParallel and RowwiseParallel share: shard the weight (by module kind),
    move a Linear's input to the layout its local product needs, move the output to
    ``output_layouts``. Subclasses are data: the class attributes below."""

    weight: dict[str, Placement]  # module kind -> the weight's placement
    bias: Placement
    needed_input: Placement  # what a Linear's input must be for the local product
    default_input: Placement
    default_output: Placement

    def __init__(self, *, input_layouts: Placement | None = None,
                 output_layouts: Placement | None = None, use_local_output: bool = True) -> None:
        self.input_layouts = input_layouts or self.default_input
        self.output_layouts = output_layouts or self.default_output
        self.use_local_output = use_local_output

    def _input_size(self, module: nn.Module) -> int | None:
        """The global size of the input's sharded dim, when the module knows it."""
        return None

    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        check_tp_mesh(self, device_mesh)
        kind = _kind(module, self)
        distribute_parameter(module, "weight", device_mesh, [self.weight[kind]],
                             self.src_data_rank)
        distribute_parameter(module, "bias", device_mesh, [self.bias], self.src_data_rank)
        what = f"{type(self).__name__}({type(module).__name__})"
        if kind == "linear":  # an embedding looks up integer ids: they stay plain
            size = self._input_size(module)
            module.register_forward_pre_hook(lambda _m, inputs: (to_layout(
                inputs[0], device_mesh, self.input_layouts, self.needed_input,
                what=f"{what} input", global_size=size),) + tuple(inputs[1:]))
        module.register_forward_hook(lambda _m, _inputs, out: finish(to_layout(
            out, device_mesh, self.output_layouts, self.output_layouts,
            what=f"{what} output"), self.use_local_output))
        return module


class ColwiseParallel(_WeightSharding):
    """Shard a Linear's output features (weight ``Shard(0)``, bias ``Shard(0)``) or an
    Embedding's embedding dim (weight ``Shard(1)``). Input: ``input_layouts`` (default
    Replicate), moved to Replicate; output: sharded on the last dim, moved to
    ``output_layouts`` (default ``Shard(-1)``), returned local if ``use_local_output``.

    >>> import torch, simpg
    >>> from torch import nn
    >>> from dtensor import init_device_mesh
    >>> from dtensor.parallel import parallelize_module
    >>> def body():
    ...     mesh = init_device_mesh("cpu", (2,))
    ...     m = parallelize_module(nn.Linear(4, 6), mesh, ColwiseParallel())
    ...     y = m(torch.ones(1, 4))  # this rank's 3 of the 6 output features
    ...     return m.weight.placements, tuple(m.weight.to_local().shape), tuple(y.shape)
    >>> simpg.run(body, 2)[0]
    ((Shard(dim=0),), (3, 4), (1, 3))
    """


    weight = {"linear": Shard(0), "embedding": Shard(1)}
    bias = Shard(0)
    needed_input = default_input = Replicate()
    default_output = Shard(-1)


class RowwiseParallel(_WeightSharding):
    """Shard a Linear's input features (weight ``Shard(1)``, bias Replicate) or an
    Embedding's rows (the vocabulary, weight ``Shard(0)``). Input: ``input_layouts`` (default
    ``Shard(-1)``; Replicate ids for an embedding); output: the partial sums reduced to
    ``output_layouts`` (default Replicate; ``Shard(1)`` is a reduce-scatter for sequence
    parallelism), returned local if ``use_local_output``.

    >>> import torch, simpg
    >>> from torch import nn
    >>> from dtensor import init_device_mesh
    >>> from dtensor.parallel import parallelize_module
    >>> def body():
    ...     mesh = init_device_mesh("cpu", (2,))
    ...     m = parallelize_module(nn.Linear(4, 6), mesh, RowwiseParallel())
    ...     x = torch.ones(1, 2)  # this rank's 2 of the 4 input features
    ...     return m.weight.placements, m.bias.placements, tuple(m(x).shape)
    >>> simpg.run(body, 2)[0]
    ((Shard(dim=1),), (Replicate(),), (1, 6))
    """


    weight = {"linear": Shard(1), "embedding": Shard(0)}
    bias = Replicate()
    needed_input = default_input = Shard(-1)
    default_output = Replicate()

    def _input_size(self, module: nn.Module) -> int | None:
        return module.in_features  # Note [uneven local inputs]


class SequenceParallel(ParallelStyle):
    """Run a module that acts on each sequence position alone (a norm, dropout) on the local
    chunk of the sequence: parameters replicated, input moved to ``Shard(sequence_dim)``
    (a plain input is taken to be that shard), output left sharded.

    >>> import torch, simpg
    >>> from torch import nn
    >>> from dtensor import init_device_mesh
    >>> from dtensor.parallel import parallelize_module
    >>> def body():
    ...     mesh = init_device_mesh("cpu", (2,))
    ...     m = parallelize_module(nn.LayerNorm(4), mesh, SequenceParallel())
    ...     y = m(torch.ones(1, 3, 4))  # this rank's 3 positions of the sequence
    ...     return m.weight.placements, y.placements, tuple(y.shape)
    >>> simpg.run(body, 2)[0]
    ((Replicate(),), (Shard(dim=1),), (1, 6, 4))
    """

    def __init__(self, *, sequence_dim: int = 1, use_local_output: bool = False) -> None:
        self.sequence_dim = sequence_dim
        self.use_local_output = use_local_output

    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        check_tp_mesh(self, device_mesh)
        for sub in module.modules():
            for pname in list(sub._parameters):
                distribute_parameter(sub, pname, device_mesh, [Replicate()], self.src_data_rank)
        layout = Shard(self.sequence_dim)
        name = type(module).__name__
        def shard_input(_m: nn.Module, inputs: tuple) -> tuple:
            if not inputs or not isinstance(inputs[0], torch.Tensor):
                got = type(inputs[0]).__name__ if inputs else "no input"
                raise ParallelStyleError(f"SequenceParallel({name}): expected its first input "
                                         f"to be a torch.Tensor or DTensor, got {got}")
            return (to_layout(inputs[0], device_mesh, layout, layout,
                              what=f"SequenceParallel({name}) input"),) + tuple(inputs[1:])

        module.register_forward_pre_hook(shard_input)
        module.register_forward_hook(
            lambda _m, _inputs, out: finish(out, self.use_local_output))
        return module


# -- preparing inputs and outputs ------------------------------------------------------------
def _as_tuple(x: Any) -> tuple | None:
    if x is None:
        return None
    return tuple(x) if isinstance(x, (list, tuple)) else (x,)


def _check_same_length(style: str, a: tuple | None, b: tuple | None, names: str) -> None:
    if a is None or b is None:
        if (a is None) != (b is None):
            raise StyleLayoutsError(f"{style}: {names} must be given together")
        return
    if len(a) != len(b):
        raise StyleLayoutsError(f"{style}: {names} have different lengths ({len(a)} and "
                                f"{len(b)}): expected one desired layout per layout")


class PrepareModuleInput(ParallelStyle):
    """Move a module's inputs (positional by ``input_layouts`` → ``desired_input_layouts``,
    keyword by the ``*_kwarg_layouts`` dicts) before its forward. A None layout leaves that
    input alone; plain tensors are taken to be in the stated layout.

    >>> import torch, simpg
    >>> from torch import nn
    >>> from dtensor import init_device_mesh
    >>> from dtensor.parallel import parallelize_module
    >>> def body():
    ...     style = PrepareModuleInput(input_layouts=Shard(0), desired_input_layouts=Replicate())
    ...     m = parallelize_module(nn.Identity(), init_device_mesh("cpu", (2,)), style)
    ...     y = m(torch.ones(2, 3))  # this rank's 2 rows: gathered to all 4
    ...     return y.placements, tuple(y.to_local().shape)
    >>> simpg.run(body, 2)[0]
    ((Replicate(),), (4, 3))
    """

    def __init__(self, *, input_layouts: Layout | Sequence[Layout] = None,
                 desired_input_layouts: Layout | Sequence[Layout] = None,
                 input_kwarg_layouts: dict[str, Placement] | None = None,
                 desired_input_kwarg_layouts: dict[str, Placement] | None = None,
                 use_local_output: bool = False) -> None:
        self.input_layouts = _as_tuple(input_layouts)
        self.desired_input_layouts = _as_tuple(desired_input_layouts)
        self.input_kwarg_layouts = dict(input_kwarg_layouts or {})
        self.desired_input_kwarg_layouts = dict(desired_input_kwarg_layouts or {})
        self.use_local_output = use_local_output
        _check_same_length("PrepareModuleInput", self.input_layouts,
                           self.desired_input_layouts,
                           "input_layouts and desired_input_layouts")
        missing = set(self.input_kwarg_layouts) ^ set(self.desired_input_kwarg_layouts)
        if missing:
            raise StyleLayoutsError(f"PrepareModuleInput: kwargs {sorted(missing)} need both an "
                                    "input_kwarg_layout and a desired_input_kwarg_layout")

    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        check_tp_mesh(self, device_mesh)
        module.register_forward_pre_hook(
            lambda _m, args, kwargs: self._prepare(args, kwargs, device_mesh, module),
            with_kwargs=True)
        return module

    def _prepare(self, args: tuple, kwargs: dict, mesh: DeviceMesh,
                 module: nn.Module) -> tuple[tuple, dict]:
        name = type(module).__name__
        if self.input_layouts is not None:
            if len(args) < len(self.input_layouts):
                raise ParallelStyleError(
                    f"PrepareModuleInput({name}): {len(self.input_layouts)} input_layouts for "
                    f"{len(args)} positional inputs: expected at most one layout per input")
            moved = [finish(to_layout(a, mesh, lay, want, what=f"{name} input {i}"),
                            self.use_local_output)
                     for i, (a, lay, want) in enumerate(
                         zip(args, self.input_layouts, self.desired_input_layouts or ()))]
            args = tuple(moved) + tuple(args[len(moved):])
        if self.input_kwarg_layouts:
            kwargs = dict(kwargs)
            for k, lay in self.input_kwarg_layouts.items():
                if k in kwargs:
                    kwargs[k] = finish(to_layout(kwargs[k], mesh, lay,
                                                 self.desired_input_kwarg_layouts[k],
                                                 what=f"{name} input {k!r}"),
                                       self.use_local_output)
        return args, kwargs


class PrepareModuleOutput(ParallelStyle):
    """Move a module's outputs from ``output_layouts`` to ``desired_output_layouts`` after its
    forward (returned local if ``use_local_output``).

    >>> import torch, simpg
    >>> from torch import nn
    >>> from dtensor import init_device_mesh
    >>> from dtensor.parallel import parallelize_module
    >>> def body():
    ...     style = PrepareModuleOutput(output_layouts=Shard(0), desired_output_layouts=Replicate())
    ...     m = parallelize_module(nn.Identity(), init_device_mesh("cpu", (2,)), style)
    ...     return tuple(m(torch.ones(2, 3)).shape)  # each rank's 2 rows, gathered
    >>> simpg.run(body, 2)
    [(4, 3), (4, 3)]
    """

    def __init__(self, *, output_layouts: Layout | Sequence[Layout],
                 desired_output_layouts: Layout | Sequence[Layout],
                 use_local_output: bool = True) -> None:
        self.output_layouts = _as_tuple(output_layouts)
        self.desired_output_layouts = _as_tuple(desired_output_layouts)
        self.use_local_output = use_local_output
        _check_same_length("PrepareModuleOutput", self.output_layouts,
                           self.desired_output_layouts,
                           "output_layouts and desired_output_layouts")

    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        check_tp_mesh(self, device_mesh)
        module.register_forward_hook(
            lambda _m, _inputs, out: self._prepare(out, device_mesh, module))
        return module

    def _prepare(self, out: Any, mesh: DeviceMesh, module: nn.Module) -> Any:
        single = not isinstance(out, tuple)
        outs = (out,) if single else out
        layouts = self.output_layouts or ()
        if len(outs) != len(layouts):
            raise ParallelStyleError(
                f"PrepareModuleOutput({type(module).__name__}): {len(layouts)} output_layouts "
                f"for {len(outs)} outputs: expected one layout per output")
        moved = tuple(finish(to_layout(o, mesh, lay, want,
                                       what=f"{type(module).__name__} output {i}",
                                       async_op=False),  # Note [styles move asynchronously]
                             self.use_local_output)
                      for i, (o, lay, want) in enumerate(
                          zip(outs, layouts, self.desired_output_layouts or ())))
        return moved[0] if single else moved


class PrepareModuleInputOutput(ParallelStyle):
    """``PrepareModuleInput`` and ``PrepareModuleOutput`` on one module.

    >>> import torch, simpg
    >>> from torch import nn
    >>> from dtensor import init_device_mesh
    >>> from dtensor.parallel import parallelize_module
    >>> def body():
    ...     style = PrepareModuleInputOutput(
    ...         input_layouts=Shard(0), desired_input_layouts=Replicate(),
    ...         output_layouts=Replicate(), desired_output_layouts=Shard(1))
    ...     m = parallelize_module(nn.Identity(), init_device_mesh("cpu", (2,)), style)
    ...     return tuple(m(torch.ones(2, 4)).shape)  # rows gathered, then columns split
    >>> simpg.run(body, 2)
    [(4, 2), (4, 2)]
    """

    def __init__(self, *, input_layouts: Layout | Sequence[Layout] = None,
                 desired_input_layouts: Layout | Sequence[Layout] = None,
                 input_kwarg_layouts: dict[str, Placement] | None = None,
                 desired_input_kwarg_layouts: dict[str, Placement] | None = None,
                 use_local_input: bool = False,
                 output_layouts: Layout | Sequence[Layout],
                 desired_output_layouts: Layout | Sequence[Layout],
                 use_local_output: bool = True) -> None:
        self.prepare_input = PrepareModuleInput(
            input_layouts=input_layouts, desired_input_layouts=desired_input_layouts,
            input_kwarg_layouts=input_kwarg_layouts,
            desired_input_kwarg_layouts=desired_input_kwarg_layouts,
            use_local_output=use_local_input)
        self.prepare_output = PrepareModuleOutput(
            output_layouts=output_layouts, desired_output_layouts=desired_output_layouts,
            use_local_output=use_local_output)

    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        self.prepare_input._apply(module, device_mesh)
        self.prepare_output._apply(module, device_mesh)
        return module
