"""What happens when an aten op meets DTensors.

1. Describe the call as an ``OpSpec`` (DTensors by their specs; plain tensors count as
   Replicate, see Note [plain tensors]).
2. Ask the registry's rule for strategies and pick the cheapest (``dtensor.ops.propagate``,
   cached), keeping pinned and written-in-place tensors where they are.
3. Move inputs as the strategy requires, run the op on the local pieces, wrap the outputs.

An op with no rule falls back to gathering its inputs to Replicate (always correct);
``fallback_policy`` chooses whether that warns once per op (default), stays silent, or raises.
An op may also have a decomposition that runs instead of its rule (Note [decompositions]).

This module is the entry, ``DTensor.__torch_dispatch__`` itself: the fast path; a call
it does not take goes to ``dtensor.dispatch.general``.
"""

from __future__ import annotations

from typing import Any

import torch

from dtensor import debug
from dtensor.foreign import check_dispatch_types
from dtensor.dispatch.general import _dispatch
from dtensor.dispatch import native
from dtensor.dispatch.plans import _SCALARS, _FastPlan
from dtensor.ops.registry import TensorSpec
from dtensor.spec import DTensorSpec
from dtensor.dispatch.policy import _check_plain


_make_wrapper = torch.Tensor._make_wrapper_subclass  # type: ignore[attr-defined]

# Note [fast path]
# Most calls in a steady state repeat one seen before, with every argument a DTensor already
# in the placements the chosen strategy wants, or a scalar: nothing moves, nothing is
# rewritten, and the op runs on the local pieces as they are. Such a call is keyed by the op
# and its arguments' specs alone (one tuple, one dict lookup on the mesh) and skips the
# general path's walks, closures and checks; any call that does not fit (kwargs, pinned
# tensors, views written in place, decompositions, a moved input, debugging on) takes the
# general path, which also records the fast entries under the key the fast path built.
# Where the time goes (add of two 2x8 pieces, µs of rank 0's CPU, benchmarks/bench_dispatch.py
# and the pieces timed alone): torch's Python-key entry into __torch_dispatch__ 3.3, the
# local op 3.5 (func._op; OpOverload.__call__ adds a frame), the output wrapper 2.0
# (_make_wrapper_subclass; slots and fields read at record time, not per call), key and
# lookup 1.0, the rest 1.3: about 11 in all where torch's C++ DTensor dispatch takes 14. So
# the entry, op and wrapper that no Python code can avoid are 9 of the 11: half of torch's
# time needs the whole __torch_dispatch__ in C++, calling the operator and building the
# wrapper below Python: Note [native fast path] in dtensor.dispatch.native does that, on this table,
# when it is built; this function is its fallback for every call it does not take.


