"""Sharding rules, one module per op family; importing this package registers them all.

Family modules are imported before ``pointwise``, which registers every remaining aten
overload tagged ``torch.Tag.pointwise``: a family's own rule wins over the generic one.
"""

from dtensor.ops import (basic, indexing, losses, matmul, misc, norms,  # noqa: F401
                         reductions, views)
from dtensor.ops import attention  # noqa: F401
from dtensor.ops import foreach  # noqa: F401
from dtensor.ops import diagonal, linalg, padding, pooling, upsampling  # noqa: F401
from dtensor.ops import aliases, complex_views, fft, image, legacy_norm  # noqa: F401
from dtensor.ops import elementwise_more, losses_more, reductions_more, selection  # noqa: F401
from dtensor.ops import indexing_more, scatter_views, trilinear  # noqa: F401
from dtensor.ops import distances, image_backward, norms_more, scatter_more  # noqa: F401
from dtensor.ops import pointwise  # noqa: F401  (last: see above)
from dtensor.ops.registry import REGISTRY, OpSpec, Strategy, TensorSpec, sharding_rule

__all__ = ["REGISTRY", "OpSpec", "Strategy", "TensorSpec", "sharding_rule"]
