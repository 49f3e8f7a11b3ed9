"""Issued collectives: ``Handle`` (wait once for the result) and ``AsyncCollectiveTensor``
(a DTensor piece still in flight; Note [async redistribute])."""

from __future__ import annotations

import copy
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import torch
from torch.utils._pytree import tree_map_only


T = TypeVar("T")
U = TypeVar("U")


class Handle(Generic[T]):
    """An issued collective: ``wait()`` finishes it (once) and returns its result."""

    __slots__ = ("_works", "_finish", "_value")

    def __init__(self, works: Sequence[Any], finish: Callable[[], T]) -> None:
        self._works = works  # None entries (a backend that finished at once) are skipped
        self._finish: Callable[[], T] | None = finish
        self._value: T | None = None

    @staticmethod
    def done(value: U) -> Handle[U]:
        h: Handle[U] = Handle.__new__(Handle)
        h._works, h._finish, h._value = (), None, value
        return h

    def then(self, fn: Callable[[T], U]) -> Handle[U]:
        """A handle whose result is ``fn`` of this one's, run on ``wait()``."""
        return Handle((), lambda: fn(self.wait()))

    def wait(self) -> T:
        if self._finish is not None:
            for w in self._works:
                if w is not None:
                    w.wait()
            self._value, self._finish = self._finish(), None
        return self._value  # type: ignore[return-value]

    @property
    def in_flight(self) -> bool:
        """Whether ``wait()`` has work left to do (a collective issued and not waited)."""
        return self._finish is not None


# Note [async redistribute]
# ``DTensor.redistribute(..., async_op=True)`` returns once its last collective is issued
# (the steps before it feed it, so they finish at once). The DTensor it returns holds as its
# piece an ``AsyncCollectiveTensor``: a tensor with the piece's shape and dtype and no data,
# around that collective's ``Handle`` (torch's DTensor holds its own AsyncCollectiveTensor
# there). The wait happens where the piece is first needed, and nowhere else:
# - an aten op on the piece: this class's __torch_dispatch__ waits, then runs the op on the
#   finished tensor. Every op on the DTensor runs its local op on the piece (the compiled
#   entry hands a piece that is not a plain tensor to the Python entry, which does), and so do
#   printing, pickling, deepcopy, backward and whatever reads the piece through ops. Views
#   wait too (torch's keep them in flight): the finished tensor may not exist before the wait,
#   when a last local step (an all_to_all's unpacking, a movedim) builds it;
# - a redistribute of it, implicit or not: ``Program.__call__`` finishes its input before
#   anything is sent (a process group would read the wrapper's absent storage, and
#   ``contiguous()`` of it returns it without an op). A synchronous redistribute to the same
#   placements, and so ``full_tensor()``, returns the finished piece; an async one shares the
#   piece in flight;
# - reads of the data that are not ops (``tolist``, ``numpy``, ``data_ptr``, ...), here.
# On the wait every DTensor that holds the piece gets the finished plain tensor in its place,
# so its later ops take the fast paths again. The synchronous path pays one type check per
# redistribute; an async result pays one Python dispatch, once. A wait that fails raises an
# ``AsyncCollectiveError`` naming the redistribute, at the first use and again, the same, at
# every later one.
# ``to_local()`` of a DTensor still in flight returns the piece still in flight (as torch's
# returns its AsyncCollectiveTensor): it waits at its first op, and ``wait()`` gives the plain
# tensor. Only forwards are asynchronous: a backward through the redistribute moves the
# gradient synchronously. A result dropped unused is waited when its last reference goes,
# if that happens in the thread that issued it (a wait belongs to its rank's thread), so no
# work is left behind unwaited; an error then is dropped with the result.


class AsyncCollectiveError(RuntimeError):
    """The collective of an ``async_op=True`` redistribute failed; raised where its result is
    used, the first time and every time after (Note [async redistribute]). ``what`` names the
    redistribute, ``cause`` is the backend's error."""

    def __init__(self, what: str, cause: BaseException) -> None:
        super().__init__(f"{what}, issued with async_op=True, failed when its result was "
                         f"first used: {type(cause).__name__}: {cause}")
        self.what, self.cause = what, cause