def torch_dispatch(cls: type, func: Any, types: Any, args: tuple = (),
                   kwargs: dict | None = None) -> Any:
    """``DTensor.__torch_dispatch__`` itself (no frame in between): run ``func`` on DTensors
    (``cls`` is the DTensor class; Note [fast path])."""
    if len(types) > 1:  # another tensor subclass: Note [two DTensor libraries]
        check_dispatch_types(func, types, args, kwargs or {})
    # the fast-table key: the op, then per argument its spec, (value, type) or int tuple, then
    # per keyword argument (name, value, type); the commonest calls (one or two DTensors, no
    # keywords) are keyed without the loop
    n = len(args)
    key: Any = None
    if not kwargs and n == 2 and type(a := args[0]) is cls and type(b := args[1]) is cls \
            and not a._pinned and not b._pinned and a._spec.mesh is b._spec.mesh:
        mesh = a._spec.mesh
        key = (func._op, a._tspec, b._tspec)
    elif not kwargs and n == 1 and type(a := args[0]) is cls and not a._pinned:
        mesh = a._spec.mesh
        key = (func._op, a._tspec)
    if key is None:
        mesh = None
        key = [func._op]
        for a in args:
            kind = type(a)
            if kind is cls:
                if a._pinned or (mesh is not None and a._spec.mesh is not mesh):
                    break
                mesh = a._spec.mesh
                key.append(a._tspec)
            elif kind in _SCALARS:  # 2 == 2.0 == True as keys, not as arguments
                key.append(a)
                key.append(kind)
            elif kind is list or kind is tuple:  # of ints (sizes, dims) or of DTensors (cat)
                if a and type(a[0]) is cls:
                    specs = []
                    for v in a:
                        if type(v) is not cls or v._pinned \
                                or (mesh is not None and v._spec.mesh is not mesh):
                            break
                        mesh = v._spec.mesh
                        specs.append(v._tspec)
                    else:
                        key.append(tuple(specs))
                        continue
                    break
                for v in a:
                    if type(v) is not int:
                        break
                else:
                    key.append(tuple(a))
                    continue
                break
            elif kind is torch.Tensor:  # taken as Replicate (Note [plain tensors])
                key.append((a.shape, a.stride(), a.dtype, a.device))
            else:
                break
        else:
            if mesh is not None:
                if kwargs:
                    for name, a in kwargs.items():
                        if type(a) not in _SCALARS:
                            break
                        key += (name, a, type(a))
                    else:
                        key = tuple(key)
                else:
                    key = tuple(key)
        if type(key) is list:
            return _dispatch(cls, func, args, kwargs or {})
    fast = mesh.__dict__.get("_fast_plans")  # Note [per-mesh caches] in mesh.py
    try:
        entry = fast.get(key) if fast is not None else None
    except TypeError:  # a symbolic spec has no hash (Note [symbolic sizes] in dtensor.symbolic)
        return _dispatch(cls, func, args, kwargs or {})
    if entry is None or debug.recording() or _check_plain.get() \
            or (torch.is_inference_mode_enabled() and func.is_view):  # Note [inference mode]
        return _dispatch(cls, func, args, kwargs or {}, key)
    if entry.rewrite or entry.moves or entry.lists or n > 2:  # no comprehension: a frame
        largs: Any = list(args)
        for i in entry.dtensors:
            largs[i] = args[i]._local_tensor
        for i in entry.lists:
            largs[i] = [v._local_tensor for v in args[i]]
        for i, move in entry.moves:
            largs[i] = move(largs[i])
        for i, value in entry.rewrite:
            largs[i] = value
    elif n == 2:
        x, y = args
        largs = (x._local_tensor if type(x) is cls else x,
                 y._local_tensor if type(y) is cls else y)
    else:
        largs = (args[0]._local_tensor,)
    if kwargs:
        out = entry.op(*largs, **kwargs) if entry.local is None \
            else entry.local(func, tuple(largs), kwargs, entry.boxes)
    elif entry.local is None:
        out = entry.op(*largs)
    else:
        out = entry.local(func, tuple(largs), {}, entry.boxes)
    if entry.returns_arg is not None:
        return args[entry.returns_arg]
    if entry.container is None:
        return _new(cls, out, entry.outs[0])
    wrapped = [_new(cls, t, o) for t, o in zip(out, entry.outs)]
    return wrapped if entry.container is list else entry.container(wrapped)


def _new(cls: type, local: torch.Tensor, out: tuple) -> Any:
    """``DTensor._wrap`` with the spec's fields read once, at record time (_FastPlan.outs)."""
    spec, tspec, shape, stride, dtype, layout = out
    r = _make_wrapper(cls, shape, strides=stride, dtype=dtype, device=local.device,
                      layout=layout)
    r._local_tensor = local
    r._spec = spec
    r._tspec = tspec
    return r


def bind(dtensor_class: type) -> Any:
    """The ``__torch_dispatch__`` to install on ``dtensor_class``: the compiled entry
    (Note [native fast path]) bound to it with ``torch_dispatch`` as its fallback, or
    ``torch_dispatch`` itself when there is no compiled entry."""
    native.python_entries[dtensor_class] = torch_dispatch
    if native.MODULE is None:
        return torch_dispatch
    native.MODULE.bind(dtensor_class, torch_dispatch, _SCALARS, debug._records, _check_plain,
                       debug._ENV, debug._debug_env, TensorSpec, DTensorSpec, _FastPlan,
                       native._raise_in_dispatch)
    return native.MODULE.dispatch
