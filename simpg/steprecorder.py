"""Record what one rank runs in a block: its local kernels (FLOPs and bytes) interleaved with
the collectives it issues and waits for, as the events ``simpg.overlap`` schedules.

>>> import torch, torch.distributed as dist, simpg
>>> def body():
...     with record_step() as rec:
...         x = torch.ones(8, 8) @ torch.ones(8, 8)
...         work = dist.all_reduce(x, async_op=True)
...         y = torch.ones(8).sum()  # independent of x
...         work.wait()
...         z = x.sum()  # x's first use
...     return [type(e).__name__ for e in rec.timeline().events]
>>> simpg.run(body, 2)[0]
['Compute', 'Compute', 'Compute', 'Issue', 'Compute', 'Compute', 'Wait', 'Use', 'Compute']
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterable
from types import TracebackType
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils import flop_counter
from torch.utils._python_dispatch import (TorchDispatchMode, _get_current_dispatch_mode,
                                           _pop_mode, _push_mode)
from torch.utils._pytree import tree_leaves

from simpg.overlap import Compute, Event, Issue, RankTimeline, Use, Wait
from simpg.rendezvous import comm_observer
from simpg.trace import Trace
from simpg.world import rank_context

__all__ = ["record_step", "StepRecorder"]

# Note [issue and wait points]
# A rank's collective is issued where its call returns a Work (simpg.rendezvous.Work's
# constructor tells the rank's ``comm_observer``), synchronous ones included: torch's
# eager collectives wait on that Work before returning, so a synchronous collective is an
# Issue followed at once by a Wait. Its result is waited where ``Work.wait`` returns: an
# async handle's ``wait()``, funcol's ``wait_tensor``, FSDP's waits. Only the first wait of
# a Work counts (later ones find it done). The ops simpg itself runs to move the data (on
# the thread of the rank that arrived last) happen after the ``Call`` was made
# (``Call.issued_s``) and before the Work exists: the recorder drops the ops it saw since
# then, so data movement is never priced as compute. The collective's identity is its
# record's ``seq``: the record keeps each rank's ``issued_s``, the Work its own.
# A collective's first use (a Use event, for ``waits="first_use"`` in simpg.overlap) is the
# first kernel after its issue that reads or writes a storage of one of its tensors (the
# Call's payload): storages, not tensors, because a view is the same memory. A storage that
# dies unused is forgotten, so its address, reused by a new storage, is not mistaken for it.
#
# Local kernels come from a TorchDispatchMode. The mode stack is thread-local and each simpg
# rank is a thread, so each rank records only its own ops. A mode runs before tensor
# subclasses: for a DTensor (ours or torch's) it returns NotImplemented, the subclass runs
# its sharding logic and calls the local ops on plain tensors, which come back to the mode
# and are recorded. The same recorder therefore measures both implementations. Ops on
# FakeTensors or the meta device are metadata work (sharding propagation) and are not
# recorded; the c10d namespaces are collectives, which simpg records.

# Note [peak live bytes]
# ``record_step(memory=True)`` also measures the rank's peak memory: after each op the mode
# sees (allocations, views and collectives included), the live bytes are the sum of
# ``untyped_storage().nbytes()`` over the distinct live storages (by data pointer) of every
# tensor seen so far, held by weak reference; the peak is the largest sum. Reading nbytes at
# each sample, not at allocation, is what makes it honest for torch's FSDP2: it frees and
# re-allocates its unsharded parameters with ``untyped_storage().resize_()``, outside the
# dispatcher, so a storage resized to 0 counts 0 from the next op on. Storages first seen
# since a Call was made, other than its payload, are simpg's own data movement (Note [issue
# and wait points]: scratch tensors, other ranks' buffers) and are untracked again, with the
# samples taken meanwhile. What it misses: a storage counts only from the first op that sees
# it, so state alive before the block (parameters, optimizer state) counts from its first
# use unless passed as ``live=``; tensors no op ever sees (``torch.from_numpy``) do not count;
# a sample is taken after an op, so an op's own scratch memory and inputs freed by it are not
# seen together; and it is bytes of storages, not the allocator's reserved or rounded sizes.
# A wrapper subclass (a DTensor) counts through its inner tensors. Each sample sums every
# tracked storage: a cost per op that grows with the live tensors, hence off by default.

_COMM_NAMESPACES = frozenset({"c10d", "_c10d_functional", "_c10d_functional_autograd"})


def _cpu_flash_flops(query, key, value, *args, out_val=None, **kwargs) -> int:
    return flop_counter.sdpa_flop_count(query.shape, key.shape, value.shape)


def _cpu_flash_backward_flops(grad_out, query, key, value, *args, out_val=None,
                              **kwargs) -> int:
    return flop_counter.sdpa_backward_flop_count(grad_out.shape, query.shape, key.shape,
                                                 value.shape)


aten = torch.ops.aten
# torch's registry lacks the CPU flash kernels; they do the FLOPs of any other sdpa
_FLOPS: dict[Any, Any] = {
    **flop_counter.flop_registry,
    aten._scaled_dot_product_flash_attention_for_cpu: _cpu_flash_flops,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_flash_backward_flops,
}
_FREE_OPS = frozenset({"empty", "empty_strided", "empty_like", "new_empty",
                       "new_empty_strided", "_unsafe_view", "resize_", "set_", "lift_fresh",
                       "_local_scalar_dense", "sym_size", "sym_stride", "sym_numel",
                       "sym_storage_offset", "is_same_size", "_has_compatible_shallow_copy_type"})


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in tree_leaves(tree) if isinstance(t, torch.Tensor)]


def _storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata  # one storage, whatever view of it a kernel sees


def price_op(func: Any, args: tuple, kwargs: dict, out: Any) -> Compute | None:
    """The kernel an aten op would be on a device, or None if it is no kernel (a view, an
    allocation, metadata).

    >>> a = torch.ones(2, 3)
    >>> price_op(aten.mm.default, (a, a.t()), {}, a @ a.t())
    Compute(op='mm.default', flops=24, nbytes=64, dtype='float32')
    """
    packet = func._overloadpacket
    if func.is_view or packet.__name__ in _FREE_OPS:
        return None
    inputs, outputs = _tensors((args, kwargs)), _tensors(out)
    if not outputs and not inputs:
        return None
    nbytes = sum(t.numel() * t.element_size() for t in inputs + outputs)
    floating = [t for t in inputs + outputs if t.is_floating_point()]
    dtype = str(floating[0].dtype if floating else (inputs + outputs)[0].dtype)
    formula = _FLOPS.get(packet)
    flops = int(formula(*args, **kwargs, out_val=out)) if formula is not None else 0
    name = f"{packet.__name__}.{func._overloadname}"
    return Compute(name, flops, nbytes, dtype.removeprefix("torch."))


class _KernelMode(TorchDispatchMode):
    def __init__(self, recorder: StepRecorder) -> None:
        super().__init__()
        self._recorder = recorder

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if not isinstance(func, torch._ops.OpOverload):
            return func(*args, **kwargs)
        if any(issubclass(t, FakeTensor) for t in types):
            return func(*args, **kwargs)  # sharding propagation's metadata work
        if any(t is not torch.Tensor and t is not torch.nn.Parameter for t in types):
            return NotImplemented  # a DTensor: its local ops come back here
        out = func(*args, **kwargs)
        tensors = _tensors((args, kwargs, out))
        if any(t.is_meta for t in tensors) or (
                "device" in kwargs and torch.device(kwargs["device"]).type == "meta"):
            return out
        if func.namespace not in _COMM_NAMESPACES:
            op = price_op(func, args, kwargs, out)
            if op is not None:
                self._recorder._kernel(op, tensors)
        if self._recorder._memory and not any(isinstance(t, FakeTensor) for t in tensors):
            self._recorder._sample(tensors)  # FakeTensors: torch DTensor's propagation
        return out


class StepRecorder:
    """Records the calling rank's kernels and collectives while open; see
    :func:`record_step`. After the block, :meth:`timeline` gives the events."""

    def __init__(self, memory: bool = False, live: Iterable[torch.Tensor] = ()) -> None:
        # kernels, and ("issue" | "wait", issued_s) or ("use", issued_s, storage key)
        self._events: list[Compute | tuple] = []
        self._times: list[float] = []  # per event: perf_counter when recorded (kernels)
        # storage key -> the collectives issued on it whose first use is still to come
        self._unused: dict[int, list[float]] = {}
        self._watched: set[int] = set()  # storage keys with a finalizer calling _forget
        self._kernels = 0  # Compute events so far
        self._last_touch: dict[int, int] = {}  # storage key -> the last kernel touching it
        self._touch_log: list[list[tuple[int, int | None]]] = []  # per kernel: prior touches
        self._waited: set[float] = set()
        self._issued: set[float] = set()
        self._trace = Trace()
        self._mode = _KernelMode(self)
        self._token: Any = None
        self._rank: int | None = None
        self._timeline: RankTimeline | None = None
        # Note [peak live bytes]: storage key -> (weak reference, perf_counter first seen)
        self._memory = memory
        self._live = [] if not memory else [p for t in live for p in _plain_tensors(t)]
        self._storages: dict[int, tuple[weakref.ref, float]] = {}
        self._samples: list[tuple[float, int]] = []  # (perf_counter, live bytes) after ops

    # -- what the mode and simpg's Work report -------------------------------------------------
    def _kernel(self, op: Compute, tensors: list[torch.Tensor]) -> None:
        now = time.perf_counter()
        keys = {_storage_key(t) for t in tensors}
        if self._unused:
            for key in keys:
                for issued_s in self._unused.pop(key, ()):
                    self._events.append(("use", issued_s, key))
                    self._times.append(now)
        self._touch_log.append([(key, self._last_touch.get(key)) for key in keys])
        for key in keys:
            self._last_touch[key] = self._kernels
        self._kernels += 1
        self._events.append(op)
        self._times.append(now)

    def _track(self, tensors: list[torch.Tensor], now: float) -> None:
        for t in (p for t in tensors for p in _plain_tensors(t)):
            try:
                storage = t.untyped_storage()
                storage.data_ptr()
            except (RuntimeError, NotImplementedError):  # sparse, or a subclass: no storage
                continue
            key = storage._cdata
            known = self._storages.get(key)
            if known is None or known[0]() is not storage:  # new, or an address reused
                self._storages[key] = (weakref.ref(storage), now)

    def _sample(self, tensors: list[torch.Tensor]) -> None:
        now = time.perf_counter()
        self._track(tensors, now)
        self._samples.append((now, self._live_bytes()))

    def _live_bytes(self) -> int:
        total, pointers, dead = 0, set(), []
        for key, (ref, _) in self._storages.items():
            storage = ref()
            if storage is None:
                dead.append(key)
                continue
            pointer = storage.data_ptr()
            if pointer and pointer not in pointers:  # resized to 0: no memory
                pointers.add(pointer)
                total += storage.nbytes()
        for key in dead:
            del self._storages[key]
        return total

    def _untrack_data_movement(self, issued_s: float, payload: list[torch.Tensor]) -> None:
        # Note [peak live bytes]: what was first seen since the Call was made is simpg's
        # data movement, but for the payload
        while self._samples and self._samples[-1][0] >= issued_s:
            self._samples.pop()
        for key in [k for k, (_, seen_s) in self._storages.items() if seen_s >= issued_s]:
            del self._storages[key]
        self._track(payload, issued_s)
        self._samples.append((issued_s, self._live_bytes()))

    def issued(self, work: Any) -> None:
        issued_s = work._call.issued_s
        # the ops since the Call was made were simpg moving data (Note [issue and wait points])
        while self._times and self._times[-1] >= issued_s and (
                isinstance(self._events[-1], Compute) or self._events[-1][0] == "use"):
            event = self._events.pop()
            self._times.pop()
            if not isinstance(event, Compute):  # not a use by this rank's program
                self._unused.setdefault(event[2], []).insert(0, event[1])
            else:  # undo its touches
                self._kernels -= 1
                for key, before in self._touch_log.pop():
                    if before is None:
                        self._last_touch.pop(key, None)
                    else:
                        self._last_touch[key] = before
        self._issued.add(issued_s)
        tensors = _tensors(work._call.payload)
        if self._memory:
            self._untrack_data_movement(issued_s, tensors)
        after = max((self._last_touch.get(_storage_key(t), -1) for t in tensors), default=-1)
        self._events.append(("issue", issued_s, after))
        self._times.append(issued_s)
        for t in tensors:
            key = _storage_key(t)
            if issued_s not in self._unused.setdefault(key, []):
                self._unused[key].append(issued_s)
                if key not in self._watched:  # a freed storage's key may come back
                    self._watched.add(key)
                    weakref.finalize(t.untyped_storage(), _forget_storage,
                                     weakref.WeakMethod(self._forget), key)

    def _forget(self, key: int) -> None:
        self._unused.pop(key, None)
        self._watched.discard(key)

    def waited(self, work: Any) -> None:
        issued_s = work._call.issued_s
        if issued_s in self._waited or issued_s not in self._issued:
            return  # a later wait finds it done; one issued before the block is not ours
        self._waited.add(issued_s)
        self._events.append(("wait", issued_s))
        self._times.append(self._times[-1] if self._times else issued_s)

    # -- the block -----------------------------------------------------------------------------
    def __enter__(self) -> StepRecorder:
        ctx = rank_context.get()
        if ctx is None:
            raise RuntimeError("record_step() records one rank: open it inside a simpg rank "
                               "(in the function simpg.run runs), not around simpg.run")
        world, _ = ctx
        self._rank = world.current_rank()
        self._trace.__enter__()
        self._token = comm_observer.set(self)
        # the thread's own mode stack, not TorchDispatchMode.__enter__: that also sets
        # process-wide flags (is_in_torch_dispatch_mode, read by torch.compile), which rank
        # threads entering and leaving out of order would leave set
        if self._memory:
            self._sample(self._live)
            self._live = []  # held weakly from here on
        _push_mode(self._mode)
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if _get_current_dispatch_mode() is not self._mode:
            raise RuntimeError("record_step(): a dispatch mode opened inside the block is still "
                               f"open where it ends ({_get_current_dispatch_mode()!r}); close "
                               "it inside the block")
        _pop_mode()
        comm_observer.reset(self._token)
        self._trace.__exit__(exc_type, exc, tb)
        if exc_type is None:
            self._timeline = self._resolve()

    def _resolve(self) -> RankTimeline:
        rank = self._rank
        seq_of: dict[float, int] = {}
        records = []
        for rec in self._trace.records:
            mine = [i for i, r in enumerate(rec.ranks) if r == rank]
            if not mine:
                continue
            records.append(rec)
            for i in mine:
                seq_of[rec.start_s[i]] = rec.seq
        events: list[Event] = []
        for e in self._events:
            if isinstance(e, Compute):
                events.append(e)
                continue
            kind, issued_s = e[0], e[1]
            seq = seq_of.get(issued_s)
            if seq is None:
                raise RuntimeError(f"rank {rank}: a collective issued inside record_step() "
                                   f"did not complete before the block ended: expected "
                                   f"every collective issued in the block to complete in it")
            if kind == "issue":
                events.append(Issue(seq, e[2]))
            else:
                events.append(Wait(seq) if kind == "wait" else Use(seq))
        return RankTimeline(rank, tuple(events), tuple(records))  # type: ignore[arg-type]

    def timeline(self) -> RankTimeline:
        if self._timeline is None:
            raise RuntimeError("StepRecorder.timeline(): the block has not ended (or raised)")
        return self._timeline

    def peak_live_bytes(self) -> int:
        """The most bytes of live storages the rank held after any op in the block (Note
        [peak live bytes]); needs ``record_step(memory=True)``."""
        if not self._memory:
            raise RuntimeError("StepRecorder.peak_live_bytes(): memory was not recorded; "
                               "expected record_step(memory=True)")
        if self._timeline is None:
            raise RuntimeError("StepRecorder.peak_live_bytes(): the block has not ended "
                               "(or raised)")
        return max(live for _, live in self._samples)


def _forget_storage(forget: weakref.WeakMethod, key: int) -> None:
    method = forget()  # the recorder may be gone: the storage outlived it
    if method is not None:
        method(key)


def _plain_tensors(t: torch.Tensor) -> list[torch.Tensor]:
    """The plain tensors holding ``t``'s memory: a wrapper subclass (a DTensor, ours or
    torch's) by the tensors its ``__tensor_flatten__`` names (torch's also names its mesh)."""
    if type(t) is torch.Tensor or type(t) is torch.nn.Parameter or not hasattr(
            t, "__tensor_flatten__"):
        return [t]
    inner = (getattr(t, name) for name in t.__tensor_flatten__()[0])
    return [p for x in inner if isinstance(x, torch.Tensor) for p in _plain_tensors(x)]


def record_step(memory: bool = False, live: Iterable[torch.Tensor] = ()) -> StepRecorder:
    """Record the calling rank's kernels and collectives inside a ``with`` block (see the
    module's example and Note [issue and wait points]).

    ``memory=True`` also measures the rank's peak live bytes (Note [peak live bytes]);
    ``live``: tensors alive before the block (parameters, optimizer state) to count from its
    start rather than from their first use."""
    return StepRecorder(memory, live)
