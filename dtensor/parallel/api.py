"""``parallelize_module`` (apply a plan of styles by module path) and ``distribute_module``.

>>> import simpg
>>> from torch import nn
>>> from dtensor import init_device_mesh
>>> from dtensor.parallel import ColwiseParallel, RowwiseParallel
>>> def body():
...     model = nn.ModuleDict({"layers": nn.ModuleList(
...         nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 4)) for _ in range(2))})
...     plan = {"layers.*.0": ColwiseParallel(), "layers.*.1": RowwiseParallel()}
...     parallelize_module(model, init_device_mesh("cpu", (2,)), plan)
...     return [str(m.weight.placements[0]) for m in model.modules() if isinstance(m, nn.Linear)]
>>> simpg.run(body, 2)[0]
['S(0)', 'S(1)', 'S(0)', 'S(1)']
"""

from __future__ import annotations

import difflib
import re
from fnmatch import fnmatchcase
from typing import Callable, Iterator

from torch import nn

from dtensor.api import distribute_tensor
from dtensor.mesh import DeviceMesh, resolve_mesh
from dtensor.parallel.errors import (AlreadyParallelizedError, ParallelPlanError,
                                     ParallelPlanTypeError)
from dtensor.parallel.styles import ParallelStyle, distribute_parameter
from dtensor.placements import Replicate
from dtensor.tensor import DTensor


def parallelize_module(module: nn.Module, device_mesh: DeviceMesh | None = None,
                       parallelize_plan: ParallelStyle | dict[str, ParallelStyle] | None = None,
                       *, src_data_rank: int | None = 0) -> nn.Module:
    """Apply ``parallelize_plan`` to ``module`` over the 1-d ``device_mesh`` (by default the
    mesh of the enclosing ``with mesh:``): a style for the module itself, or a dict from
    module paths (``*`` matches one path component, as ``layers.*.feed_forward.w1``; ``""``
    is ``module`` itself) to styles. Parameters are read from global rank
    ``src_data_rank`` (None: each rank keeps its own values, no broadcast).
    Returns ``module``, changed in place.

    >>> import torch, simpg
    >>> from torch import nn
    >>> from dtensor import init_device_mesh
    >>> from dtensor.parallel import ColwiseParallel, RowwiseParallel
    >>> def body():
    ...     model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 4))
    ...     plan = {"0": ColwiseParallel(), "2": RowwiseParallel()}
    ...     parallelize_module(model, init_device_mesh("cpu", (2,)), plan)
    ...     y = model(torch.ones(1, 4))
    ...     return [str(p.placements[0]) for p in model.parameters()], tuple(y.shape)
    >>> simpg.run(body, 2)[0]
    (['S(0)', 'S(0)', 'S(1)', 'R'], (1, 4))
    """
    device_mesh = resolve_mesh(device_mesh, "parallelize_module")  # or the `with mesh:` one
    if parallelize_plan is None:
        return module
    if isinstance(parallelize_plan, ParallelStyle):
        parallelize_plan.src_data_rank = src_data_rank
        return parallelize_plan._apply(module, device_mesh)
    if not isinstance(parallelize_plan, dict):
        raise ParallelPlanTypeError(
            f"parallelize_plan must be a ParallelStyle or a dict of module path -> "
            f"ParallelStyle, got {type(parallelize_plan).__name__}")
    for key, style in parallelize_plan.items():
        if not isinstance(style, ParallelStyle):
            raise ParallelPlanTypeError(
                f"parallelize_plan[{key!r}] is {style!r}: expected a ParallelStyle "
                "(ColwiseParallel(), RowwiseParallel(), ...)")
        matched = list(_match(module, key.split("."))) if key else [module]  # "": the root
        if not matched:
            raise ParallelPlanError(key, type(module).__name__, _closest(module, key))
        for sub in matched:
            parallelize_module(sub, device_mesh, style, src_data_rank=src_data_rank)
    return module


def _match(module: nn.Module, atoms: list[str]) -> Iterator[nn.Module]:
    if not atoms:
        yield module
        return
    head, rest = atoms[0], atoms[1:]
    for name, child in module.named_children():
        if fnmatchcase(name, head):
            yield from _match(child, rest)


def _closest(module: nn.Module, key: str, n: int = 3) -> list[str]:
    paths = [name for name, _ in module.named_modules() if name]
    # offer "layers.*.x" beside "layers.0.x": a key usually means every block
    generic = sorted({re.sub(r"(?<=\.)\d+(?=\.|$)|^\d+(?=\.|$)", "*", p) for p in paths})
    names = list(dict.fromkeys(generic + paths))
    return difflib.get_close_matches(key, names, n=n, cutoff=0.5)


PartitionFn = Callable[[str, nn.Module, DeviceMesh], None]
InputFn = Callable[[nn.Module, tuple, DeviceMesh], object]
OutputFn = Callable[[nn.Module, object, DeviceMesh], object]


def distribute_module(module: nn.Module, device_mesh: DeviceMesh | None = None,
                      partition_fn: PartitionFn | None = None, input_fn: InputFn | None = None,
                      output_fn: OutputFn | None = None) -> nn.Module:
    """Make ``module``'s parameters DTensors on ``device_mesh`` (by default the mesh of the
    enclosing ``with mesh:``): ``partition_fn(name,
    submodule, mesh)`` is called for every submodule and may replace its parameters (the
    rest, and every buffer, are replicated); ``input_fn(module, inputs, mesh)`` and
    ``output_fn(module, outputs, mesh)`` become forward hooks. Applies once per module.

    >>> import torch, simpg
    >>> from torch import nn
    >>> from dtensor import init_device_mesh
    >>> def body():  # no partition_fn: every parameter replicated
    ...     m = distribute_module(nn.Linear(4, 2), init_device_mesh("cpu", (2,)))
    ...     return [p.placements for p in m.parameters()]
    >>> simpg.run(body, 2)[0]
    [(Replicate(),), (Replicate(),)]
    """
    device_mesh = resolve_mesh(device_mesh, "distribute_module")
    if getattr(module, "_dtensor_distributed", False):
        raise AlreadyParallelizedError(f"distribute_module was already applied to "
                                       f"{type(module).__name__}: it applies once per module")
    for name, sub in module.named_modules():
        if partition_fn is not None:
            partition_fn(name, sub, device_mesh)
        for pname, p in list(sub._parameters.items()):
            if p is not None and not isinstance(p, DTensor):
                distribute_parameter(sub, pname, device_mesh, [Replicate()] * device_mesh.ndim,
                                     0)
        for bname, b in list(sub._buffers.items()):
            if b is not None and not isinstance(b, DTensor):
                sub._buffers[bname] = distribute_tensor(b, device_mesh,
                                                        [Replicate()] * device_mesh.ndim)
    if input_fn is not None:
        module.register_forward_pre_hook(lambda m, inputs: input_fn(m, inputs, device_mesh))
    if output_fn is not None:
        module.register_forward_hook(lambda m, _inputs, out: output_fn(m, out, device_mesh))
    module._dtensor_distributed = True  # type: ignore[assignment]
    return module
