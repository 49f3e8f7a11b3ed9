"""What ``fully_shard`` and ``replicate`` do around a module's forward and backward.

Note [gather and reduce-scatter as one autograd function]
Before a module's forward, each of its parameters is redistributed to Replicate on the dp
dim (an all-gather) and handed to the forward as a DTensor on the tp mesh (or a plain tensor
without tp): the module computes exactly as without data parallelism, on this rank's batch.
The gather is an autograd function whose backward takes the gradient, a sum over this rank's
batch, as ``Partial(avg)`` over dp and redistributes it to the stored placements: a
reduce-scatter that averages, which equals the gradient of the global mean loss when every
rank holds an equal share of the batch. The gradient lands in ``param.grad`` already
sharded, added there when the reduce-scatter is waited for (Note [reduce-scatter in
flight]). ``replicate`` is the same function with Replicate on dp: the
gather is free and the backward an all-reduce.

Note [free after forward]
After the forward, the gathered parameters are freed (their storage resized to zero) and the
module's outputs get a hook that gathers them again into the same storage just before the
module's backward needs them; autograd's saved views of them are valid again. After the
backward the gathered copies are freed once more. ``reshard_after_forward=False`` keeps them
from forward to backward instead (less communication, more memory).

Note [recomputed forward]
Activation checkpointing (``torch.utils.checkpoint``, non-reentrant) saves no activations in
the forward and runs the module's forward again inside the backward, when autograd first
needs one of them; it may stop that forward early, once it has what it needs, so the module's
forward hook need not run. The hook on the outputs marks the module as in backward before any
of that: a forward then is a recomputation. It must not gather through a new autograd node
(the gradients flow through the first forward's node), nor free anything (the recomputed
activations are views of the gathered parameters): it hands the forward the gathered pieces
the outputs' hook has just re-gathered, as fresh tensors that require grad, so the recomputed
ops save exactly what the first forward saved. The module's backward (the reduce-scatter)
puts the stored parameters back and frees the gathered ones.

Note [a weight half inside fully_shard]
A zero-bubble pipeline schedule runs each backward in two (Note [zero bubble] in
dtensor/pipelining/schedules.py): the input half ends the module's backward as far as these
hooks see (the outputs' hook ran, the end-of-backward callback freed the gathered
parameters); the weight half then runs later, with no hook of the module's. A checkpointed
region inside the module is recomputed there, and its forward would be taken for a new one
(a new gather through a new autograd node: torch's checkpoint sees other tensors saved).
``backward_outside`` marks the module as in backward for the weight half, so a forward there
is a recomputation (Note [recomputed forward]: it regathers into the saved storage and hands
the forward fresh gathered pieces); after the weight half the gathered parameters are freed
as at the end of any backward. With sync off (every half, Note [zero bubble]) the weights'
gradients reach the accumulating leaves, so nothing else changes.

Note [gradient accumulation]
``set_requires_gradient_sync(False)`` (torch's name) makes a module's backward keep its
gradients unreduced, in the gathered layout (in ``reduce_dtype`` when one is set), summed
over micro-batches; the first backward with sync on adds them to its own and reduce-scatters
the sum once. ``param.grad`` is untouched until then. A forward that will accumulate (sync
off, or sums kept from earlier micro-batches) hands the module each gathered parameter as a
leaf (detached, sharing its storage) whose post-accumulate-grad hook adds the gradient to the
parameter's sum in place and drops it: autograd runs a leaf's accumulation as soon as its
gradient is complete, ahead of every other node (torch's FSDP2 accumulates unsharded
gradients the same way). Through ``_GatherModule`` instead, each gradient would wait for the
module's last one beside the sums: the output layer's, computed first in the backward, until
the root's backward at its very end. The module's outputs pass through ``_Join``, an identity
that also takes ``_GatherModule``'s outputs, so that node still runs, after the module's
backward (the leaves' accumulations run first): it frees the gathered parameters and, with
sync on, reduce-scatters the sums. The first micro-batch takes autograd's accumulated
gradient as its sum (a copy for a DTensor's piece, which another may share), the later ones
add in place.

Note [prefetch]
Torch's names and defaults. Backward, by default: a module's pre-backward hook regathers its
own parameters, then issues the regather of the module that ran just before it in the
forward (the next to run backward; the order is recorded as the forward's modules end), so
that gather is in flight while this module's backward computes.
``set_modules_to_backward_prefetch(modules)`` replaces that choice (``[]``: none).
Forward, by default: a module's pre-forward issues, right after its own gather and before
its compute, the gather of the module whose forward began next in the last forward (the
order is recorded as forwards begin; the first forward has none, so it prefetches nothing).
Torch's FSDP2 gets that overlap without asking, from the CPU running ahead of a separate
all-gather stream (below); we have no such stream, so we issue it earlier instead, with the
same memory bound (the computing module and one more). ``set_modules_to_forward_prefetch(
modules)`` replaces that choice (``[]``: none). A prefetch is an
``issue_gather``: the all-gathers go out with ``async_op=True`` and the pieces are assembled
when the module first needs them (its pre-forward, its pre-backward). It is always waited
for: a prefetch of parameters stepped or replaced since (versions differ) is waited and
dropped, then gathered again; a backward prefetch whose module's backward never runs is
waited at the end of the backward. Memory: a module holds gathered parameters from its
prefetch until its own free, so at most the computing module and those prefetched at once.

What overlaps where. simpg completes a collective when its last rank issues it, so on simpg
only the order changes (tests/parallel/test_fsdp_prefetch.py checks it through each record's
per-rank issue time). dtensor.comm issues every collective with ``async_op=True`` and waits at once
unless asked not to; prefetch asks. On NCCL an issued collective runs on the group's NCCL
stream after the work already queued on the current stream, and ``wait()`` makes the
current stream (not the CPU) wait for it. So a gather issued before a module's compute is
queued runs during that compute: the forward and backward prefetches overlap for real. A
gather issued in the next module's own pre-forward would not: its NCCL stream waits for the
compute queued before it (torch avoids that with a separate all-gather stream and a copy-in
event; we have none, hence the default forward prefetch). On gloo an async collective runs on gloo's
threads, beside the compute.

Note [reduce-scatter in flight]
A module's backward issues its reduce-scatter with ``async_op=True`` and returns no gradient
to autograd (the stored parameters are no inputs of its node: an empty tensor that requires
grad stands for them, so their post-accumulate-grad hooks are not run by autograd with no
gradient; ``torch.autograd.grad`` with respect to them is not supported, as in torch's
FSDP2); the next module's backward, after issuing its own, waits for it and adds the
reduced pieces to ``param.grad`` (as torch's FSDP2 sets them), and the end of the backward
settles the last. On NCCL the reduce-scatter then runs while the next module's backward
computes instead of holding it up; one is in flight at a time, so its buffers are freed a
module later. ``param.grad`` is complete when ``backward()`` returns, not when the module's
backward ends; a parameter's post-accumulate-grad hooks run when its piece is added, as
torch's FSDP2 runs them.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import torch
from torch.utils import _pytree as pytree

from dtensor.parallel.fsdp_comm import (accumulate, add_grad_pieces, gather_all, grad_pieces,
                                        issue_gather, issue_reduce_scatter)
from dtensor.parallel.mixed_precision import cast_floating
from dtensor.spec import DTensorSpec
from dtensor.tensor import DTensor

if TYPE_CHECKING:
    from dtensor.parallel.fsdp import _Managed, _State


class _GatherModule(torch.autograd.Function):
    """Note [gather and reduce-scatter as one autograd function], for all of a module's
    parameters at once (Note [one collective per module]): autograd calls the backward once,
    when the gradients of every gathered parameter the module used are complete."""

    @staticmethod
    def forward(ctx: Any, state: _State,  # type: ignore[override]
                anchor: torch.Tensor) -> tuple:
        ctx.state = state
        ctx.set_materialize_grads(False)  # an unused parameter gets no gradient, not zeros
        with torch.no_grad():
            gathered = _take_prefetched(state)
            if gathered is None:
                gathered = gather_all(state.params, state.mp.param_dtype)
            if state.open_graphs:  # Note [forwards before backwards]
                gathered = _into_freed(state, gathered)
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
        state.open_graphs = max(state.open_graphs - 1, 0)
        out = (None, None)  # Note [reduce-scatter in flight]: gradients set by _settle
        with torch.no_grad():
            # cast to reduce_dtype while packing (one op), unless added to accumulated ones
            defer = state.requires_gradient_sync and all(m.accumulated is None
                                                         for m in state.params)
            pieces = grad_pieces(state.params, grads, None if defer else state.mp.reduce_dtype)
            # the gathered parameters are done with: freed before the reduce-scatter's buffer
            # is built, so the two are never held at once
            _restore_stored(state)
            state.in_backward = False
            if state.reshard_after_forward:
                for m in state.params:
                    _free(m)
            if not state.requires_gradient_sync:  # Note [gradient accumulation]
                for m, piece in zip(state.params, pieces):
                    m.accumulated = add_grad_pieces(m, m.accumulated, piece)
            else:
                pieces = [add_grad_pieces(m, m.accumulated, piece)
                          for m, piece in zip(state.params, pieces)]
                for m in state.params:
                    m.accumulated = None
                finish = issue_reduce_scatter(state.params, pieces, state.mp.reduce_dtype)
                run = state.run if state.run is not None else Run()
                _settle(run)  # the previous module's: one in flight at a time
                run.reducing = (state, finish)
                torch.autograd.Variable._execution_engine.queue_callback(lambda: _settle(run))
        return out


def reduce_accumulated(state: _State) -> None:
    """Reduce the gradients summed while gradient sync was off (Note [gradient accumulation])
    now, into ``param.grad``: what the last backward with sync on does at its end, for a
    caller whose backwards ran in pieces that never reach ``_GatherModule``'s backward with
    sync on (the zero-bubble pipeline schedules' weight halves: Note [zero bubble] in
    dtensor/pipelining/schedules.py). Every graph of the step is done: none is open."""
    state.open_graphs = 0
    pieces = [m.accumulated for m in state.params]
    for m in state.params:
        m.accumulated = None
    if all(p is None for p in pieces):
        return
    with torch.no_grad():
        run = Run()
        run.reducing = (state, issue_reduce_scatter(state.params, pieces,
                                                    state.mp.reduce_dtype))
        _settle(run)


def _accumulates(state: _State) -> bool:
    """Whether this forward's gradients will be summed over micro-batches."""
    return torch.is_grad_enabled() and (not state.requires_gradient_sync or any(
        m.accumulated is not None for m in state.params))


