"""The general path: a call the fast path does not take (first calls, moved inputs, keywords,
pinned or written-in-place tensors, decompositions, debugging) is described, decided,
its inputs moved, run and wrapped; it records the fast path's entry for next time.
"""

from __future__ import annotations

import dataclasses
import functools
from functools import lru_cache
from typing import Any

import torch
from torch.utils import _pytree as pytree

import dtensor.ops  # noqa: F401  (registers the rules)
from dtensor import debug
from dtensor.comm import collectives
from dtensor.comm.functional import tracing
from dtensor.dispatch import native
from dtensor.redistribute import planner
from dtensor.ops.local_args import localize_shape_args, shape_arg_positions
from dtensor.ops.propagate import Decision, ShardingError, candidates, decide
from dtensor.layout import local_box
from dtensor.mesh import MeshError
from dtensor.dispatch.outside_mesh import meta_call, run_outside
from dtensor.ops.registry import GUARDS, LOCAL_FUNCTIONS, REGISTRY, OpSpec, TensorSpec
from dtensor.placements import Placement, Replicate, has_block, has_split_rule
from dtensor.redistribute import redistribute_local_tensor
from dtensor.spec import DTensorSpec
from dtensor.symbolic import is_symbolic, shape_cache
from dtensor.dispatch.decomposition_table import DECOMPOSITIONS
from dtensor.dispatch.fallback import _fallback
from dtensor.dispatch.plans import (_SCALARS, _dtensor_list, _FastPlan, _int_list, _Plan,
                                    _plans_of, _return_sources, _returns_no_tensor)
from dtensor.dispatch.policy import _check_plain


# Note [inference mode]
# Under torch.inference_mode() the autograd keys are skipped, so an op that is composite
# (CompositeImplicitAutograd: linear, matmul, softmax, layer_norm, einsum, reshape, sdpa...)
# reaches __torch_dispatch__ whole instead of as the ops it is made of. Where we have no rule
# for it, it is decomposed here (func.decompose runs its composite kernel, whose ops come back
# through dispatch), so it keeps its placements and moves what it moves with grad on, not a
# gather. And a view of a normal tensor stays a normal tensor in inference mode: torch shares
# the base's version counter with the view after we return, which an inference tensor refuses
# ("Cannot set version_counter for inference tensor"), so such a view's wrapper is built with
# inference mode off, and the fast paths leave views under inference mode to this path.
@lru_cache(maxsize=4096)
def _composite(func: Any) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(func.name(),
                                                          "CompositeImplicitAutograd")


def _views_a_normal_tensor(func: Any, args: tuple) -> bool:
    """A view op called in inference mode on a DTensor that is not an inference tensor
    (Note [inference mode])."""
    return func.is_view and torch.is_inference_mode_enabled() and any(
        isinstance(a, torch.Tensor) and not a.is_inference() for a in args)


# Note [foreach over meshes]
# A foreach op takes lists whose tensors may live on different meshes (clip_grad_norm_ over a
# model whose parameters sit on a pipeline stage's mesh and a shared one, or on a 1-D and a
# 2-D mesh). Element i of every list goes with element i of the others, so the call splits
# into one per mesh, by the mesh of the first list's DTensors, and the results are put back
# in order. Any other op on DTensors of two meshes raises (moving one is the caller's choice)
# unless those of the other meshes are replicated everywhere over the same ranks: then each
# rank already holds the whole value, and they are taken as replicas on the op's mesh with no
# communication (clip_grad_norm_ stacking the norms of parameters that fully_shard stores on
# a mesh of the same ranks in another dim order).
def _mesh_groups_of_lists(DTensor: type, args: tuple) -> list[list[int]] | None:
    """Positions of the first tensor list's elements grouped by mesh, if it spans several."""
    first = next((a for a in args if type(a) in (list, tuple)
                  and any(isinstance(v, DTensor) for v in a)), None)
    if first is None:
        return None
    home = next(v._spec.mesh for v in first if isinstance(v, DTensor))
    groups: dict[Any, list[int]] = {}
    for i, v in enumerate(first):  # a plain tensor goes with the first mesh (Replicate)
        groups.setdefault(v._spec.mesh if isinstance(v, DTensor) else home, []).append(i)
    return list(groups.values()) if len(groups) > 1 else None


