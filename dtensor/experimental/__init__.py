"""Experimental parallelism, at the names of ``torch.distributed.tensor.experimental``."""

from dtensor.parallel.context import ContextParallelError, context_parallel

__all__ = ["ContextParallelError", "context_parallel"]
