"""``MixedPrecisionPolicy`` for ``fully_shard``: torch's ``torch.distributed.fsdp`` name,
fields and defaults.

Note [mixed precision in fully_shard]
The stored (sharded) parameters, their gradients and the optimizer state keep the dtype the
model was built in. Each gather casts this rank's piece to ``param_dtype`` before the
all-gather (half the bytes for bf16), so the forward and backward compute in ``param_dtype``
and the gradients arrive in it. Before the reduce-scatter they are cast to ``reduce_dtype``
(``param_dtype`` when unset), and the reduced piece is cast back to the stored dtype, where
``param.grad`` accumulates and the optimizer reads it. Each cast is part of an op that runs
anyway, once per module, not one per parameter (Note [copy-out in one kernel] in
``fsdp_comm``): the cat packing the pieces into the all-gather or reduce-scatter buffer
writes the new dtype, and the reduced buffer is cast whole before it is cut into gradients.
``cast_forward_inputs`` casts a fully sharded module's floating-point inputs to
``param_dtype``; ``output_dtype`` casts its floating-point outputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree

from dtensor.parallel.errors import FullyShardError


@dataclass(frozen=True)
class MixedPrecisionPolicy:
    """Dtypes a fully sharded module computes, reduces and returns in (Note [mixed precision
    in fully_shard]); ``None`` keeps the parameter's own dtype.

    >>> import torch
    >>> MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, \
output_dtype=None, cast_forward_inputs=True)
    """

    param_dtype: torch.dtype | None = None
    reduce_dtype: torch.dtype | None = None
    output_dtype: torch.dtype | None = None
    cast_forward_inputs: bool = True

    def __post_init__(self) -> None:
        for name in ("param_dtype", "reduce_dtype", "output_dtype"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, torch.dtype)
                                          and value.is_floating_point):
                raise FullyShardError(f"MixedPrecisionPolicy: {name} must be a floating-point "
                                      f"torch.dtype or None, got {value!r}")
        if not isinstance(self.cast_forward_inputs, bool):
            raise FullyShardError(f"MixedPrecisionPolicy: cast_forward_inputs must be a bool, "
                                  f"got {self.cast_forward_inputs!r}")


def cast_floating(tree: Any, dtype: torch.dtype | None) -> Any:
    """``tree`` with each floating-point tensor cast to ``dtype`` (unchanged if None)."""
    if dtype is None:
        return tree

    def cast(t: Any) -> Any:
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != dtype:
            return t.to(dtype)
        return t

    return pytree.tree_map(cast, tree)