def _replicas_on_the_same_ranks(DTensor: type, tensors: list, mesh: Any) -> bool:
    ranks = set(mesh._flat)
    return all(t._spec.mesh is mesh or (
        set(t._spec.mesh._flat) == ranks and not t.requires_grad
        and all(isinstance(p, Replicate) for p in t._spec.placements))
        for t in tensors if isinstance(t, DTensor))


def _as_replica_on(DTensor: type, d: Any, mesh: Any) -> Any:
    if d._spec.mesh is mesh:
        return d
    s = d._spec
    spec = DTensorSpec(mesh, (Replicate(),) * mesh.ndim, s.shape, s.stride, s.dtype)
    return DTensor(d._local_tensor, spec, requires_grad=False)


def _foreach_by_mesh(func: Any, args: tuple, kwargs: dict, groups: list[list[int]]) -> Any:
    n = len(next(a for a in args if type(a) in (list, tuple)))

    def pick(value: Any, idx: list[int]) -> Any:
        if type(value) in (list, tuple) and len(value) == n:
            return [value[i] for i in idx]
        return value

    results: list[Any] = [None] * n
    returned = False
    for idx in groups:
        out = func(*(pick(a, idx) for a in args), **{k: pick(v, idx) for k, v in kwargs.items()})
        if out is not None:
            returned = True
            for i, o in zip(idx, out):
                results[i] = o
    return results if returned else None


def _describe(DTensor: type, x: Any, tensors: list[torch.Tensor], mesh_ndim: int) -> Any:
    """``x`` with its tensors as specs (the plan cache's key), appended to ``tensors`` in
    order. Not a closure in ``_dispatch``: one calling itself is a reference cycle, which kept
    every op's arguments alive until the cyclic gc ran."""
    if isinstance(x, torch.Tensor):
        tensors.append(x)
        if isinstance(x, DTensor):
            return x._tspec
        return TensorSpec(tuple(x.shape), tuple(x.stride()), x.dtype, (Replicate(),) * mesh_ndim)
    if type(x) is list or type(x) is tuple:
        return tuple(_describe(DTensor, v, tensors, mesh_ndim) for v in x)
    return x


