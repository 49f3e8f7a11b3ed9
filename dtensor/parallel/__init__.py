"""Parallel training on DTensors, with the names of ``torch.distributed.tensor.parallel``:
tensor/sequence-parallel styles applied by module path, ``distribute_module``, fully sharded
and replicated data parallel (``fully_shard``, ``replicate``) and ``loss_parallel``."""

from dtensor.parallel.api import distribute_module, parallelize_module
from dtensor.parallel.loss import LossParallelError, loss_parallel
from dtensor.parallel.fsdp import FSDPModule, fully_shard, replicate, state_bytes
from dtensor.parallel.mixed_precision import MixedPrecisionPolicy
from dtensor.parallel.errors import (AlreadyParallelizedError, FullyShardError,
                                     ParallelPlanError, ParallelPlanTypeError,
                                     ParallelStyleError, StyleLayoutsError,
                                     UnsupportedModuleError)
from dtensor.parallel.styles import (ColwiseParallel, ParallelStyle, PrepareModuleInput,
                                     PrepareModuleInputOutput, PrepareModuleOutput,
                                     RowwiseParallel, SequenceParallel)

__all__ = [
    "AlreadyParallelizedError", "ParallelPlanTypeError", "StyleLayoutsError",
    "UnsupportedModuleError",
    "ColwiseParallel", "FSDPModule", "FullyShardError", "LossParallelError",
    "MixedPrecisionPolicy",
    "ParallelPlanError", "ParallelStyle", "ParallelStyleError", "PrepareModuleInput",
    "PrepareModuleInputOutput", "PrepareModuleOutput", "RowwiseParallel", "SequenceParallel",
    "distribute_module", "parallelize_module", "fully_shard", "loss_parallel", "replicate",
    "state_bytes",
]
