"""Pipeline parallelism: a model cut into stages that live on the coordinates of a pp mesh
dim, micro-batches flowing through a schedule, each stage free to be tensor-parallel or
fully sharded on its own sub-mesh (torch.distributed.pipelining's names: ``PipelineStage``,
``ScheduleGPipe``, ``Schedule1F1B``)."""

from dtensor.pipelining.schedules import PipelineScheduleSingle, Schedule1F1B, ScheduleGPipe
from dtensor.pipelining.stage import PipelineStage, PipeliningError

__all__ = ["PipelineScheduleSingle", "PipelineStage", "PipeliningError", "Schedule1F1B",
           "ScheduleGPipe"]
