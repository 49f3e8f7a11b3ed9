"""Ops that run as programs of local steps and collectives instead of one sharding rule
(Note [decompositions] in ``dtensor.dispatch.decomposition_table``): vector norms over a
sharded dim, ``_foreach_norm`` over sharded lists, and the random ops that draw the same
numbers for any mesh (Note [sharded random ops] in ``random``). Each module
registers its decompositions when imported; ``dtensor`` imports them all."""

from dtensor.decompositions import foreach_norm, random, vector_norm

__all__ = ["foreach_norm", "random", "vector_norm"]
