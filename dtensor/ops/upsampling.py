"""Upsampling: nearest, nearest-exact, (bi/tri)linear, bicubic and the antialiased variants,
forward and backward (the ``.vec`` overloads are composite and reach dispatch as these).

Like pooling (dtensor/ops/pooling.py), a k-d upsample resamples the last k dims of each
(image, channel) plane on its own: batch and channel dims shard (Note [independent dims] in
_common), the spatial dims are Replicate (an output pixel interpolates input pixels that may
sit across a chunk edge, and scales are computed from the global sizes). The kernels take an
empty batch but reject an empty channel piece ("Non-empty 4D data tensor expected").

Partials: nearest picks one input pixel per output pixel (Note [moves keep every Partial]);
the interpolating modes are weighted sums, linear in the input (Note [linear in one
argument]); every backward is linear in grad_output.

Note [upsample input_size]
A backward op takes ``input_size``, the full (N, C, spatial...) shape of the gradient it
returns: a global size. With the batch or channel dim sharded, each rank must pass its own
piece's (N, C), which are grad_output's local leading dims (the spatial sizes stay global):
the strategies name the local function ``upsample_backward`` that rewrites it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from dtensor.ops._common import LINEAR, MOVES, plane_strategies
from dtensor.ops.registry import OpSpec, Strategy, local_function, sharding_rule

aten = torch.ops.aten

_NEAREST = ("upsample_nearest", "_upsample_nearest_exact")
_INTERPOLATING = {"upsample_linear": (1,), "upsample_bilinear": (2,),
                  "upsample_bicubic": (2,), "upsample_trilinear": (3,),
                  "_upsample_bilinear": (2,), "_upsample_bicubic": (2,)}


def _names() -> dict[str, tuple[int, tuple]]:
    """aten name of each forward -> (k, Partials the input passes through)."""
    found = {f"{n}{k}d": (k, MOVES) for n in _NEAREST for k in (1, 2, 3)}
    for n, (k,) in _INTERPOLATING.items():
        aa = "_aa" if n.startswith("_") else ""
        found[f"{n}{k}d{aa}"] = (k, LINEAR)
    return found


_FORWARD: dict[object, tuple[int, tuple]] = {}
_BACKWARD: dict[object, int] = {}
for _name, (_k, _kinds) in _names().items():
    _FORWARD[getattr(aten, _name).default] = (_k, _kinds)
    _BACKWARD[getattr(aten, f"{_name}_backward").default] = _k


@sharding_rule(*_FORWARD)
def upsample(op: OpSpec) -> list[Strategy]:
    """``(input, output_size, [align_corners], scales...)``: output_size is spatial only."""
    k, kinds = _FORWARD[op.op]
    return plane_strategies(op, k, 1, kinds, empty_ok=False)


@sharding_rule(*_BACKWARD)
def upsample_backward(op: OpSpec) -> list[Strategy]:
    """``(grad_output, output_size, input_size, ...)`` (Note [upsample input_size])."""
    return plane_strategies(op, _BACKWARD[op.op], 1, LINEAR, empty_ok=False,
                            local="upsample_backward")


@local_function("upsample_backward")
def _upsample_backward(op: Any, args: tuple, kwargs: dict, boxes: Sequence[object]) -> Any:
    """Note [upsample input_size]: this rank's (N, C) from its grad_output piece."""
    grad = args[0]
    size = list(args[2] if len(args) > 2 else kwargs["input_size"])
    lead = len(size) - _BACKWARD[op]
    size[:lead] = grad.shape[:lead]
    if len(args) > 2:
        return op(*args[:2], size, *args[3:], **kwargs)
    return op(*args, **{**kwargs, "input_size": size})