def _dispatch(DTensor: type, func: Any, args: tuple, kwargs: dict,
              fast_key: tuple | None = None) -> Any:
    if _views_a_normal_tensor(func, args):  # Note [inference mode]; not recorded as fast
        with torch.inference_mode(False):
            return _dispatch(DTensor, func, args, kwargs)
    if func._opname.startswith("_foreach_"):
        groups = _mesh_groups_of_lists(DTensor, args)
        if groups is not None:
            return _foreach_by_mesh(func, args, kwargs, groups)
    tensors: list[torch.Tensor] = []
    mesh = _first_dtensor(DTensor, args, kwargs)._spec.mesh
    mesh_ndim = mesh.ndim

    dargs = tuple(_describe(DTensor, a, tensors, mesh_ndim) for a in args)
    dkwargs = tuple((k, _describe(DTensor, v, tensors, mesh_ndim)) for k, v in kwargs.items())
    if mesh._coord is None:  # Note [ranks outside the mesh]
        return run_outside(DTensor, func, args, kwargs, dargs, dkwargs, mesh,
                           _return_sources(func))
    pinned = None
    for t in tensors:
        if isinstance(t, DTensor):
            if t._spec.mesh is not mesh and t._spec.mesh != mesh:
                # replicas of one value on the same ranks: Note [foreach over meshes]
                if _replicas_on_the_same_ranks(DTensor, tensors, mesh):
                    args, kwargs = pytree.tree_map_only(
                        DTensor, lambda d: _as_replica_on(DTensor, d, mesh), (args, kwargs))
                    return _dispatch(DTensor, func, args, kwargs)
                raise MeshError(f"{func}: DTensors on different meshes in one op: {mesh} and "
                                 f"{t._spec.mesh}; move one onto the other's mesh first with "
                                 f"x.redistribute(device_mesh=mesh, placements=...)")
            if t._pinned:
                pinned = frozenset(i for i, u in enumerate(tensors)
                                   if isinstance(u, DTensor) and u._pinned)
    # 2 == 2.0 == True as keys: mul.Scalar(x, 2.0) must not reuse mul.Scalar(x, 2)'s dtype
    kinds = tuple(type(v) for v in args) + tuple(type(v) for v in kwargs.values())
    key = (func, dargs, dkwargs, pinned, kinds)
    plans = _plans_of(mesh)
    symbolic = False
    try:
        plan = plans.get(key)
    except TypeError:  # an argument we cannot key a cache on
        plan = None
        symbolic = is_symbolic(dargs) or is_symbolic(dkwargs)  # Note [symbolic sizes]
        key = None
        plans = {}  # planned afresh each call: a trace runs each op once
    if plan is None:
        if func in REGISTRY and (key is not None or symbolic):
            try:
                plan = _make_plan(func, dargs, dkwargs, mesh, pinned or frozenset())
            except ShardingError as e:
                decompose = DECOMPOSITIONS.get(func)
                if decompose is not None:  # it may handle what no strategy keeps in place
                    out = decompose(func, args, kwargs)
                    if out is not NotImplemented:
                        plans[key] = _Plan(None, (), False, None, False, None,  # type: ignore
                                           decompose)
                        return out
                if not _relocate_written(func, dargs, dkwargs, tensors, mesh, pinned, DTensor):
                    raise ShardingError(f"{e}\n(an in-place target moves only when it is not "
                                        "pinned and no view shares its piece: Note "
                                        "[relocating an in-place target])") from None
                return _dispatch(DTensor, func, args, kwargs)  # the targets moved: again
        if plan is None:
            if func not in REGISTRY and _composite(func):  # Note [inference mode]
                return func.decompose(*args, **kwargs)
            flat, tree = pytree.tree_flatten((args, kwargs))
            return _fallback(DTensor, func, flat, tree,
                             [t for t in tensors if isinstance(t, DTensor)])
        plans[key] = plan
    if plan.decompose is not None:  # Note [decompositions]
        out = plan.decompose(func, args, kwargs)
        if out is not NotImplemented:
            return out
        if plan.decision is None:  # only the decomposition could run it: plan afresh
            del plans[key]
            if _relocate_written(func, dargs, dkwargs, tensors, mesh, pinned, DTensor):
                return _dispatch(DTensor, func, args, kwargs)
            _make_plan(func, dargs, dkwargs, mesh, pinned or frozenset())  # raises
    if _check_plain.get():
        _verify_plain(DTensor, func, tensors, mesh)
    debug.record(plan.decision, tensors)
    out = _run(DTensor, func, args, kwargs, tensors, plan, mesh)
    if fast_key is not None and key is not None and plan.otherwise is None:
        moves = _fast_moves(plan, tensors, args, kwargs, mesh, DTensor)
        if moves is not None:
            _record_fast(func, args, kwargs, plan, out, mesh, fast_key, DTensor, moves)
    return out


