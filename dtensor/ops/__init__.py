"""Sharding rules, one module per op family; importing this package registers them all.

Family modules are imported before ``pointwise``, which registers every remaining aten
overload tagged ``torch.Tag.pointwise``: a family's own rule wins over the generic one.

Asking about one op: ``REGISTRY`` maps each aten overload to its rule, so ``op in REGISTRY``
says whether it has one and ``REGISTRY.get(op)`` returns it. The strategies a rule offers for
a call are ``dtensor.ops.propagate.candidates(spec)`` (every combination over the mesh dims,
cheapest first; ``dtensor.ops.soundness.op_spec`` describes a call on plain tensors, each
Replicate). ``python -m opdb_tests.check OP`` answers all of it for an op and checks that the
strategies hold on its OpInfo samples (docs/coverage.md, "Asking about one op").

>>> import torch
>>> from dtensor.ops.propagate import candidates
>>> from dtensor.ops.soundness import op_spec
>>> torch.ops.aten.cumsum.default in REGISTRY, torch.ops.aten.bincount.default in REGISTRY
(True, False)
>>> spec = op_spec(torch.ops.aten.cumsum.default, (torch.ones(4, 6), 1), {}, mesh_shape=(2,))
>>> [f"{c.inputs[0][0]}->{c.outputs[0][0]}" for c in candidates(spec)]   # cumsum over dim 1
['R->R', 'S(0)->S(0)']
"""

from dtensor.ops import (basic, indexing, losses, matmul, misc, norms,  # noqa: F401
                         reductions, views)
from dtensor.ops import attention  # noqa: F401
from dtensor.ops import foreach  # noqa: F401
from dtensor.ops import diagonal, linalg, padding, pooling, upsampling  # noqa: F401
from dtensor.ops import aliases, complex_views, fft, image, legacy_norm  # noqa: F401
from dtensor.ops import distances, scatter_views, selection, trilinear  # noqa: F401
from dtensor.ops import pointwise  # noqa: F401  (last: see above)
from dtensor.ops.registry import REGISTRY, OpSpec, Strategy, TensorSpec, sharding_rule

__all__ = ["REGISTRY", "OpSpec", "Strategy", "TensorSpec", "sharding_rule"]