class _InFlight:
    """What the aliases of one ``AsyncCollectiveTensor`` share: the handle until it is
    waited, then the finished tensor (or the error), and the DTensors holding it."""

    __slots__ = ("handle", "value", "error", "holders", "describe", "thread")

    def __init__(self, handle: Handle[torch.Tensor], describe: Callable[[], str]) -> None:
        self.handle: Handle[torch.Tensor] | None = handle
        self.value: torch.Tensor | None = None
        self.error: Exception | None = None
        self.holders: list[weakref.ref] = []
        self.describe = describe
        self.thread = threading.get_ident()

    def __del__(self) -> None:
        try:  # dropped unused: finished all the same (Note [async redistribute])
            if self.handle is not None and threading.get_ident() == self.thread:
                self.handle.wait()
        except BaseException:  # nowhere to raise to; a failed world says so itself
            pass

    def wait(self) -> torch.Tensor:
        value = self.value
        if value is not None:
            return value
        if self.error is not None:
            raise AsyncCollectiveError(self.describe(), self.error) from self.error
        try:
            value = self.handle.wait()  # type: ignore[union-attr]
        except Exception as e:  # a rank ending (simpg's RankAbandoned) is no Exception
            self.error, self.handle = e, None
            raise AsyncCollectiveError(self.describe(), e) from e
        self.value, self.handle = value, None
        for ref in self.holders:  # they hold the finished piece from now on
            holder = ref()
            if holder is not None and getattr(holder._local_tensor, "_in_flight", None) is self:
                holder._local_tensor = value
        self.holders = []
        return value


class AsyncCollectiveTensor(torch.Tensor):
    """A tensor whose data a collective is still computing: any op on it waits first, then
    runs on the finished tensor (Note [async redistribute]). ``wait()`` returns that tensor.

    >>> import torch, simpg
    >>> from dtensor import init_device_mesh, distribute_tensor, Shard, Replicate
    >>> def body():
    ...     x = distribute_tensor(torch.arange(4.0), init_device_mesh("cpu", (2,)), [Shard(0)])
    ...     y = x.redistribute(placements=[Replicate()], async_op=True)
    ...     piece = y.to_local()  # the gather is still in flight
    ...     return type(piece).__name__, (piece * 2).tolist()  # the op waits
    >>> simpg.run(body, 2)[0]
    ('AsyncCollectiveTensor', [0.0, 2.0, 4.0, 6.0])
    """

    __slots__ = ("_in_flight",)
    _in_flight: _InFlight

    @staticmethod
    def __new__(cls, in_flight: _InFlight, shape: Sequence[int], like: torch.Tensor
                ) -> AsyncCollectiveTensor:
        r = torch.Tensor._make_wrapper_subclass(  # type: ignore[attr-defined]
            cls, shape, dtype=like.dtype, device=like.device, layout=like.layout)
        r._in_flight = in_flight
        return r

    @staticmethod
    def issued(handle: Handle[torch.Tensor], shape: Sequence[int], like: torch.Tensor,
               describe: Callable[[], str]) -> AsyncCollectiveTensor:
        """The result of ``handle``'s collective, of ``shape`` and ``like``'s dtype."""
        return AsyncCollectiveTensor(_InFlight(handle, describe), shape, like)

    def alias(self) -> AsyncCollectiveTensor:
        """Another tensor object for the same result (what ``to_local()`` gives under grad)."""
        return AsyncCollectiveTensor(self._in_flight, self.shape, self)

    def held_by(self, dtensor: torch.Tensor) -> None:
        """``dtensor`` holds this as its piece: it gets the finished tensor on the wait."""
        self._in_flight.holders.append(weakref.ref(dtensor))

    def wait(self) -> torch.Tensor:
        """The finished tensor (waits for the collective the first time)."""
        return self._in_flight.wait()

    def completed(self) -> bool:
        """Whether the collective was waited (``wait()`` ran, or an op on this did)."""
        return self._in_flight.handle is None

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        args = tuple(a.wait() if type(a) is cls else a for a in args)
        if any(type(a) is cls for a in _flat(args)) or kwargs:  # inside lists, keywords
            args, kwargs = tree_map_only(cls, cls.wait, (args, kwargs or {}))
        return func(*args, **(kwargs or {}))

    # what reads the data without an op
    def tolist(self) -> Any:  # type: ignore[override]
        return self.wait().tolist()

    def numpy(self, *, force: bool = False) -> Any:  # type: ignore[override]
        return self.wait().numpy(force=force)

    def data_ptr(self) -> int:  # type: ignore[override]
        return self.wait().data_ptr()

    def untyped_storage(self) -> torch.UntypedStorage:  # type: ignore[override]
        return self.wait().untyped_storage()

    def __reduce_ex__(self, protocol: Any) -> Any:  # pickled as the plain tensor it becomes
        return self.wait().__reduce_ex__(protocol)

    def __deepcopy__(self, memo: dict) -> torch.Tensor:
        return copy.deepcopy(self.wait(), memo)

    def __repr__(self) -> str:  # type: ignore[override]
        return f"AsyncCollectiveTensor({self.wait()!r})"


def _flat(args: tuple) -> list:
    return [v for a in args if isinstance(a, (list, tuple)) for v in a]