# Note [relocating an in-place target]
# An in-place op keeps its target's placements, so a target whose placement admits no strategy
# (digamma_ on a Partial(sum): digamma of a sum is not a sum of digammas) has none. One device
# would just write it; so do we: the target is first redistributed, in place, to the
# placement the cheapest strategy wants, then the op runs as usual. Only a target whose piece
# nothing else shares is moved: a view taken from it earlier holds the old piece and would not
# see the write, so there the ShardingError stands. Pinned targets never move. A piece that
# from_local took from the caller is shared with the caller's plain tensor only: it moves to
# the cheapest placement that keeps its local shape (a Partial reduced to Replicate), written
# into its own storage, so the caller's tensor sees the result as it sees any in-place op.
def _relocate_written(func: Any, dargs: tuple, dkwargs: tuple, tensors: list, mesh: Any,
                      pinned: frozenset[int] | None, DTensor: type) -> bool:
    op = OpSpec(func, dargs, dkwargs, tuple(mesh.spec.shape))
    written = _written(func, op)
    if not written or (pinned and written & pinned):
        return False
    targets = [tensors[i] for i in written]
    if not all(type(t) is DTensor for t in targets):
        return False
    sharers = [_sharers(t._local_tensor) for t in targets]
    # from_local's piece is a view of the caller's tensor: moved in place (its storage kept,
    # so the caller's tensor sees the result, as it sees any in-place op), never replaced
    in_place_only = any(n == 1 and t._local_tensor._base is not None
                        for n, t in zip(sharers, targets))
    movable = not any(n > 1 or (n == 1 and t._local_tensor._base is None)
                      for n, t in zip(sharers, targets))
    # what shares a piece can differ between ranks (a reference some rank still holds): every
    # rank of the mesh moves, or none does, so no rank waits in a collective the others skip.
    # Traced, none does: agreeing would wait on the other ranks inside the trace while they
    # wait on dynamo's compile lock (a deadlock), and a functionalized graph cannot swap an
    # input's piece
    if tracing(targets[0]._local_tensor):
        return False
    if not _on_every_rank(mesh, movable, targets[0]._local_tensor.device):
        return False
    for cand in candidates(op):
        moved = {i: cand.inputs[i] for i in written}
        if in_place_only and any(
                t._spec.with_placements(moved[i]).local_shape() != tuple(t._local_tensor.shape)
                for i, t in zip(written, targets)):
            continue
        specs = [dataclasses.replace(t, placements=moved[i]) if i in moved else t
                 for i, t in enumerate(op.tensors())]
        try:
            decide(_respec(op, specs), written | (pinned or frozenset()))
        except ShardingError:
            continue
        for i in written:
            t = tensors[i]
            local = redistribute_local_tensor(
                t._local_tensor, mesh, t._spec.placements, moved[i], t._spec.shape)
            if in_place_only:
                t._local_tensor.copy_(local)
            else:
                t._local_tensor = local
            t._spec = t._spec.with_placements(moved[i])
            t._tspec = t._spec.tensor
        return True
    return False


def _on_every_rank(mesh: Any, flag: bool, device: torch.device) -> bool:
    """``flag`` and-ed over the mesh's ranks (one small all-reduce, recorded as any other)."""
    value = torch.tensor([int(flag)], dtype=torch.int32, device=device)
    return bool(collectives.all_reduce(value, mesh.group_for(tuple(range(mesh.ndim))),
                                       "min").item())


def _sharers(local: torch.Tensor) -> int:
    """How many other tensors share this piece's storage (the storage object made to ask
    counts one, the piece itself one)."""
    return torch._C._storage_Use_Count(local.untyped_storage()._cdata) - 2


def _respec(op: OpSpec, specs: list[TensorSpec]) -> OpSpec:
    """``op`` with its tensor arguments replaced, in order, by ``specs``."""
    it = iter(specs)

    def swap(x: Any) -> Any:
        if isinstance(x, TensorSpec):
            return next(it)
        if isinstance(x, tuple):
            return tuple(swap(v) for v in x)
        return x

    args = tuple(swap(a) for a in op.args)
    kwargs = tuple((k, swap(v)) for k, v in op.kwargs)
    return OpSpec(op.op, args, kwargs, op.mesh_shape)


def _record_fast(func: Any, args: tuple, kwargs: dict, plan: _Plan, out: Any, mesh: Any,
                 fast_key: tuple, DTensor: type, moves: tuple) -> None:
    rewrite = ()
    if plan.local_out_shape is not None:
        probe = tuple(range(len(args)))  # which positions localize_shape_args replaces
        new, _ = localize_shape_args(func, probe, {}, plan.local_out_shape)
        rewrite = tuple((i, v) for i, v in enumerate(new) if v is not probe[i])
    local = plan.decision.chosen.local
    outs = [out] if isinstance(out, torch.Tensor) else list(out)
    sources = _return_sources(func)
    out_fields = tuple((s, s.tensor, s.shape, s.stride, s.dtype, o._local_tensor.layout)
                       for s, o in zip(plan.out_specs, outs))
    container = None if isinstance(out, torch.Tensor) else type(out)
    returns_arg = sources[0][0] if sources[0] is not None else None
    lists = tuple(i for i, x in enumerate(args) if _dtensor_list(x, DTensor))
    local_fn = LOCAL_FUNCTIONS[local] if local else None
    compiled = native.compile_plan(func, args, kwargs, rewrite, out_fields, container,
                                   returns_arg, local_fn, plan.boxes, moves, lists)
    mesh.__dict__.setdefault("_fast_plans", {})[fast_key] = _FastPlan(
        func._op, out_fields, container, rewrite, local_fn, plan.boxes, returns_arg,
        tuple(i for i, x in enumerate(args) if type(x) is DTensor), lists, moves, compiled)


