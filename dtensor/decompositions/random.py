"""Random ops on DTensors: each sharded draw equals one device's draw for the same seed.

Note [sharded random ops]
Note [sharded RNG] in dtensor/api.py keeps every rank's generator equal to the one a single
device would have: every draw is a whole-tensor draw. The random aten ops follow it here.
Each has a rule that offers only Replicate (each rank draws the whole tensor from the same
generator state, so replicas agree and the stream is one device's), and a decomposition for
sharded tensors that does the same without gathering anything the draw does not read: the
whole output is drawn into a fresh tensor of the global shape and each rank keeps its piece.

- fills (``uniform_``, ``normal_``, ``bernoulli_(p)``, ``random_``, ...) read only the
  target's shape: its pieces are overwritten in place, no collective, the placements kept (a
  Partial target holds the draw as one rank's addend, the reduction's identity elsewhere);
- ops that read tensors (``bernoulli_(p_tensor)``, ``bernoulli(probs)``, ``normal(mean,
  std)``, ``native_dropout(x)``) gather those inputs whole first (one device reads them all);
- ``rand_like``/``randn_like``/``randint_like`` lay their output out like their input (a
  Partial input's value is not read: the output is Replicate there).

The draw costs the global numel on every rank: the CPU generator (mt19937) cannot skip ahead.
A counter-based generator (CUDA's Philox, by offset) could draw only the piece; that is where
to optimise.

Note [fills in chunks]
The CPU generator fills a tensor element by element in order (``normal_`` in blocks of 16, its
last 16 drawn again when the size is not a multiple of 16), so filling it chunk by chunk, each
chunk a multiple of 16 elements and none shorter than 16, draws what one whole fill would. A
large sharded target (a parameter initialised after ``to_empty``: Note [meta-device init] in
dtensor/parallel/fsdp.py) is filled that way, whole rows at a time, each rank keeping the part
of the rows in its box: the draw still costs the global numel, its memory one chunk, not one
whole parameter. The tests compare every fill against the whole draw.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from dtensor.api import _from_full
from dtensor.dispatch import register_decomposition
from dtensor.layout import local_box
from dtensor.ops.registry import OpSpec, Strategy, sharding_rule
from dtensor.placements import Partial, Placement, Replicate
from dtensor.redistribute import redistribute_local_tensor
from dtensor.spec import DTensorSpec
from dtensor.tensor import DTensor

aten = torch.ops.aten

FILLS = (aten.uniform_.default, aten.normal_.default, aten.exponential_.default,
         aten.geometric_.default, aten.log_normal_.default, aten.cauchy_.default,
         aten.random_.default, aten.random_.to, getattr(aten.random_, "from"),
         aten.bernoulli_.float, aten.bernoulli_.Tensor)
DRAWS = (aten.bernoulli.default, aten.bernoulli.p, aten.normal.Tensor_float,
         aten.normal.float_Tensor, aten.normal.Tensor_Tensor, aten.native_dropout.default)
LIKES = (aten.rand_like.default, aten.randn_like.default, aten.randint_like.default,
         aten.randint_like.low_dtype, aten.randint_like.Tensor)


@sharding_rule(*FILLS, *DRAWS[:-1], *LIKES)
def replicated_draw(op: OpSpec) -> list[Strategy]:
    """Every tensor whole, so every rank draws one device's tensor (Note [sharded random
    ops]); sharded layouts are the decomposition's."""
    n_in, n_out = len(op.tensors()), 1
    return [Strategy((Replicate(),) * n_in, (Replicate(),) * n_out)]


def _whole(t: Any) -> Any:
    """A DTensor argument as this rank's copy of the whole tensor (collective if sharded)."""
    if not isinstance(t, DTensor):
        return t
    s = t._spec
    replicated = (Replicate(),) * len(s.placements)
    if s.placements == replicated:
        return t._local_tensor
    return redistribute_local_tensor(t._local_tensor, s.mesh, s.placements, replicated, s.shape)


def _sharded(spec: DTensorSpec) -> bool:
    return any(not isinstance(p, Replicate) for p in spec.placements)


def _fill(func: Any, args: tuple, kwargs: dict) -> Any:
    x = args[0]
    s = x._spec
    if not _sharded(s) or s.mesh.get_coordinate() is None:
        return NotImplemented  # the rule: Replicate
    rest = [_whole(a) for a in args[1:]]
    kw = {k: _whole(v) for k, v in kwargs.items()}
    if _fill_by_rows(func, x, rest, kw):
        return x
    full = torch.empty(s.shape, dtype=s.dtype, device=x._local_tensor.device)
    func(full, *rest, **kw)
    replicated = (Replicate(),) * len(s.placements)
    # local steps only: a Shard keeps its slice, a Partial holds the draw as one addend
    x._local_tensor.copy_(redistribute_local_tensor(full, s.mesh, replicated, s.placements,
                                                    s.shape))
    return x


