"""simpg behaving as a backend with fewer native collectives than its own full set.

Note [behaving as gloo]
Libraries ask a group what it runs natively (``collective_capabilities``, see
``SimProcessGroup``) and build what is missing from ops every backend has. A simulator that
declares everything never runs those fallbacks, and one that declares less but still runs
every op cannot catch a library that ignores the declaration. So a profile does both: the
world's groups declare the profile's set (a group class per profile, since a library may
cache the answer per group class), and each rank refuses, at once and on its own thread, a
call the profile lacks, as gloo raises on the calling process. Profiles:

- ``"full"``: everything (the default);
- ``"gloo"``: gloo in torch 2.13: no list-form all_gather or all_to_all with tensors of
  different shapes, and all_gather_into_tensor only into the inputs concatenated along dim 0
  (gloo raises "invalid tensor size" for an output of shape (n, *input) that NCCL takes);
  reduce_scatter and ReduceOp.AVG run;
- ``"portable"``: none of the optional ops: no uneven list all_gather or all_to_all, no
  reduce_scatter (list or tensor form), no AVG.

>>> import torch, torch.distributed as dist, simpg
>>> def body():
...     outs = [torch.empty(k + 1) for k in range(2)]  # uneven: gloo has no such all_gather
...     dist.all_gather(outs, torch.ones(dist.get_rank() + 1))
>>> try:
...     simpg.run(body, 2, capabilities="gloo")
... except simpg.UnsupportedCollectiveError as e:
...     print(str(e).split(":")[0])
all_gather with tensors of different shapes
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import asdict, dataclass

from simpg.errors import SimpgError


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a profile runs natively; the field names are those groups declare."""

    name: str
    uneven_all_gather: bool  # list-form all_gather with tensors of different shapes
    uneven_all_to_all: bool  # list-form all_to_all with tensors of different shapes
    reduce_scatter: bool  # reduce_scatter, list and tensor forms
    avg: bool  # ReduceOp.AVG
    # all_gather_into_tensor into any output with n x the input's elements (NCCL, simpg);
    # not declared: no library asks, and gloo's rule (outputs concatenated along dim 0) is
    # what portable code follows anyway
    any_gather_output_shape: bool = True

    def declared(self) -> dict[str, bool]:
        """The ``collective_capabilities`` dict a group of this profile carries."""
        fields = asdict(self)
        del fields["name"], fields["any_gather_output_shape"]
        return fields


PROFILES: dict[str, Capabilities] = {
    "full": Capabilities("full", True, True, True, True),
    "gloo": Capabilities("gloo", uneven_all_gather=False, uneven_all_to_all=False,
                         reduce_scatter=True, avg=True, any_gather_output_shape=False),
    "portable": Capabilities("portable", False, False, False, False, False),
}

_current: contextvars.ContextVar[Capabilities | None] = contextvars.ContextVar(
    "simpg_capabilities", default=None)


class UnsupportedCollectiveError(SimpgError):
    """A rank called a collective that the backend simpg behaves as lacks
    (Note [behaving as gloo]); gloo raises on the calling process the same way."""


def resolve(profile: str | None) -> Capabilities:
    """The profile named ``profile``, else the innermost ``behave_as`` block's, else full."""
    if profile is None:
        return _current.get() or PROFILES["full"]
    caps = PROFILES.get(profile) if isinstance(profile, str) else None
    if caps is None:
        raise ValueError(f"capabilities={profile!r}: expected one of "
                         f"{', '.join(map(repr, PROFILES))}")
    return caps


@contextlib.contextmanager
def behave_as(profile: str) -> Iterator[Capabilities]:
    """Inside the block, ``simpg.run`` worlds behave as ``profile`` unless given one.

    >>> import simpg, torch.distributed as dist
    >>> with simpg.behave_as("portable"):
    ...     simpg.run(lambda: dist.group.WORLD.collective_capabilities["avg"], 2)
    [False, False]
    """
    token = _current.set(resolve(profile))
    try:
        yield _current.get()  # type: ignore[misc]
    finally:
        _current.reset(token)


def refuse(caps: Capabilities, what: str, why: str) -> UnsupportedCollectiveError:
    return UnsupportedCollectiveError(
        f"{what}: simpg behaves as {caps.name!r} here (capabilities={caps.name!r}), {why}; "
        "ask the group's collective_capabilities and use an op it declares")
