"""The one registry of sharding rules, keyed on aten overloads.

A rule is a pure function of an ``OpSpec`` (global shapes, strides, dtypes and current
placements of the tensor arguments, the other arguments, the mesh shape) that returns every
valid strategy for ONE mesh dimension: the placement each tensor argument needs and the
placement each output then has. ``dtensor.ops.propagate`` takes the product over mesh dims,
prices each combination with the redistribute planner and picks the cheapest.

>>> from dtensor.placements import Replicate, Shard
>>> Strategy((Shard(0), Replicate()), (Shard(0),))   # mm: rows of A, all of B -> rows of C
Strategy(S(0),R->S(0))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from dtensor.layout import Box
from dtensor.placements import Placement, fmt_placements
from dtensor.spec import TensorSpec  # rules import it from here
from dtensor.symbolic import hash_or_none


def _kinds(values: Iterable[Any]) -> tuple:
    return tuple(_kinds(v) if type(v) is tuple else type(v) for v in values)


@dataclass(frozen=True, slots=True)
class OpSpec:
    """An op call as a rule sees it. ``args``/``kwargs`` hold TensorSpecs where tensors were
    (a tuple of them for a tensor list) and the other values as given (made hashable)."""

    op: Any  # torch._ops.OpOverload
    args: tuple
    kwargs: tuple[tuple[str, Any], ...]
    mesh_shape: tuple[int, ...]
    mesh_dim: int = 0  # the mesh dim a rule is asked about (its size: mesh_shape[mesh_dim])
    # the scalars' types: 2 == 2.0 == True, but mul.Scalar(x, 2.0) of an int x is a float
    _kinds: tuple = field(init=False, repr=False, default=())
    _hash: int | None = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_kinds", _kinds(self.args) + _kinds(v for _, v in self.kwargs))
        object.__setattr__(self, "_hash", hash_or_none(self.op, self.args, self.kwargs,
                                                       self.mesh_shape, self.mesh_dim))

    def __hash__(self) -> int:
        if self._hash is None:
            raise TypeError(f"an OpSpec of symbolic sizes ({self.op}) has no hash")
        return self._hash

    @property
    def symbolic(self) -> bool:
        return self._hash is None

    @property
    def mesh_dim_size(self) -> int:
        return self.mesh_shape[self.mesh_dim]

    def tensors(self) -> list[TensorSpec]:
        """Tensor arguments in flattening order: the order strategies list their inputs."""
        out: list[TensorSpec] = []
        for a in list(self.args) + [v for _, v in self.kwargs]:
            if isinstance(a, TensorSpec):
                out.append(a)
            elif isinstance(a, tuple):
                out.extend(x for x in a if isinstance(x, TensorSpec))
        return out

    def kwarg(self, name: str, default: Any = None) -> Any:
        for k, v in self.kwargs:
            if k == name:
                return v
        return default

    def arg(self, index: int, name: str, default: Any = None) -> Any:
        """Argument by position, else by keyword, else ``default``."""
        if index < len(self.args):
            return self.args[index]
        return self.kwarg(name, default)


@dataclass(frozen=True, slots=True)
class Strategy:
    """For one mesh dimension: the placement each tensor input needs, and the outputs'.

    ``local`` names a local function (``LOCAL_FUNCTIONS``) that each rank runs instead of the
    aten op on its pieces, for strategies where the per-rank computation differs from the op
    itself (Note [local functions])."""

    inputs: tuple[Placement, ...]
    outputs: tuple[Placement, ...]
    local: str | None = None

    def __repr__(self) -> str:
        local = f", local={self.local}" if self.local else ""
        return (f"Strategy({fmt_placements(self.inputs)[1:-1]}->"
                f"{fmt_placements(self.outputs)[1:-1]}{local})")


Rule = Callable[[OpSpec], Sequence[Strategy]]

# Note [local functions]
# Some strategies need each rank to compute something other than the aten op on its pieces:
# a vocab-sharded embedding looks up only the rows it holds, shifted by its offset, and writes
# zeros elsewhere, so the outputs are Partial(sum) addends. A local function gets the op, the
# local arguments and, per tensor input, the global box (start, stop per dim) its piece covers
# (from the layout, so any nesting of mesh dims works); the dispatcher and the soundness
# harness both call it, so what the harness proves is what runs.
LocalFunction = Callable[[Any, tuple, dict, Sequence["Box | None"]], Any]
LOCAL_FUNCTIONS: dict[str, LocalFunction] = {}


# Note [guarded local functions]
# A local function may hold only for some data: a weight sharded on its rows, looked up by
# ids sharded on a batch dim, is a local lookup when every rank's ids name rows that rank
# holds (what ``torch.vmap`` over ``F.embedding`` makes of stacked tables). Its guard says,
# from this rank's local arguments and boxes, whether the local function is right for them.
# The dispatcher asks every rank of the mesh (one small all-reduce) and, where any says no,
# runs the cheapest unguarded candidate instead; a guarded call never enters the fast path.
# The soundness harness checks such a strategy on the samples whose pieces pass the guard.
Guard = Callable[[Any, tuple, dict, Sequence["Box | None"]], bool]
GUARDS: dict[str, Guard] = {}


def local_function(name: str, *, guard: Guard | None = None
                   ) -> Callable[[LocalFunction], LocalFunction]:
    """Register a local function under ``name`` for ``Strategy(..., local=name)``; with a
    ``guard``, it runs only where the guard holds on every rank (Note [guarded local
    functions])."""

    def deco(fn: LocalFunction) -> LocalFunction:
        if name in LOCAL_FUNCTIONS:
            raise ValueError(f"local function {name!r} is already registered")
        LOCAL_FUNCTIONS[name] = fn
        if guard is not None:
            GUARDS[name] = guard
        return fn

    return deco


@dataclass
class Registry:
    """Rules by aten overload. The dispatcher is handed one registry; rule modules import the
    registry, never the tensor class."""

    rules: dict[Any, Rule] = field(default_factory=dict)

    def register(self, overloads: Iterable[Any], rule: Rule) -> None:
        for op in overloads:
            if op in self.rules and self.rules[op] is not rule:
                raise ValueError(f"{op} already has a sharding rule: "
                                 f"{self.rules[op].__module__}.{self.rules[op].__name__}")
            self.rules[op] = rule

    def get(self, op: Any) -> Rule | None:
        return self.rules.get(op)

    def __contains__(self, op: Any) -> bool:
        return op in self.rules


REGISTRY = Registry()

# Rules whose strategies pair positions one to one along the dims they shard, so they hold
# under any split rule (Note [split rules in propagation] in dtensor/ops/propagate.py); True
# for a rule that also tests every piece it shards (non-empty, equal), False for one that
# tests only the pieces a non-sum Partial output reduces
SPLIT_RULE_AWARE: dict[Rule, bool] = {}


# Rules that read their inputs' split rules themselves and keep them (each list position of
# a foreach op its own): they see the placements as held, and are not lifted
SPLIT_RULE_READERS: set[Rule] = set()


def takes_split_rules(rule: Rule | None = None, *, tests_pieces: bool = False,
                      reads: bool = False) -> Any:
    """Mark ``rule`` as holding under every split rule (Note [split rules in propagation]);
    ``tests_pieces`` where the rule's strategies depend on every sharded piece's size;
    ``reads`` where the rule sees the held placements and carries their rules itself."""
    def mark(r: Rule) -> Rule:
        if reads:
            SPLIT_RULE_READERS.add(r)
        else:
            SPLIT_RULE_AWARE[r] = tests_pieces
        return r

    return mark(rule) if rule is not None else mark


def sharding_rule(*overloads: Any) -> Callable[[Rule], Rule]:
    """Register the decorated function as the rule of each aten overload given."""

    def deco(rule: Rule) -> Rule:
        REGISTRY.register(overloads, rule)
        return rule

    return deco
