"""Errors of whole-graph sharding, carrying the values they are about."""

from __future__ import annotations


class GraphShardingError(ValueError):
    """Base of the errors of ``dtensor.graph``."""


class AnnotationError(GraphShardingError):
    """An annotation that cannot hold: a Shard dim beyond the value's rank, the wrong number
    of placements for the mesh, an unknown value, two different immutable specs on one value.
    ``values`` names the values involved.

    >>> str(AnnotationError(["x"], "bad"))
    'x: bad'
    """

    def __init__(self, values: list[str], message: str) -> None:
        self.values = list(values)
        super().__init__(f"{', '.join(self.values)}: {message}")


class CaptureError(GraphShardingError):
    """The function could not be captured as an aten graph we can shard."""
