"""simpg: torch.distributed on N simulated ranks in one process.

>>> import torch, torch.distributed as dist, simpg
>>> simpg.run(lambda: dist.get_rank(), 3)
[0, 1, 2]
"""

from simpg import c10d_state as _c10d_state
from simpg import mesh_identity as _mesh_identity
from simpg import testing  # noqa: F401 - torch's DTensorTestBase on simulated ranks
from simpg.backend import register as _register
from simpg.capabilities import UnsupportedCollectiveError, behave_as
from simpg.costmodel import (CostModel, LinkModel, OpSummary, ScheduledCollective,
                             TraceEstimate)
from simpg.errors import (
                          CollectiveMismatchError,
                          DeadlockError,
                          RankAbandoned,
                          RankFailedError,
                          SimpgError,
                          UnwaitedWorkError,
                          UnwaitedWorkWarning,
)
from simpg.faults import RaiseAt, StallAt
from simpg.isolation import IsolationWarning
from simpg.records import CollectiveRecord
from simpg.runner import run
from simpg.subtests import SubtestFailure, SubtestsFailed, run_subtests
from simpg.trace import Trace, trace

_c10d_state.install()
_mesh_identity.install()
_register()

__all__ = [
    "CollectiveMismatchError",
    "CollectiveRecord",
    "CostModel",
    "LinkModel",
    "OpSummary",
    "ScheduledCollective",
    "TraceEstimate",
    "DeadlockError",
    "IsolationWarning",
    "RaiseAt",
    "RankAbandoned",
    "RankFailedError",
    "SimpgError",
    "StallAt",
    "SubtestFailure",
    "SubtestsFailed",
    "Trace",
    "UnwaitedWorkError",
    "UnwaitedWorkWarning",
    "UnsupportedCollectiveError",
    "behave_as",
    "run",
    "run_subtests",
    "trace",
]