# Note [local moves]
# A strategy may want an input in other placements than it has where the move needs no other
# rank: Replicate -> Shard is a slice of this rank's piece (the backward of a matmul meets one
# every step: its gradient arrives replicated, the strategy wants it sharded). Such a call
# still fits the fast path: its entry holds, per moved argument, the move as a function of
# the piece (redistribute_local_tensor, which plans every step as local). A move with a
# collective keeps the general path, where the policy on implicit moves is applied.
def _fast_moves(plan: _Plan, tensors: list, args: tuple, kwargs: dict, mesh: Any,
                DTensor: type) -> tuple | None:
    """Note [fast path]: None when the call does not fit it; else the argument moves it needs
    (Note [local moves]). Outputs must be new tensors, or the one argument written in
    place, returned as it is."""
    d = plan.decision
    if plan.inplace_view or plan.decompose is not None:
        return None
    if not plan.out_specs:  # item(): a Python number, no tensor to wrap (the fast path wraps)
        return None
    if kwargs and (plan.local_out_shape is not None
                   or any(type(v) not in _SCALARS for v in kwargs.values())):
        return None
    sources = _return_sources(d.op.op)
    if plan.in_place and not (len(sources) == 1 and sources[0] is not None
                              and sources[0][0] < len(args)
                              and type(args[sources[0][0]]) is DTensor
                              and plan.out_specs[0] == args[sources[0][0]]._spec):
        return None  # one written argument, returned as it is, or the general path
    if not (plan.in_place or all(src is None for src in sources)):
        return None
    if any(type(a) not in (DTensor, torch.Tensor) and type(a) not in _SCALARS
           and not _int_list(a) and not _dtensor_list(a, DTensor) for a in args):
        return None
    if any(type(t) is DTensor and t._pinned for t in tensors):
        return None
    replicated = (Replicate(),) * len(d.op.mesh_shape)
    # argument position per tensor, in the order _dispatch described them (None: in a list)
    positions: list[int | None] = []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            positions.append(i)
        elif _dtensor_list(a, DTensor):
            positions += [None] * len(a)
    moves = []
    for i, want, t in zip(positions, d.chosen.inputs, tensors):
        have = t._spec.placements if type(t) is DTensor else replicated
        if want == have:
            continue
        if type(t) is not DTensor or i is None:
            return None
        if plan.in_place and i == sources[0][0]:  # the written piece itself: never a copy
            return None
        shape = t._spec.shape
        steps = planner.plan(have, want, mesh.shape, shape, itemsize=t.dtype.itemsize)
        if not all(step.kind.startswith("local_") for step in steps):
            return None
        boxed = all(step.view is None for step in steps)  # Note [block shards]: no box
        old, new = ((local_box(shape, mesh.shape, p, mesh._coord) for p in (have, want))
                    if boxed else ((), ()))
        if boxed and all(step.kind == "local_slice" for step in steps) \
                and all(a[0] <= b[0] and b[1] <= a[1] for a, b in zip(old, new)):
            # the new piece inside the old (not so for empty pieces: any box of none)
            cuts = tuple((dim, b[0] - a[0], b[1] - b[0])
                         for dim, (a, b) in enumerate(zip(old, new)) if a != b)
            moves.append((i, functools.partial(_cut, cuts=cuts)))
        else:
            moves.append((i, functools.partial(redistribute_local_tensor, mesh=mesh,
                                               src_placements=have, dst_placements=want,
                                               global_shape=shape)))
    return tuple(moves)


def _cut(local: torch.Tensor, *, cuts: tuple[tuple[int, int, int], ...]) -> torch.Tensor:
    """A local_slice move: the new piece cut from the old (a copy, as redistribute gives)."""
    for dim, start, length in cuts:
        local = local.narrow(dim, start, length)
    return local.clone()