def _accumulating_leaf(state: _State, m: _Managed, gathered: torch.Tensor) -> torch.Tensor:
    """Note [gradient accumulation]: ``gathered`` as a leaf whose gradient goes to the sum."""
    leaf = gathered.detach().requires_grad_()
    leaf.register_post_accumulate_grad_hook(lambda p: _add_to_sum(state, m, p))
    return leaf


def _add_to_sum(state: _State, m: _Managed, leaf: torch.Tensor) -> None:
    grad, leaf.grad = leaf.grad, None
    with torch.no_grad():
        m.accumulated = accumulate(m, m.accumulated, grad_pieces([m], [grad])[0],
                                   state.mp.reduce_dtype, owned=not isinstance(grad, DTensor))


class _Join(torch.autograd.Function):
    """Note [gradient accumulation]: the module's outputs as they are (detached aliases, not
    views: an in-place op on an output stays allowed); ``_GatherModule``'s outputs (the first
    ``n`` inputs) join the graph here, with no gradient."""

    @staticmethod
    def forward(ctx: Any, n: int, *tensors: torch.Tensor) -> tuple:  # type: ignore[override]
        ctx.n = n
        return tuple(t.detach() for t in tensors[n:])

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple:  # type: ignore[override]
        return (None,) * (1 + ctx.n) + grads


