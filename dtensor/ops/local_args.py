"""Arguments that name the output's shape must name the local piece's shape on each rank.

Note [global size arguments]
``view(x, size)``, ``expand``, ``_unsafe_view``, ``new_empty(_strided)``/``new_zeros``/...,
``slice_backward``/``select_backward`` take the *output* shape as an argument. A rule reasons
about global shapes, but each rank runs the op on its piece, so before the local call these
arguments are replaced by the shape of this rank's output piece (and a stride argument by its
contiguous strides). The dispatcher and the soundness harness both use this function, so what
the harness proves is what runs.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Sequence

from dtensor.spec import contiguous_strides

_SHAPE_ARGS = frozenset({"size", "input_sizes"})
# size/stride/offset address storage here, not the output's shape: dtensor.ops.views runs them
# on whole replicas (or as aliases of each piece) with the arguments as given; as_strided_scatter
# (scatter_views) likewise, its output shaped like self
_STORAGE_GEOMETRY = frozenset({"aten::as_strided", "aten::as_strided_copy",
                               "aten::as_strided_scatter"})


@lru_cache(maxsize=None)
def shape_arg_positions(func: Any) -> tuple[tuple[int, str, str], ...]:
    """(position, name, kind) of each shape ("shape") or stride ("stride") argument."""
    if func._schema.name in _STORAGE_GEOMETRY:
        return ()
    args = func._schema.arguments
    lists = [(i, a.name) for i, a in enumerate(args) if str(a.type) in ("List[int]", "SymInt[]")]
    shape = [(i, n, "shape") for i, n in lists if n in _SHAPE_ARGS]
    # a stride argument describes the output only next to a size (new_empty_strided); in
    # convolution it is the kernel's step
    stride = [(i, n, "stride") for i, n in lists if n == "stride" and shape]
    return tuple(shape + stride)


def localize_shape_args(func: Any, args: tuple, kwargs: dict,
                        local_out_shape: Sequence[int]) -> tuple[tuple, dict]:
    """``args``/``kwargs`` with shape arguments set to ``local_out_shape``."""
    positions = shape_arg_positions(func)
    if not positions:
        return args, kwargs
    args, kwargs = list(args), dict(kwargs)
    for i, name, kind in positions:
        value = (list(local_out_shape) if kind == "shape"
                 else list(contiguous_strides(local_out_shape)))
        if i < len(args):
            args[i] = value
        elif name in kwargs:
            kwargs[name] = value
    return tuple(args), kwargs
