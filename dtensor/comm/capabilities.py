"""Which native collectives a process group runs correctly: its capabilities.

Note [Backend capabilities]
Backends differ in what they implement, not in what they mean: gloo (torch 2.13) rejects
list-form all_gather and all_to_all whose tensors differ in size, though it has
all_to_all_single with uneven splits. A group that describes itself (a
``collective_capabilities`` dict with the fields of ``Capabilities``, as simpg's groups
carry) is taken at its word; for the c10d backends, which do not, ``CAPABILITIES`` says per
backend name which native ops to use. The rest get a correct fallback built from ops every
backend has. This is about what a backend implements; dtensor names no simulator. An unknown
backend gets the portable fallbacks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.distributed as dist


@dataclass(frozen=True, slots=True)
class Capabilities:
    """Which native c10d ops a backend runs correctly (Note [Backend capabilities])."""

    uneven_all_gather: bool  # list-form all_gather with tensors of different shapes
    uneven_all_to_all: bool  # list-form all_to_all with tensors of different shapes
    reduce_scatter: bool  # list-form reduce_scatter, pieces of different shapes allowed
    avg: bool  # ReduceOp.AVG on floating tensors


_FULL = Capabilities(True, True, True, True)
# Only all_reduce (sum/max/min/product), all_gather_single and all_to_all_single with splits.
PORTABLE = Capabilities(False, False, False, False)
CAPABILITIES: dict[str, Capabilities] = {
    "nccl": _FULL,  # uneven list forms run as grouped broadcasts / point-to-point
    # Checked on torch 2.13: uneven list all_gather / all_to_all raise "invalid tensor size";
    # reduce_scatter (uneven too) and AVG work.
    "gloo": Capabilities(uneven_all_gather=False, uneven_all_to_all=False,
                         reduce_scatter=True, avg=True),
}


_DECLARED: dict[type, Capabilities] = {}  # per group class that describes itself


def capabilities(group: dist.ProcessGroup) -> Capabilities:
    """What ``group`` declares (``collective_capabilities``), else its backend's entry in
    ``CAPABILITIES``; unknown backends get ``PORTABLE``."""
    declared = getattr(group, "collective_capabilities", None)
    if declared is None:
        return CAPABILITIES.get(str(dist.get_backend(group)).lower(), PORTABLE)
    caps = _DECLARED.get(type(group))
    if caps is None:
        caps = _DECLARED[type(group)] = Capabilities(**declared)
    return caps
