"""The errors simpg raises where a real backend would hang or corrupt data."""

from __future__ import annotations


class SimpgError(RuntimeError):
    """Base of simpg's diagnostics; a ``RuntimeError`` like the errors of real backends.

    >>> import simpg
    >>> [issubclass(e, SimpgError) for e in (simpg.DeadlockError, simpg.RankFailedError)]
    [True, True]
    >>> issubclass(SimpgError, RuntimeError)
    True
    """

    def copy(self) -> SimpgError:
        """A fresh instance with the same message, to raise on another rank's thread."""
        clone = type(self)(str(self))
        clone.__dict__.update(self.__dict__)
        clone.is_copy = True  # not this rank's own failure: run_subtests does not blame it
        return clone


def causes(error: BaseException) -> list[BaseException]:
    """The errors ``error`` was raised while handling, innermost first (its context chain)."""
    chain, seen = [], error.__cause__ or error.__context__
    while seen is not None and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    return chain


def own_failure(error: BaseException) -> BaseException:
    """The rank's own error behind ``error``: a simpg diagnostic raised while the rank was
    unwinding from its own failure (a collective in a ``finally``, a mismatch because the
    rank skipped ahead) stands for that failure; anything else stands for itself."""
    if not isinstance(error, SimpgError):
        return error
    return next((e for e in causes(error) if not isinstance(e, SimpgError)), error)


class CollectiveMismatchError(SimpgError):
    """Ranks of one group issued collectives that do not match (op, shapes, dtype, reduce op,
    root or group); every involved rank raises it, and the message shows each rank's call.

    >>> import torch, torch.distributed as dist, simpg
    >>> def body():  # rank 0 calls barrier, rank 1 all_reduce
    ...     dist.barrier() if dist.get_rank() == 0 else dist.all_reduce(torch.ones(2))
    >>> try:
    ...     simpg.run(body, 2)
    ... except CollectiveMismatchError as e:
    ...     print(e)
    collective #1 on group world does not match across ranks: ranks issued different collectives
      rank 0: barrier() on group world at ...
      rank 1: all_reduce(shapes=[(2,)], dtype=torch.float32, op=sum) on group world at ...
    """


class DeadlockError(SimpgError):
    """No rank can make progress (or one rank ran past the timeout while others waited);
    the message shows where every rank is.

    >>> import torch, torch.distributed as dist, simpg
    >>> def body():  # rank 0 returns, rank 1 waits for it in all_reduce
    ...     return dist.all_reduce(torch.ones(2)) if dist.get_rank() == 1 else None
    >>> try:
    ...     simpg.run(body, 2)
    ... except DeadlockError as e:
    ...     print(e)
    deadlock: no rank can make progress
      rank 0: finished (left the world)
      rank 1: waiting in all_reduce(shapes=[(2,)], dtype=torch.float32, op=sum) on group world ...
    """


class RankFailedError(SimpgError):
    """Raised on the ranks still waiting in collectives after another rank failed.

    ``simpg.run`` raises the first failure itself; ``failed_rank`` names its rank.

    >>> import torch.distributed as dist, simpg
    >>> seen = []
    >>> def body():
    ...     if dist.get_rank() == 1:
    ...         raise ValueError("boom")
    ...     try:
    ...         dist.barrier()
    ...     except RankFailedError as e:
    ...         seen.append(e.failed_rank)
    >>> try:
    ...     simpg.run(body, 2)
    ... except ValueError as e:
    ...     print(e, seen)
    boom [1]
    """

    failed_rank: int | None = None


class UnwaitedWorkError(SimpgError):
    """Strict mode (``simpg.run(..., strict_async=True)``): a rank issued a collective with
    ``async_op=True`` and never called ``wait()`` on its work; the message names each such
    call and its call site. Outside strict mode simpg warns with ``UnwaitedWorkWarning``.

    >>> import torch, torch.distributed as dist, simpg
    >>> def body():
    ...     dist.all_reduce(torch.ones(1), async_op=True)  # no wait()
    >>> try:
    ...     simpg.run(body, 2, strict_async=True)
    ... except UnwaitedWorkError as e:
    ...     print(str(e).splitlines()[0][:59])
    2 collective(s) issued with async_op=True were never waited
    """


class UnwaitedWorkWarning(UserWarning):
    """A world ended with work issued with ``async_op=True`` that no one waited for."""


class RankAbandoned(BaseException):
    """Raised asynchronously in a rank's thread after its world gave up on it (it ran past
    the timeout, or kept running after the world failed); see Note [abandoning a stuck rank].
    A ``BaseException``, so that ``except Exception`` in user code does not swallow it."""
