"""Redistribution: moving a tensor's pieces from one placement to another. ``planner``
chooses the steps (the fewest bytes), ``collective_layout`` lays a step's pieces out as one
collective's buffers, ``execute`` runs a plan over real process groups (compiled into
programs, cached), ``reference`` runs it on every rank's pieces in one process (the
definition the executor is tested against), ``cross_mesh`` moves between two meshes."""

from dtensor.redistribute.planner import Step, plan, plan_bytes, step_bytes
from dtensor.redistribute.reference import redistribute_locals, shard_full, unshard
from dtensor.redistribute.execute import program, program_to, redistribute_local_tensor

__all__ = ["Step", "plan", "plan_bytes", "program", "program_to", "redistribute_local_tensor",
           "redistribute_locals", "shard_full", "step_bytes", "unshard"]
