"""What the models' tensor-parallel plans share: which family of styles and placements to use.

A plan is written once against names (``ColwiseParallel``, ``Shard``, ...) and built from
either family: ours (``dtensor.parallel`` with ``dtensor.Shard``/``Replicate``) or torch's
(``torch.distributed.tensor.parallel`` with ``torch.distributed.tensor.Shard``/...), so a
benchmark can run both side by side with the identical plan.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, NamedTuple


class Family(NamedTuple):
    """The style classes and placement classes one plan is built from."""

    ColwiseParallel: Any
    RowwiseParallel: Any
    SequenceParallel: Any
    PrepareModuleInput: Any
    PrepareModuleOutput: Any
    Shard: Any
    Replicate: Any


def family(styles: ModuleType | None = None, placements: ModuleType | None = None) -> Family:
    """The family of ``styles`` (default ``dtensor.parallel``). Placements come from
    ``placements`` if given, else from the styles module's parent package (``dtensor`` for
    ``dtensor.parallel``, ``torch.distributed.tensor`` for ``torch.distributed.tensor.parallel``):
    a plan must not mix our placements with torch's styles or the other way round."""
    if styles is None:
        styles = importlib.import_module("dtensor.parallel")
    if placements is None:
        parent = styles.__name__.rpartition(".")[0]
        if not parent:
            raise ValueError(f"cannot tell where the placements of styles module "
                             f"{styles.__name__!r} live: pass placements= explicitly")
        placements = importlib.import_module(parent)
    names = Family._fields
    missing = [n for n in names[:5] if not hasattr(styles, n)]
    missing += [n for n in names[5:] if not hasattr(placements, n)]
    if missing:
        raise ValueError(f"{styles.__name__} / {placements.__name__} lack {missing}: expected "
                         "a module of tensor-parallel styles like torch.distributed.tensor."
                         "parallel and one of placements like torch.distributed.tensor")
    return Family(*(getattr(styles, n) for n in names[:5]),
                  *(getattr(placements, n) for n in names[5:]))
