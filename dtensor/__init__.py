"""dtensor: our own DTensor runtime. This file only re-exports the public names; the
layers below are ``dtensor.redistribute`` (plans and moves between placements),
``dtensor.comm`` (collectives), ``dtensor.ops`` (sharding rules), ``dtensor.dispatch`` (running
ops on DTensors), and, on top, ``dtensor.parallel``, ``dtensor.checkpoint``, ``dtensor.graph``,
``dtensor.experimental``. docs/architecture.md maps them."""

from dtensor.layout import chunk_bounds, local_shape, local_slices, mesh_coordinates
from dtensor.placements import (Partial, Placement, PlacementError, PlacementTypeError,
                                Replicate, Shard, normalize_placements)
from dtensor.mesh import (DeviceMesh, MeshDimError, MeshError, MeshSpec, current_mesh,
                          init_device_mesh)
from dtensor.tensor import DTensor, LocalTensorTypeError
from dtensor.api import distribute_tensor, empty, full, ones, rand, randn, zeros
from dtensor.dispatch import NoShardingRuleError, check_replicated, fallback_policy
from dtensor.foreign import MixedDTensorError
from dtensor.dispatch.outside_mesh import OutsideMeshError
from dtensor import decompositions  # noqa: F401,E402  (registers them: Note [decompositions])
from dtensor.parallel.api import distribute_module  # noqa: E402  (torch exports it here too)

import torch as _torch  # noqa: E402
from dtensor import mesh as _mesh, tensor as _tensor  # noqa: E402

# Note [weights_only loading]
# torch.load's default (weights_only=True) calls only allow-listed globals. A DTensor pickles
# as tensor._rebuild(piece, mesh, placements, shape, stride, requires_grad), a mesh as
# mesh._restore_mesh(device type, ranks, names), a placement as its constructor: these are
# what we list. Each validates its arguments (a crafted file can pass any loadable value) and
# runs no user code. The classes DTensor and DeviceMesh are not listed, unlike torch's: their
# pickles never name them, and listing them would let a file build an instance bypassing
# __init__ (NEWOBJ + BUILD setting arbitrary attributes).
_torch.serialization.add_safe_globals(
    [_tensor._rebuild, _mesh._restore_mesh, Shard, Replicate, Partial])

__all__ = [
    "Partial", "Placement", "PlacementError", "PlacementTypeError", "Replicate", "Shard",
    "chunk_bounds", "local_shape", "local_slices", "mesh_coordinates", "normalize_placements",
    "DeviceMesh", "MeshDimError", "MeshError", "MeshSpec", "current_mesh", "init_device_mesh",
    "DTensor", "distribute_module", "distribute_tensor", "empty", "full", "ones", "rand",
    "randn", "zeros",
    "LocalTensorTypeError", "MixedDTensorError", "NoShardingRuleError", "OutsideMeshError",
    "check_replicated", "fallback_policy",
]

# Note [torch's error types]
# A program written for torch.distributed.tensor catches torch's exception types. Ours keep
# their own names and wording and also subclass the builtin type torch raises for the same
# mistake, so that `except RuntimeError` written for torch catches ours: MeshError,
# PlacementError and ShardingError are RuntimeErrors as well as ValueErrors, MeshDimError is a
# KeyError and an IndexError, Shard("0") a TypeError, from_local of a DTensor a RuntimeError
# as well as a TypeError. tests/test_dropin_errors.py checks each case against torch.

