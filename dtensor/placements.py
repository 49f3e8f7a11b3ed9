"""Placements: how one mesh dimension lays out a tensor.

``Shard(dim)`` splits tensor dim ``dim`` across the mesh dimension (``torch.chunk`` semantics),
``Replicate()`` gives every rank the whole extent, ``Partial(op)`` gives every rank a full-size
addend (or max/min candidate) whose reduction over the mesh dimension is the value.

They are frozen value objects: hashable, usable as cache keys, ``repr`` evals back.

>>> Shard(0), str(Shard(0)), str(Partial())
(Shard(dim=0), 'S(0)', 'P(sum)')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

REDUCE_OPS = ("sum", "avg", "max", "min", "product")
# torch spells the product "product" (c10d's ReduceOp.PRODUCT); "prod" is read as it too
_ALIASES = {"prod": "product"}

# Note [Mixing Partial ops]
# A placement list with Partial on several mesh dims means "reduce over all of them". Sum and
# avg are both linear, so they commute with each other; max and min commute only with
# themselves, as product does. [P(sum), P(max)] would depend on which mesh dim is reduced
# first, so normalize_placements rejects lists that mix ops from different families.
_OP_FAMILY = {"sum": "linear", "avg": "linear", "max": "max", "min": "min", "product": "product"}


def mixes_partial_families(placements: Sequence[object]) -> bool:
    """True if ``placements`` holds Partials that do not commute (Note [Mixing Partial ops])."""
    return len({_OP_FAMILY[p.reduce_op] for p in placements if isinstance(p, Partial)}) > 1


class PlacementError(ValueError, RuntimeError):
    """A placement, or a list of placements, that cannot describe the tensor on the mesh. A
    ``RuntimeError`` too, as torch's ``from_local`` and ``distribute_tensor`` raise for most
    of these (Note [torch's error types] in dtensor/__init__.py).

    >>> try:
    ...     normalize_placements([Shard(2)], ndim=1, mesh_ndim=1)
    ... except PlacementError as e:
    ...     print(e)
    Shard(2) is out of range for a 1-d tensor: expected a dim in [-1, 0]
    """


class PlacementTypeError(PlacementError, TypeError):
    """A placement built from a value of the wrong type (``Shard("0")``): a ``TypeError``
    too, as torch's is."""


BALANCED = "balanced"
MEASURED = "measured"  # only DTensor.from_local takes it: it measures every rank's piece


@dataclass(frozen=True, slots=True)
class Shard:
    """Split tensor dim ``dim`` across one mesh dimension, like ``torch.chunk`` by default.

    A negative ``dim`` counts from the end, as in torch: it is resolved against the tensor
    wherever placements meet one (``normalize_placements``), so specs only hold dims >= 0.

    ``sizes`` is the split rule (Note [split rules] in dtensor/layout.py): None for
    ``torch.chunk``'s pieces, ``"balanced"`` for pieces that differ by at most one element
    (the first ranks hold the larger ones), or one size per rank of the mesh dimension,
    summing to the extent that rank's mesh dim splits (``Shard(0, sizes=(3, 5, 0, 2))``).
    ``DTensor.from_local`` also takes ``sizes="measured"``: it gathers every rank's piece size
    and gives the DTensor those explicit sizes.

    ``block`` makes the shard strided (Note [block shards] in dtensor/layout.py): the extent
    is read as runs of ``block`` elements, each run is split across the mesh dim (by the
    split rule), and a rank holds its part of every run. It is what flattening a sharded dim
    into the dims outside it gives: (batch, heads) with heads sharded, flattened, is
    ``Shard(0, block=heads)``. torch's ``_StridedShard(d, split_factor=k)`` is
    ``Shard(d, block=extent // k)``.

    >>> Shard(1), Shard(0, sizes=[3, 5, 0, 2]), str(Shard(0, sizes="balanced"))
    (Shard(dim=1), Shard(dim=0, sizes=(3, 5, 0, 2)), 'S(0)[balanced]')
    >>> Shard(0, block=4), str(Shard(0, block=4)), str(Shard(0, "balanced", block=6))
    (Shard(dim=0, block=4), 'S(0)[block 4]', 'S(0)[balanced, block 6]')
    """

    dim: int
    sizes: tuple[int, ...] | str | None = None
    block: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.dim, bool) or not isinstance(self.dim, int):
            raise PlacementTypeError(f"Shard(dim={self.dim!r}): dim must be an int")
        block = self.block
        if block is not None and (isinstance(block, bool) or not isinstance(block, int)
                                  or block < 2):
            raise PlacementTypeError(
                f"Shard({self.dim}, block={block!r}): expected None (one run: the whole "
                f"extent) or a run length >= 2 (a run of 1 would give every element to the "
                f"first rank)")
        sizes = self.sizes
        if sizes is None or sizes == BALANCED or sizes == MEASURED:
            return
        if isinstance(sizes, str) or not isinstance(sizes, Sequence) or not sizes or any(
                isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in sizes):
            raise PlacementTypeError(
                f"Shard({self.dim}, sizes={sizes!r}): expected None (torch.chunk's pieces), "
                f"{BALANCED!r}, {MEASURED!r} (DTensor.from_local only), or one size >= 0 per "
                f"rank of the mesh dim, e.g. (3, 5, 0, 2)")
        object.__setattr__(self, "sizes", tuple(int(n) for n in sizes))

    def __repr__(self) -> str:
        sizes = "" if self.sizes is None else f", sizes={self.sizes!r}"
        block = "" if self.block is None else f", block={self.block}"
        return f"Shard(dim={self.dim}{sizes}{block})"

    def __str__(self) -> str:
        if self.sizes is None and self.block is None:
            return f"S({self.dim})"
        rule = [] if self.sizes is None else [
            self.sizes if isinstance(self.sizes, str) else ",".join(map(str, self.sizes))]
        rule += [] if self.block is None else [f"block {self.block}"]
        return f"S({self.dim})[{', '.join(rule)}]"

    def __reduce__(self) -> tuple:
        # Note [weights_only loading]: through the constructor
        if self.block is not None:
            return (Shard, (self.dim, self.sizes, self.block))
        return (Shard, (self.dim,) if self.sizes is None else (self.dim, self.sizes))

    def with_dim(self, dim: int) -> Shard:
        """The same split rule (and block) on another tensor dim."""
        return Shard(dim, self.sizes, self.block)

    @property
    def is_plain(self) -> bool:
        """Whether this is ``torch.chunk``'s shard: no split rule, no block."""
        return self.sizes is None and self.block is None

    def is_shard(self, dim: int | None = None) -> bool:
        """True (for ``dim`` None or this shard's dim), as torch's placements answer."""
        return dim is None or dim == self.dim

    def is_replicate(self) -> bool:
        return False

    def is_partial(self, reduce_op: str | None = None) -> bool:
        return False


def has_split_rule(placements: Sequence[object]) -> bool:
    """Whether any placement is a Shard cut otherwise than by ``torch.chunk``: a split rule
    or a block (Note [block shards] in dtensor/layout.py)."""
    return any(type(p) is Shard and (p.sizes is not None or p.block is not None)
               for p in placements)


def has_block(placements: Sequence[object]) -> bool:
    """Whether any placement is a strided Shard (``Shard(d, block=b)``)."""
    return any(type(p) is Shard and p.block is not None for p in placements)


def chunk_rule(placements: Sequence[Placement]) -> tuple[Placement, ...]:
    """``placements`` with every Shard cut by ``torch.chunk``'s rule (no split rule, no
    block)."""
    return tuple(Shard(p.dim) if type(p) is Shard and not p.is_plain else p
                 for p in placements)


@dataclass(frozen=True, slots=True)
class Replicate:
    """Every rank of the mesh dimension holds the whole extent.

    >>> Replicate()
    Replicate()
    """

    def __str__(self) -> str:
        return "R"

    def __reduce__(self) -> tuple:
        return (Replicate, ())

    def is_shard(self, dim: int | None = None) -> bool:
        return False

    def is_replicate(self) -> bool:
        return True

    def is_partial(self, reduce_op: str | None = None) -> bool:
        return False


@dataclass(frozen=True, slots=True)
class Partial:
    """Every rank holds a full-size piece; reducing them with ``reduce_op`` gives the value.

    >>> Partial("max"), Partial("prod")
    (Partial(reduce_op='max'), Partial(reduce_op='product'))
    """

    reduce_op: str = "sum"

    def __post_init__(self) -> None:
        if self.reduce_op in _ALIASES:
            object.__setattr__(self, "reduce_op", _ALIASES[self.reduce_op])
        if self.reduce_op not in REDUCE_OPS:
            raise PlacementError(
                f"Partial(reduce_op={self.reduce_op!r}): expected one of {', '.join(REDUCE_OPS)}"
            )

    def __str__(self) -> str:
        return f"P({self.reduce_op})"

    def __reduce__(self) -> tuple:
        return (Partial, (self.reduce_op,))

    def is_shard(self, dim: int | None = None) -> bool:
        return False

    def is_replicate(self) -> bool:
        return False

    def is_partial(self, reduce_op: str | None = None) -> bool:
        """True (for ``reduce_op`` None or this placement's op)."""
        return reduce_op is None or reduce_op == self.reduce_op


Placement = Shard | Replicate | Partial


def is_shard(p: Placement, dim: int | None = None) -> bool:
    """True for ``Shard`` (of ``dim`` when given). ``is_shard(Shard(1), 1)`` is True."""
    return isinstance(p, Shard) and (dim is None or p.dim == dim)


def is_replicate(p: Placement) -> bool:
    """True for ``Replicate()``."""
    return isinstance(p, Replicate)


def is_partial(p: Placement) -> bool:
    """True for ``Partial(...)``."""
    return isinstance(p, Partial)


def fmt_placements(placements: Sequence[Placement]) -> str:
    """Short form for logs and test ids: ``[S(0),R]``."""
    return "[" + ",".join(str(p) for p in placements) + "]"


def normalize_placements(
    placements: Sequence[Placement | int],
    ndim: int,
    mesh_ndim: int,
    *,
    shape: Sequence[int] | None = None,
) -> tuple[Placement, ...]:
    """Check ``placements`` against a tensor and a mesh; return them as a tuple.

    An ``int`` entry ``d`` stands for ``Shard(d)``; ints and ``Shard`` dims may be negative
    (counted from the end). ``shape``, when given, makes errors name it.

    >>> normalize_placements([-1, Replicate()], ndim=2, mesh_ndim=2)
    (Shard(dim=1), Replicate())
    """
    if len(placements) != mesh_ndim:
        raise PlacementError(
            f"{len(placements)} placements {_fmt_any(placements)} for a {mesh_ndim}-d mesh: "
            f"expected one placement per mesh dim ({mesh_ndim})"
        )
    out: list[Placement] = []
    for p in placements:
        if isinstance(p, int) and not isinstance(p, bool):
            dim = p
        elif isinstance(p, Shard):
            dim = p.dim
        elif isinstance(p, (Replicate, Partial)):
            out.append(p)
            continue
        else:
            raise PlacementError(
                f"{p!r} in {_fmt_any(placements)} is not a placement: expected Shard(dim), "
                f"Replicate(), Partial(op) or an int dim"
            )
        if not -ndim <= dim < ndim:  # the message is built only here: a hot path's call
            where = f"a {ndim}-d tensor" + (f" of shape {tuple(shape)}" if shape is not None
                                            else "")
            raise PlacementError(
                f"Shard({dim}) is out of range for {where}: expected a dim in "
                f"[{-ndim}, {ndim - 1}]"
            )
        out.append(Shard(dim % ndim) if isinstance(p, int) else p.with_dim(dim % ndim))
    families = sorted({_OP_FAMILY[p.reduce_op] for p in out if isinstance(p, Partial)})
    if len(families) > 1:
        raise PlacementError(
            f"{fmt_placements(out)} mixes Partial ops from different families ({families}): the "
            f"value would depend on which mesh dim is reduced first; expected sum/avg only, or "
            f"max only, min only or product only (see Note [Mixing Partial ops])"
        )
    return tuple(out)


def _fmt_any(placements: Sequence[object]) -> str:
    return "[" + ",".join(str(p) for p in placements) + "]"


Pl = tuple[Placement, ...]  # one placement per mesh dim