def _make_plan(func: Any, dargs: tuple, dkwargs: tuple, mesh: Any,
               pinned: frozenset[int]) -> _Plan | None:
    """None when the output shape depends on the data (no meta kernel, e.g. a boolean-mask
    index): such a call takes the fallback, which computes on the full tensors. Any other
    error of the meta call is the op refusing its arguments (``view(5, -1)`` of 12 elements):
    it is raised here, as one device would, rather than after gathering."""
    op = OpSpec(func, dargs, dkwargs, tuple(mesh.spec.shape))
    try:
        metas = [] if _returns_no_tensor(func) else _output_meta(op)
    except NotImplementedError:
        return None
    except RuntimeError as e:
        if "meta" in str(e).lower():  # e.g. item() or repeat_interleave on meta tensors
            return None
        raise
    out_shapes = None  # Note [split rules in propagation]: outputs must fit explicit sizes
    if any(has_split_rule(t.placements) for t in op.tensors()):
        out_shapes = tuple(tuple(m.shape) for m in metas)
    decision = decide(op, _written(func, op) | pinned, out_shapes)
    otherwise = None
    if decision.chosen.local in GUARDS:  # Note [guarded local functions]
        unguarded = [c for c in decision.candidates if c.local not in GUARDS]
        if not unguarded:
            raise ShardingError(f"{func}: its only strategies for these placements hold for "
                                f"some data only ({decision.chosen.local}), and none holds "
                                "for any data")
        otherwise = _plan_of(func, op, Decision(op, unguarded[0], tuple(unguarded)), metas,
                             mesh, None)
    return _plan_of(func, op, decision, metas, mesh, otherwise)


def _plan_of(func: Any, op: OpSpec, decision: Decision, metas: list, mesh: Any,
             otherwise: _Plan | None) -> _Plan:
    specs = []
    for meta, p in zip(metas, decision.chosen.outputs):
        shape, stride = tuple(meta.shape), tuple(meta.stride())
        specs.append(DTensorSpec(mesh, p, shape, stride, meta.dtype))
    local_out = None
    if shape_arg_positions(func) and specs:  # Note [global size arguments]
        local_out = specs[0].local_shape()
    boxes = None
    if decision.chosen.local:
        coord = mesh.get_coordinate()
        # a block shard's piece is no box (Note [block shards]): its local function gets None
        boxes = tuple(local_box(t.shape, mesh.spec.shape, p, coord)
                      if coord is not None and not has_block(p) else None
                      for t, p in zip(op.tensors(), decision.chosen.inputs))
    return _Plan(decision, tuple(specs), bool(_written_positions(func)), local_out,
                 torch.Tag.inplace_view in func.tags, boxes, DECOMPOSITIONS.get(func),
                 otherwise)


def _first_dtensor(DTensor: type, args: tuple, kwargs: dict) -> Any:
    for group in (args, kwargs.values()):
        for x in group:
            if isinstance(x, DTensor):
                return x
            if type(x) is list or type(x) is tuple:
                for v in x:
                    if isinstance(v, DTensor):
                        return v
    raise TypeError("dispatch called without a DTensor argument")


@lru_cache(maxsize=4096)
def _written_positions(func: Any) -> tuple[tuple[int, str], ...]:
    return tuple((i, a.name) for i, a in enumerate(func._schema.arguments)
                 if a.alias_info is not None and a.alias_info.is_write)


def _written(func: Any, op: OpSpec) -> frozenset[int]:
    """Indices (in tensor order) of the arguments an in-place/out= op writes."""
    positions = _written_positions(func)
    if not positions:
        return frozenset()
    out, k = set(), 0
    for i, a in enumerate(list(op.args) + [v for _, v in op.kwargs]):
        items = a if isinstance(a, tuple) else (a,)
        for item in items:
            if isinstance(item, TensorSpec):
                name = op.kwargs[i - len(op.args)][0] if i >= len(op.args) else None
                if any(i == p or name == n for p, n in positions):
                    out.add(k)
                k += 1
    return frozenset(out)


