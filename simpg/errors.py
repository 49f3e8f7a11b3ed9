"""The errors simpg raises where a real backend would hang or corrupt data."""

from __future__ import annotations


class SimpgError(RuntimeError):
    """Base of simpg's diagnostics; a ``RuntimeError`` like the errors of real backends."""

    def copy(self) -> SimpgError:
        """A fresh instance with the same message, to raise on another rank's thread."""
        clone = type(self)(str(self))
        clone.__dict__.update(self.__dict__)
        return clone


class CollectiveMismatchError(SimpgError):
    """Ranks of one group issued collectives that do not match (op, shapes, dtype, reduce op,
    root or group); every involved rank raises it, and the message shows each rank's call."""


class DeadlockError(SimpgError):
    """No rank can make progress (or one rank ran past the timeout while others waited);
    the message shows where every rank is."""


class RankFailedError(SimpgError):
    """Raised on the ranks still waiting in collectives after another rank failed."""

    failed_rank: int | None = None
