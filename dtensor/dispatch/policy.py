"""How dispatch treats what it cannot shard: the fallback policy for ops without a rule,
and the opt-in check that plain tensors mixed with DTensors agree across ranks.

Note [plain tensors]
A plain tensor mixed with DTensors (an index, a mask, a target, a constant) is taken as
Replicate: every rank holds the same full value. ``check_replicated`` (opt-in, one all_gather
per call) verifies that. This replaces the "got mixed torch.Tensor and DTensor" error.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator




_POLICIES = ("warn", "silent", "error")
_policy: contextvars.ContextVar[str] = contextvars.ContextVar("dtensor_fallback", default="warn")
_check_plain: contextvars.ContextVar[bool] = contextvars.ContextVar("dtensor_check_plain",
                                                                    default=False)
_warned: set[str] = set()


class NoShardingRuleError(NotImplementedError):
    """An op has no sharding rule and the fallback policy is "error"."""


@contextlib.contextmanager
def fallback_policy(policy: str) -> Iterator[None]:
    """Within the block (on this rank), ops without a sharding rule ``policy``: "warn"
    (default: gather inputs to Replicate, warn once per op), "silent", or "error".

    >>> import torch, simpg
    >>> from dtensor import init_device_mesh, distribute_tensor, Shard
    >>> def body():  # nonzero has no sharding rule (its output shape depends on the data)
    ...     x = distribute_tensor(torch.arange(5.0), init_device_mesh("cpu", (2,)), [Shard(0)])
    ...     with fallback_policy("silent"):
    ...         m = torch.nonzero(x)  # gathered, no warning
    ...     with fallback_policy("error"):
    ...         try:
    ...             torch.nonzero(x)
    ...         except NoShardingRuleError as e:
    ...             return m.placements, m.to_local().flatten().tolist(), str(e)
    >>> simpg.run(body, 2)[0]
    ((Replicate(),), [1, 2, 3, 4], "aten.nonzero.default has no sharding rule ...")
    """
    if policy not in _POLICIES:
        raise ValueError(f"fallback policy {policy!r}: expected one of {_POLICIES}")
    token = _policy.set(policy)
    try:
        yield
    finally:
        _policy.reset(token)


@contextlib.contextmanager
def check_replicated() -> Iterator[None]:
    """Within the block, verify that plain tensors mixed with DTensors are equal on every rank
    (Note [plain tensors]); a mismatch raises naming the op and the argument."""
    token = _check_plain.set(True)
    try:
        yield
    finally:
        _check_plain.reset(token)
