"""Build a model on the meta device and materialize only a part of it (a pipeline stage)
with exactly the values a whole CPU build from the same seed gives it.

Note [meta build, CPU values]
A stage must not materialize the other stages' weights, yet the stages must start from the
single device's init, whose random draws run in construction order over the whole model
(each ``nn.Linear``'s own reset, then ``init_weights``). ``meta_build`` constructs the model
under the meta device with a dispatch mode that, for every in-place random init of a meta
tensor (``normal_``, ``uniform_``), draws the same numbers into a scratch CPU tensor of its
shape (so the generator advances exactly as a CPU build's does; one tensor alive at a time)
and records the generator state before the draw, and for every other in-place init
(``fill_``, ``zero_``) records the call. ``materialize`` then allocates the chosen
parameters and replays each one's last recorded init from its recorded state: the same
values, bit for bit, and the other parameters stay meta.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

_RANDOM = {torch.ops.aten.normal_.default, torch.ops.aten.uniform_.default}
_FILLS = {torch.ops.aten.fill_.Scalar, torch.ops.aten.zero_.default}


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.last: dict[int, tuple[Any, tuple, dict, torch.Tensor | None]] = {}
        self.keep: list[torch.Tensor] = []  # the meta tensors recorded, so ids stay theirs

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        target = args[0] if args else None
        if isinstance(target, torch.Tensor) and target.is_meta and func in _RANDOM | _FILLS:
            state = None
            if func in _RANDOM:
                state = torch.get_rng_state()
                func(torch.empty(target.shape, dtype=target.dtype), *args[1:], **kwargs)
            self.last[id(target)] = (func, args[1:], kwargs, state)
            self.keep.append(target)
            return target
        return func(*args, **kwargs)


class MetaBuild:
    """A model built on the meta device and the record of its inits (``meta_build``)."""

    def __init__(self, model: nn.Module, recorder: _Recorder) -> None:
        self.model = model
        self._recorder = recorder
        self._meta = {name: p for name, p in model.named_parameters()}

    def materialize(self, part: nn.Module, device: torch.device | str = "cpu") -> nn.Module:
        """Allocate ``part``'s parameters (a submodule or a stage of the model's own modules)
        on ``device`` and give each its CPU build's value (Note [meta build, CPU values])."""
        names = {id(p): n for n, p in self.model.named_parameters()}
        mine = {names[id(p)] for p in part.parameters() if id(p) in names}
        buffers = {n: b for n, b in part.named_buffers() if not b.is_meta}  # kept as they are
        part.to_empty(device=device)
        with torch.no_grad():
            for n, b in part.named_buffers():
                if n in buffers:
                    b.copy_(buffers[n])
        live = dict(self.model.named_parameters())
        saved = torch.get_rng_state()
        try:
            with torch.no_grad():
                for name in sorted(mine):
                    func, args, kwargs, state = self._recorder.last[id(self._meta[name])]
                    if state is not None:
                        torch.set_rng_state(state)
                    value = torch.empty(live[name].shape, dtype=live[name].dtype)
                    func(value, *args, **kwargs)
                    live[name].copy_(value)
        finally:
            torch.set_rng_state(saved)
        return part


def meta_build(build: Callable[[], nn.Module]) -> MetaBuild:
    """``build()`` on the meta device, the random generator left where a CPU build leaves it.

    >>> _ = torch.manual_seed(0); whole = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    >>> _ = torch.manual_seed(0)
    >>> made = meta_build(lambda: nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2)))
    >>> second = made.materialize(made.model[1])
    >>> torch.equal(second.weight, whole[1].weight), made.model[0].weight.is_meta
    (True, True)
    """
    recorder = _Recorder()
    with torch.device("meta"), recorder:
        model = build()
    return MetaBuild(model, recorder)
