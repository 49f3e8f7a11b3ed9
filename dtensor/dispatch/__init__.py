"""Dispatch: what happens when an aten op meets DTensors. ``entry`` is
``DTensor.__torch_dispatch__`` (the fast path; ``native`` is its compiled form), ``general``
the path every other call takes, ``fallback`` what an op without a rule does, ``plans`` the
per-call cache both paths share, ``policy`` the user's controls, ``decomposition_table`` the
ops that run as programs, ``outside_mesh`` ops on ranks that hold no piece, ``checks`` the
opt-in cross-rank checks (torch's DTensors met by mistake: ``dtensor.foreign``)."""

from dtensor.dispatch.decomposition_table import DECOMPOSITIONS, register_decomposition
from dtensor.dispatch.policy import NoShardingRuleError, check_replicated, fallback_policy
from dtensor.dispatch.entry import bind, torch_dispatch

__all__ = ["DECOMPOSITIONS", "NoShardingRuleError", "bind", "check_replicated",
           "fallback_policy", "register_decomposition", "torch_dispatch"]