def _run(DTensor: type, func: Any, args: tuple, kwargs: dict, tensors: list, plan: _Plan,
         mesh: Any) -> Any:
    required = iter(plan.decision.chosen.inputs)  # one entry per tensor, in the order described

    def local(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return _localize(DTensor, x, next(required), mesh)
        if type(x) is list or type(x) is tuple:
            return type(x)(local(v) for v in x)
        return x

    largs = tuple(local(a) for a in args)
    lkwargs = {k: local(v) for k, v in kwargs.items()}
    if plan.local_out_shape is not None:
        largs, lkwargs = localize_shape_args(func, largs, lkwargs, plan.local_out_shape)
    if plan.otherwise is not None:  # Note [guarded local functions]
        holds = GUARDS[plan.decision.chosen.local](func, largs, lkwargs, plan.boxes)
        device = next(t for t in tensors if isinstance(t, DTensor))._local_tensor.device
        if not _on_every_rank(mesh, holds, device):
            debug.record(plan.otherwise.decision, tensors)
            return _run(DTensor, func, args, kwargs, tensors, plan.otherwise, mesh)
    if plan.boxes is not None:
        out = LOCAL_FUNCTIONS[plan.decision.chosen.local](func, largs, lkwargs, plan.boxes)
    else:
        out = func(*largs, **lkwargs)
    specs = iter(plan.out_specs)

    def wrap(t: Any) -> Any:
        if isinstance(t, torch.Tensor):
            return DTensor(t, next(specs), requires_grad=False)
        if type(t) is list or type(t) is tuple:
            return type(t)(wrap(v) for v in t)
        return t

    sources = _return_sources(func)
    if not any(src is not None for src in sources):
        return wrap(out)
    # add_ returns self, batch_norm writes its running stats but returns new tensors: a return
    # that aliases an argument is that argument (the DTensor the caller holds)
    outs = out if isinstance(out, tuple) else (out,)
    results = []
    for value, src in zip(outs, sources):
        if src is None:
            results.append(wrap(value))
            continue
        if isinstance(value, torch.Tensor):
            next(specs)
        position, name = src
        original = args[position] if position < len(args) else kwargs.get(name)
        if isinstance(original, DTensor):
            if plan.inplace_view:
                _restride(func, args, kwargs, original, plan)
            value = original
        results.append(value)
    return tuple(results) if isinstance(out, tuple) else results[0]


def _restride(func: Any, args: tuple, kwargs: dict, target: Any, plan: _Plan) -> None:
    """An in-place view op changed the local piece's shape: give the DTensor its new spec and
    its wrapper the new global sizes (as torch's return_and_correct_aliasing does: run the op
    on the wrapper's metadata only, under no_dispatch with meta in TLS)."""
    spec = plan.out_specs[0]
    target._spec, target._tspec = spec, spec.tensor
    with torch.utils._mode_utils.no_dispatch():
        meta_in_tls = torch._C._meta_in_tls_dispatch_include()
        torch._C._set_meta_in_tls_dispatch_include(True)
        try:
            func(*args, **kwargs)
        finally:
            torch._C._set_meta_in_tls_dispatch_include(meta_in_tls)


def _localize(DTensor: type, a: torch.Tensor, placements: tuple[Placement, ...],
              mesh: Any) -> torch.Tensor:
    if isinstance(a, DTensor):
        s = a._spec
        if s.placements == placements:
            return a._local_tensor
        return redistribute_local_tensor(a._local_tensor, mesh, s.placements, placements, s.shape)
    replicated = (Replicate(),) * len(placements)
    if placements == replicated:
        return a
    return redistribute_local_tensor(a, mesh, replicated, placements, tuple(a.shape))


@shape_cache(maxsize=65536)
def _output_meta(op: OpSpec) -> list[torch.Tensor]:
    """Global output shapes, strides and dtypes, from running the op on meta tensors."""
    return [t for t in pytree.tree_leaves(meta_call(op)) if isinstance(t, torch.Tensor)]


def _verify_plain(DTensor: type, func: Any, tensors: list, mesh: Any) -> None:
    import torch.distributed as dist

    group = mesh.group_for(tuple(range(mesh.ndim)))
    for i, t in enumerate(tensors):
        if isinstance(t, DTensor):
            continue
        mine = t.detach().cpu().contiguous().view(-1).view(torch.uint8) if t.numel() else t
        seen: list = [None] * mesh.size()
        dist.all_gather_object(seen, bytes(mine.numpy()) if t.numel() else b"", group=group)
        if any(s != seen[0] for s in seen):
            raise ValueError(f"{func}: plain tensor argument {i} (shape {tuple(t.shape)}) differs "
                             "across ranks, but a plain tensor mixed with DTensors must be the "
                             "same on every rank (it is taken as Replicate)")