@dataclass(eq=False)
class Run:
    """What the modules of one forward share until their backward ends: the order their
    forwards ended in (Note [prefetch]) and the reduce-scatter in flight (Note
    [reduce-scatter in flight])."""

    order: list[_State] = field(default_factory=list)
    started: list[_State] = field(default_factory=list)  # the order their forwards began in
    prefetched: list[_State] = field(default_factory=list)  # forward prefetch targets
    reducing: tuple[_State, Callable[[], list]] | None = None


def _settle(run: Run) -> None:
    """Wait for the reduce-scatter in flight and add its pieces to ``param.grad``."""
    if run.reducing is None:
        return
    (state, finish), run.reducing = run.reducing, None
    with torch.no_grad():
        for m, local in zip(state.params, finish()):
            if local is None or not m.param.requires_grad:
                continue
            grad = DTensor(local.contiguous(), m.param._spec, requires_grad=False)
            if m.param.grad is None:
                m.param.grad = grad
            else:
                m.param.grad.add_(grad)
            # autograd's accumulation did not run: its hooks (an optimizer in backward) here
            for hook in (getattr(m.param, "_post_accumulate_grad_hooks", None) or {}).values():
                hook(m.param)


def _as_compute(local: torch.Tensor, m: _Managed, requires_grad: bool = False) -> torch.Tensor:
    """The gathered piece as the forward sees it (autograd marks _GatherModule's outputs)."""
    if m.compute_mesh is None:
        # a fresh tensor is returned as is; the stored shard itself (nothing to gather) as a
        # view, so autograd does not take over the parameter's own storage
        out = local if m.owns_gathered else local.view_as(local)
        return out.requires_grad_(requires_grad) if requires_grad else out
    spec = m.param._spec
    tp = tuple(spec.placements[i] for i in m.tp_dims)
    tp_spec = DTensorSpec(m.compute_mesh, tp, spec.shape, spec.stride, local.dtype)
    return DTensor(local, tp_spec, requires_grad=requires_grad)


