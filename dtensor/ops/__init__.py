"""Sharding rules, one module per op family; importing this package registers them all."""

from dtensor.ops import basic, pointwise  # noqa: F401  (registration side effects)
from dtensor.ops.registry import REGISTRY, OpSpec, Strategy, TensorSpec, sharding_rule

__all__ = ["REGISTRY", "OpSpec", "Strategy", "TensorSpec", "sharding_rule"]
