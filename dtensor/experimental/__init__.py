"""Experimental parallelism, at the names of ``torch.distributed.tensor.experimental``."""

from dtensor.experimental._attention import (context_parallel, get_rotate_method,
                                             set_rotate_method)
from dtensor.parallel.context import ContextParallelError

__all__ = ["ContextParallelError", "context_parallel", "get_rotate_method", "set_rotate_method"]