def _free(m: _Managed) -> None:
    if m.owns_gathered and m.gathered is not None:
        m.gathered.untyped_storage().resize_(0)


def _freed(state: _State) -> list[_Managed]:
    return [m for m in state.params if m.owns_gathered and m.gathered is not None
            and m.gathered.untyped_storage().size() == 0]


# Note [forwards before backwards]
# A pipeline schedule runs several micro-batches' forwards before their backwards (GPipe,
# 1F1B's warm-up). Each forward's graph saves the gathered parameters; a module freed after
# forward regathers into that storage before its backward (Note [free after forward]). A
# forward that gathered into new storage would leave the earlier graphs' storage empty: so
# while a graph is open, the gathered values go into the freed storage the earlier forwards
# saved (the same parameters: no optimizer step runs between micro-batches).
def _into_freed(state: _State, gathered: list[torch.Tensor]) -> list[torch.Tensor]:
    out = []
    for m, new in zip(state.params, gathered):
        old = m.gathered
        if (m.owns_gathered and old is not None and old.untyped_storage().size() == 0
                and old.shape == new.shape and old.dtype == new.dtype):
            _refilled(m).copy_(new)
            new = old
        out.append(new)
    return out


def _regather(state: _State) -> None:
    """Gather the freed parameters again, into the same storage (Note [free after forward]),
    from the regather a prefetch issued if there is one (Note [prefetch]); the copy-out
    writes there directly (Note [copy-out in one kernel] in fsdp_comm)."""
    pending, state.regathering = state.regathering, None
    freed = _freed(state)
    aliases = [_refilled(m) for m in freed]
    into = [a if m.pieces is not None else None for m, a in zip(freed, aliases)]
    dtype = state.mp.param_dtype
    with torch.no_grad():
        if pending is not None and pending.is_current(freed, dtype):
            fresh = pending.wait(into)
        else:
            if pending is not None:
                pending.wait()  # always waited, even if unused
            fresh = gather_all(freed, dtype, into) if freed else []
        for alias, new in zip(aliases, fresh):
            if new is not alias:
                alias.copy_(new)


