"""Errors of ``dtensor.parallel``: each says what was wrong and what was expected, and
carries the objects involved as fields."""

from __future__ import annotations

from typing import Sequence


class ParallelStyleError(ValueError):
    """A style applied where it does not fit: wrong module type, wrong mesh, bad layouts."""


class ParallelPlanError(ValueError):
    """A plan key that names no submodule (``closest`` lists the nearest real paths)."""

    def __init__(self, key: str, root: str, closest: Sequence[str]) -> None:
        self.key, self.root, self.closest = key, root, tuple(closest)
        hint = (f"; closest module paths: {', '.join(map(repr, closest))}" if closest
                else "; the plan's keys are module paths as in named_modules(), with * wildcards")
        super().__init__(f"parallelize_plan key {key!r} matches no submodule of {root}{hint}")


class FullyShardError(ValueError):
    """``fully_shard``/``replicate`` misuse: applied twice, a mesh that does not compose with
    the parameters' mesh, a parameter that cannot be laid out."""
