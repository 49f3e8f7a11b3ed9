"""dtensor: our own DTensor runtime. This file only re-exports the public names."""

from dtensor.layout import chunk_bounds, local_shape, local_slices, mesh_coordinates
from dtensor.local_redistribute import redistribute_locals, shard_full, unshard
from dtensor.placements import (Partial, Placement, PlacementError, Replicate, Shard,
                                normalize_placements)
from dtensor.planner import Step, plan, plan_bytes, step_bytes
from dtensor.mesh import (DeviceMesh, MeshDimError, MeshError, MeshSpec, current_mesh,
                          init_device_mesh)
from dtensor.redistribute import redistribute_local_tensor
from dtensor.tensor import DTensor
from dtensor.api import distribute_tensor, empty, full, ones, rand, randn, zeros
from dtensor.dispatch import NoShardingRuleError, fallback_policy
from dtensor.foreign import MixedDTensorError
from dtensor import decompositions, foreach_norm, random_ops  # noqa: F401,E402  (Note [decompositions])

__all__ = [
    "Partial", "Placement", "PlacementError", "Replicate", "Shard", "Step", "chunk_bounds",
    "local_shape", "local_slices", "mesh_coordinates", "normalize_placements", "plan",
    "plan_bytes", "redistribute_locals", "shard_full", "step_bytes", "unshard",
    "DeviceMesh", "MeshDimError", "MeshError", "MeshSpec", "current_mesh", "init_device_mesh",
    "redistribute_local_tensor",
    "DTensor", "distribute_tensor", "empty", "full", "ones", "rand", "randn", "zeros",
    "MixedDTensorError", "NoShardingRuleError", "fallback_policy",
]