def _refilled(m: _Managed) -> torch.Tensor:
    """The freed gathered piece of ``m`` with its storage back, as an alias with its own
    version counter: autograd's saved views of the gathered parameter must not look modified
    in place when it is written (they hold the same values again)."""
    g = m.gathered
    assert g is not None
    storage = g.untyped_storage()
    last = g.storage_offset() + sum((n - 1) * st for n, st in zip(g.shape, g.stride()))
    storage.resize_((last + 1) * g.element_size() if g.numel() else 0)
    alias = torch.empty(0, dtype=g.dtype, device=g.device)
    alias.set_(storage, g.storage_offset(), g.shape, g.stride())
    return alias


def _restore_stored(state: _State) -> None:
    for m in state.params:
        m.owner._parameters[m.name] = m.param


# -- hooks -----------------------------------------------------------------------------------
_forwards_open: contextvars.ContextVar[int] = contextvars.ContextVar("dtensor_fsdp_open",
                                                                     default=0)
# what the data-parallel modules of the running forward share
_run: contextvars.ContextVar[Run | None] = contextvars.ContextVar("dtensor_fsdp_run",
                                                                 default=None)


def before_forward(state: _State, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    if state.mp.cast_forward_inputs and state.mp.param_dtype is not None:
        args, kwargs = cast_floating((args, kwargs), state.mp.param_dtype)
    if state.in_backward:  # Note [recomputed forward]
        _regather(state)
        for m in state.params:
            assert m.gathered is not None
            m.owner._parameters[m.name] = _as_compute(m.gathered.detach(), m,
                                                      m.param.requires_grad)
        return args, kwargs
    if state.is_root is None:  # the outermost data-parallel module of the first forward
        state.is_root = _forwards_open.get() == 0
    if _forwards_open.get() == 0:
        _run.set(Run())
    _forwards_open.set(_forwards_open.get() + 1)
    run = _run.get()
    if run is not None:  # the next forward prefetches by this order (Note [prefetch])
        if run.started:
            run.started[-1].next_in_forward = state
        run.started.append(state)
    for m in state.params:  # to_empty() or load_state_dict() may have put new ones there
        m.param = m.owner._parameters[m.name]
    # the stored parameters are no inputs of the graph (autograd would run their gradient
    # hooks with no gradient): an empty anchor makes the outputs require grad when any of
    # them does, as they would
    anchor = torch.empty(0).requires_grad_(any(m.param.requires_grad for m in state.params))
    outs = _GatherModule.apply(state, anchor)
    if torch.is_grad_enabled() and anchor.requires_grad:  # its backward will close it
        state.open_graphs += 1
    # Note [gradient accumulation]: leaves, and _GatherModule's outputs joined after forward
    state.joining = [g for g in outs if g.requires_grad] if _accumulates(state) else None
    for m, gathered in zip(state.params, outs):
        if state.joining and gathered.requires_grad:
            gathered = _accumulating_leaf(state, m, gathered)
        m.owner._parameters[m.name] = gathered
    for target in _forward_targets(state):  # after this module's gather, before its compute
        _prefetch_forward(target)
        if run is not None:
            run.prefetched.append(target)
    return args, kwargs


# -- prefetch (Note [prefetch]) --------------------------------------------------------------
def _take_prefetched(state: _State) -> list[torch.Tensor] | None:
    """The gathered pieces a forward prefetch issued, if they are of the current stored
    parameters; the work is waited for either way (never left in flight)."""
    pending, state.prefetched = state.prefetched, None
    if pending is None:
        return None
    gathered = pending.wait()
    return gathered if pending.is_current(state.params, state.mp.param_dtype) else None


def _forward_targets(state: _State) -> list[_State]:
    if state.forward_prefetch is not None:
        return state.forward_prefetch
    nxt = state.next_in_forward  # learnt in the last forward; none in the first
    return [nxt] if nxt is not None and nxt is not state else []


def _drop_unused_prefetches(run: Run) -> None:
    """At the end of the outermost forward: a prefetch for a module whose forward did not
    run this time (control flow) is waited for and dropped, never left in flight."""
    started = {id(s) for s in run.started}
    for target in run.prefetched:
        if id(target) not in started and target.prefetched is not None:
            target.prefetched.wait()
            target.prefetched = None


def _prefetch_forward(target: _State) -> None:
    if target.prefetched is not None or target.in_backward:
        return
    stored = [m.owner._parameters[m.name] for m in target.params]
    if not all(isinstance(p, torch.nn.Parameter) for p in stored):
        return  # its forward is running (an enclosing module): its parameters are gathered
    for m, p in zip(target.params, stored):
        m.param = p  # type: ignore[assignment]
    with torch.no_grad():
        target.prefetched = issue_gather(target.params, target.mp.param_dtype)


def _backward_targets(state: _State) -> list[_State]:
    if state.backward_prefetch is not None:
        return state.backward_prefetch
    order = [] if state.run is None else state.run.order
    at = next((i for i, s in enumerate(order) if s is state), 0)
    return [order[at - 1]] if at > 0 else []  # the next module to run backward


def _prefetch_backward(target: _State) -> None:
    freed = _freed(target)
    if target.regathering is not None or not freed:
        return
    with torch.no_grad():
        target.regathering = issue_gather(freed, target.mp.param_dtype)
    # a target whose backward does not run (frozen, unused) must not keep work in flight
    torch.autograd.Variable._execution_engine.queue_callback(lambda: _drop_regather(target))


def _drop_regather(target: _State) -> None:
    pending, target.regathering = target.regathering, None
    if pending is not None:
        pending.wait()


def after_forward(state: _State, out: Any) -> Any:
    out = cast_floating(out, state.mp.output_dtype)
    if state.in_backward:  # a recomputation that ran to the end: the backward frees
        return out
    _forwards_open.set(max(_forwards_open.get() - 1, 0))
    state.run = _run.get()
    if _forwards_open.get() == 0 and state.run is not None:
        _drop_unused_prefetches(state.run)
    if state.run is not None:
        state.run.order.append(state)
    _restore_stored(state)
    outputs = [t for t in pytree.tree_leaves(out)
               if isinstance(t, torch.Tensor) and t.requires_grad]
    if not outputs or not torch.is_grad_enabled():
        if state.reshard_after_forward and not state.is_root:
            for m in state.params:
                _free(m)
        return out
    if state.reshard_after_forward and not state.is_root:
        # the root's backward starts at once: freeing it now would mean gathering again
        for m in state.params:
            _free(m)
    joining, state.joining = state.joining, None
    if joining:  # Note [gradient accumulation]
        joined = dict(zip(map(id, outputs), _Join.apply(len(joining), *joining, *outputs)))
        out = pytree.tree_map_only(torch.Tensor, lambda t: joined.get(id(t), t), out)
        outputs = list(joined.values())
    torch.autograd.graph.register_multi_grad_hook(
        outputs, lambda _grads: _before_backward(state), mode="any")
    return out


def _before_backward(state: _State) -> None:
    if not state.in_backward:
        # a module whose backward never runs (frozen parameters, unused outputs) must not
        # stay marked: the next forward would be taken for a recomputation
        torch.autograd.Variable._execution_engine.queue_callback(lambda: _end_backward(state))
    state.in_backward = True
    _regather(state)
    for target in _backward_targets(state):  # after this module's regather, before its compute
        _prefetch_backward(target)


def backward_outside(state: _State) -> Callable[[], None]:
    """Mark the module as in its backward for a backward that runs outside it (a pipeline's
    weight half: Note [a weight half inside fully_shard]); returns what ends it."""
    if state.in_backward:
        return lambda: None
    state.in_backward = True
    return lambda: _end_backward(state)


def _end_backward(state: _State) -> None:
    if state.in_backward:  # the module's own backward did not run
        _restore_stored(state)
        state.in_backward = False
        if state.reshard_after_forward:
            for m in state.params:
                _free(m)

