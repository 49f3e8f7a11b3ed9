"""Annotations: ``ShardSpec`` and the ``shard_hint`` call usable inside model code.

``shard_hint(x, spec)`` returns ``x`` itself in eager code. While ``dtensor.graph.capture``
traces, it calls the custom op ``dtensor_graph::shard_hint`` instead, so the hint becomes a
node of the captured graph whose string argument is the spec (``"[S(0),R]"`` or
``"[S(0),R]~"`` for a mutable one): the graph prints readably and needs no side table.

>>> from dtensor import Shard, Replicate
>>> spec = ShardSpec([Shard(0), Replicate()])
>>> spec, str(spec), ShardSpec.parse(str(spec)) == spec
(ShardSpec([Shard(dim=0), Replicate()]), '[S(0),R]', True)
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch

from dtensor.placements import Partial, Placement, Replicate, Shard, fmt_placements

_capturing: contextvars.ContextVar[bool] = contextvars.ContextVar("dtensor_graph_capturing",
                                                                  default=False)


@dataclass(frozen=True, slots=True)
class ShardSpec:
    """Placements for one value, one per mesh dim. ``mutable=False`` (default): inference
    never changes them and inserts reshards around them instead; ``mutable=True``: a hint
    that inference keeps unless another choice communicates fewer bytes."""

    placements: tuple[Placement, ...]
    mutable: bool = False

    def __init__(self, placements: Sequence[Placement], mutable: bool = False) -> None:
        ps = tuple(placements)
        for p in ps:
            if not isinstance(p, (Shard, Replicate, Partial)):
                raise TypeError(f"ShardSpec({list(ps)!r}): {p!r} is not a placement; "
                                f"expected Shard(dim), Replicate() or Partial(op)")
        object.__setattr__(self, "placements", ps)
        object.__setattr__(self, "mutable", bool(mutable))

    def __repr__(self) -> str:
        tail = ", mutable=True" if self.mutable else ""
        return f"ShardSpec({list(self.placements)!r}{tail})"

    def __str__(self) -> str:
        return fmt_placements(self.placements) + ("~" if self.mutable else "")

    @staticmethod
    def parse(text: str) -> ShardSpec:
        """The inverse of ``str``: ``"[S(0),R]"``, ``"[P(sum),S(1)]~"`` (mutable)."""
        mutable = text.endswith("~")
        body = text.removesuffix("~").strip()
        if not (body.startswith("[") and body.endswith("]")):
            raise ValueError(f"ShardSpec.parse({text!r}): expected e.g. '[S(0),R]'")
        out: list[Placement] = []
        for item in filter(None, (s.strip() for s in body[1:-1].split(","))):
            if item == "R":
                out.append(Replicate())
            elif m := re.fullmatch(r"S\((-?\d+)\)", item):
                out.append(Shard(int(m.group(1))))
            elif m := re.fullmatch(r"P\((\w+)\)", item):
                out.append(Partial(m.group(1)))
            else:
                raise ValueError(f"ShardSpec.parse({text!r}): {item!r} is not S(d), R or P(op)")
        return ShardSpec(out, mutable)


@torch.library.custom_op("dtensor_graph::shard_hint", mutates_args=())
def _hint_op(x: torch.Tensor, spec: str) -> torch.Tensor:
    return x.clone()  # a custom op may not return its input; only traced, never run


@_hint_op.register_fake
def _(x: torch.Tensor, spec: str) -> torch.Tensor:
    return torch.empty_like(x)


def _hint_backward(ctx, grad: torch.Tensor):  # noqa: ANN001 - autograd's signature
    return grad, None


_hint_op.register_autograd(_hint_backward)

HINT_OP = torch.ops.dtensor_graph.shard_hint.default


def shard_hint(x: torch.Tensor, spec: ShardSpec) -> torch.Tensor:
    """Annotate ``x`` with ``spec`` for ``dtensor.graph``: the identity in eager code,
    a ``shard_hint`` node in a captured graph.

    >>> from dtensor import Shard, Replicate
    >>> t = torch.ones(2)
    >>> shard_hint(t, ShardSpec([Shard(0)])) is t
    True
    """
    if not isinstance(spec, ShardSpec):
        raise TypeError(f"shard_hint(x, spec): spec must be a ShardSpec, got {spec!r}")
    if not _capturing.get():
        return x
    return _hint_op(x, str(spec))


@contextlib.contextmanager
def capturing() -> Iterator[None]:
    """Within the block, ``shard_hint`` records hint nodes (used by ``capture``)."""
    token = _capturing.set(True)
    try:
        yield
    finally:
        _capturing.reset(token)