CHUNK_ELEMENTS = 1 << 20  # Note [fills in chunks]: 4 MiB of float32 at a time


def _fill_by_rows(func: Any, x: DTensor, rest: list, kwargs: dict,
                  chunk_elements: int = CHUNK_ELEMENTS) -> bool:
    """Note [fills in chunks]: fill ``x``'s piece chunk by chunk; False where it does not
    apply (not on cpu, a Partial target, a tensor argument, small enough to draw whole)."""
    s = x._spec
    shape, local = tuple(s.shape), x._local_tensor
    if (local.device.type != "cpu" or s.has_partial or not shape
            or math.prod(shape) <= chunk_elements
            or any(isinstance(a, torch.Tensor) for a in (*rest, *kwargs.values()))):
        return False
    row = math.prod(shape[1:])
    unit = math.lcm(row, 16) // row  # rows per unit: whole rows, a multiple of 16 elements
    rows = max(unit, chunk_elements // row // unit * unit)
    coord = s.mesh.get_coordinate()
    assert coord is not None  # _fill returned before for a rank outside the mesh
    box = local_box(shape, s.mesh.shape, s.placements, coord)
    (lo, hi), inner = box[0], tuple(slice(a, b) for a, b in box[1:])
    start = 0
    while start < shape[0]:
        end = min(start + rows, shape[0])
        if (shape[0] - end) * row < 16:  # a tail shorter than 16: drawn with this chunk
            end = shape[0]
        chunk = torch.empty((end - start, *shape[1:]), dtype=s.dtype)
        func(chunk, *rest, **kwargs)  # every chunk drawn: the generator advances as one fill
        a, b = max(start, lo), min(end, hi)
        if a < b:
            local[a - lo:b - lo] = chunk[(slice(a - start, b - start), *inner)]
        start = end
    return True


def _layout_of(args: tuple, shape: torch.Size) -> DTensorSpec | None:
    """The spec of the first DTensor argument shaped like the output, Partials made
    Replicate (its values are read whole; the output's are drawn, not reduced)."""
    for a in args:
        if isinstance(a, DTensor) and tuple(a.shape) == tuple(shape):
            s = a._spec
            placements: tuple[Placement, ...] = tuple(
                Replicate() if isinstance(p, Partial) else p for p in s.placements)
            return DTensorSpec(s.mesh, placements, s.shape, s.stride, s.dtype)
    return None


def _draw(func: Any, args: tuple, kwargs: dict) -> Any:
    first = next(a for a in args if isinstance(a, DTensor))
    if first._spec.mesh.get_coordinate() is None:
        return NotImplemented
    if func is aten.native_dropout.default and not (args[2] if len(args) > 2
                                                   else kwargs.get("train", True)):
        return NotImplemented  # no draw: the rule keeps the pieces
    whole_args = [_whole(a) for a in args]
    out = func(*whole_args, **{k: _whole(v) for k, v in kwargs.items()})
    outs = out if isinstance(out, tuple) else (out,)
    layout = _layout_of(args, outs[0].shape)
    if layout is None:  # a broadcast output: laid out whole
        s = first._spec
        layout = DTensorSpec(s.mesh, (Replicate(),) * len(s.placements), tuple(outs[0].shape),
                             tuple(outs[0].stride()), outs[0].dtype)
    return _wrap_all(outs, layout, out)


def _wrap_all(outs: tuple, layout: DTensorSpec, out: Any) -> Any:
    # every rank drew the whole tensor alike; each keeps its piece (no Partial in layout)
    wrapped = [_from_full(o, layout.mesh, layout.placements, requires_grad=False) for o in outs]
    return tuple(wrapped) if isinstance(out, tuple) else wrapped[0]


def _like(func: Any, args: tuple, kwargs: dict) -> Any:
    x = args[0]
    s = x._spec
    if s.mesh.get_coordinate() is None:
        return NotImplemented
    full = func(torch.empty(s.shape, dtype=s.dtype, device=x._local_tensor.device),
                *args[1:], **kwargs)
    layout = _layout_of((x,), full.shape)
    assert layout is not None  # x is shaped like its own *_like output
    return _wrap_all((full,), layout, full)


for _op in FILLS:
    register_decomposition(_op, _fill)
for _op in DRAWS:
    register_decomposition(_op, _draw)
for _op in LIKES:
    register_decomposition(_op, _like)


def _fill_partial(func: Any, args: tuple, kwargs: dict) -> Any:
    """``fill_(v)`` of a Partial(sum) target: the rule cannot keep it (n copies of v sum to
    n * v), but the value can be held as one addend, as a fill's draw is (``_fill``)."""
    x = args[0]
    if not x._spec.has_partial:
        return NotImplemented  # the rule fills each piece where it is
    return _fill(func, args, kwargs)


register_decomposition(aten.fill_.Scalar, _fill_partial)
