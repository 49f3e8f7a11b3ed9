"""Pipeline parallelism: a model cut into stages that live on the coordinates of a pp mesh
dim, micro-batches flowing through a schedule, each stage free to be tensor-parallel or
fully sharded on its own sub-mesh (torch.distributed.pipelining's names: ``PipelineStage``,
``ScheduleGPipe``, ``Schedule1F1B``, ``ScheduleLoopedBFS``, ``ScheduleInterleaved1F1B``,
``ScheduleInterleavedZeroBubble``, ``ScheduleZBVZeroBubble``, ``ScheduleDualPipeV``; the tracer front end
``pipeline(module, mb_args, split_spec=...)``, ``pipe_split()``, ``SplitPoint``, ``Pipe``)."""

from dtensor.pipelining.schedules import (PipelineScheduleMulti, PipelineScheduleSingle,
                                         Schedule1F1B, ScheduleDualPipeV, ScheduleGPipe,
                                         ScheduleInterleaved1F1B,
                                         ScheduleInterleavedZeroBubble, ScheduleLoopedBFS,
                                         ScheduleZBVZeroBubble)
from dtensor.pipelining.stage import PipelineStage, PipeliningError
from dtensor.pipelining.tracer import Pipe, SplitPoint, pipe_split, pipeline

__all__ = ["Pipe", "PipelineScheduleMulti", "PipelineScheduleSingle", "PipelineStage",
           "PipeliningError", "Schedule1F1B", "ScheduleDualPipeV", "ScheduleGPipe",
           "ScheduleInterleaved1F1B", "ScheduleInterleavedZeroBubble", "ScheduleLoopedBFS",
           "ScheduleZBVZeroBubble", "SplitPoint", "pipe_split", "pipeline"]
