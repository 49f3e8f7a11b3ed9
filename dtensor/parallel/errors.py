"""Errors of ``dtensor.parallel``: each says what was wrong and what was expected, and
carries the objects involved as fields."""

from __future__ import annotations

from typing import Sequence


class ParallelStyleError(ValueError):
    """A style applied where it does not fit: wrong module type, wrong mesh, bad layouts.

    >>> import simpg
    >>> from torch import nn
    >>> from dtensor import init_device_mesh
    >>> from dtensor.parallel import ColwiseParallel, parallelize_module
    >>> def body():
    ...     try:
    ...         parallelize_module(nn.ReLU(), init_device_mesh("cpu", (2,)), ColwiseParallel())
    ...     except ParallelStyleError as e:
    ...         return str(e)
    >>> print(simpg.run(body, 2)[0])  # doctest: +ELLIPSIS
    ColwiseParallel shards nn.Linear or nn.Embedding weights, but was applied to ReLU: ...
    """


# torch raises these builtin types for the same mistakes; ours are those too (Note [torch's
# error types] in dtensor/__init__.py)
class StyleLayoutsError(ParallelStyleError, AssertionError):
    """A PrepareModuleInput/Output built with layouts that do not pair up."""


class UnsupportedModuleError(ParallelStyleError, NotImplementedError):
    """A style applied to a module kind it cannot shard (ColwiseParallel on a Conv2d)."""


class AlreadyParallelizedError(ParallelStyleError, RuntimeError):
    """A module distributed or parallelized a second time."""


class ParallelPlanTypeError(ParallelStyleError, TypeError):
    """A ``parallelize_plan`` (or one of its values) that is not a ParallelStyle."""


class ParallelPlanError(ValueError):
    """A plan key that names no submodule (``closest`` lists the nearest real paths).

    >>> import simpg
    >>> from torch import nn
    >>> from dtensor import init_device_mesh
    >>> from dtensor.parallel import ColwiseParallel, parallelize_module
    >>> def body():
    ...     model = nn.ModuleDict({"proj": nn.Linear(4, 4)})
    ...     try:
    ...         parallelize_module(model, init_device_mesh("cpu", (2,)), {"prj": ColwiseParallel()})
    ...     except ParallelPlanError as e:
    ...         return e.key, e.closest
    >>> simpg.run(body, 2)[0]
    ('prj', ('proj',))
    """

    def __init__(self, key: str, root: str, closest: Sequence[str]) -> None:
        self.key, self.root, self.closest = key, root, tuple(closest)
        hint = (f"; closest module paths: {', '.join(map(repr, closest))}" if closest
                else "; the plan's keys are module paths as in named_modules(), with * wildcards")
        super().__init__(f"parallelize_plan key {key!r} matches no submodule of {root}{hint}")


class FullyShardError(ValueError):
    """``fully_shard``/``replicate`` misuse: applied twice, a mesh that does not compose with
    the parameters' mesh, a parameter that cannot be laid out.

    >>> import simpg
    >>> from torch import nn
    >>> from dtensor import init_device_mesh
    >>> from dtensor.parallel import fully_shard
    >>> def body():
    ...     mesh, model = init_device_mesh("cpu", (2,)), nn.Linear(4, 4)
    ...     fully_shard(model, mesh=mesh)
    ...     try:
    ...         fully_shard(model, mesh=mesh)
    ...     except FullyShardError as e:
    ...         return str(e)
    >>> print(simpg.run(body, 2)[0])  # doctest: +ELLIPSIS
    fully_shard(Linear): the module is already fully sharded; apply fully_shard/replicate once...
    """
