"""Which DTensor library a ported test uses: ours (``dtensor``) or torch's.

Note [choosing the DTensor library]
A test file ported to ``simpg.testing`` builds its tensors with whichever library it imports:
torch's own tests say ``from torch.distributed.tensor import distribute_tensor, Shard``, ours
say ``from dtensor import ...``. ``build_device_mesh()`` must return a mesh of that same
library (torch's DTensor cannot use our mesh, nor ours torch's). A class may name it
(``dtensor_lib``); otherwise it is read, per test method, from the names the test can see:
the globals of the test function and of the modules that define the test class and its
bases. A name is torch's if it comes from ``torch.distributed.tensor`` (or
``torch.distributed.device_mesh``, where torch's ``init_device_mesh`` lives), ours if it comes
from ``dtensor``. Only one of the two seen: that one. Both seen: ambiguous, and building a
mesh fails at once, naming the switch. Neither: ours, as before. Nothing is imported here:
simpg never imports torch's DTensor, it only looks at what the test module imported.
"""

from __future__ import annotations

import inspect
import itertools
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

OURS = "dtensor"
TORCHS = "torch.distributed.tensor"
_ORIGINS = {OURS: ("dtensor",), TORCHS: ("torch.distributed.tensor",
                                         "torch.distributed.device_mesh")}
# modules whose classes are harness, not the test's own code: their globals say nothing
_HARNESS = ("simpg", "unittest", "expecttest", "builtins")  # and torch.testing.*


@dataclass(frozen=True)
class LibraryChoice:
    """The library a test's names come from; ``seen`` maps each library to a few of the names
    (``module.name``) that show it. ``lib`` is ``None`` when both libraries were seen."""

    lib: str | None
    seen: Mapping[str, tuple[str, ...]]

    def error(self, test_id: str) -> TypeError:
        shown = "; ".join(f"{lib}: {', '.join(names)}" for lib, names in self.seen.items())
        return TypeError(
            f"{test_id}: build_device_mesh() cannot tell which DTensor library this test uses: "
            f"its module imports names from both ({shown}). Set dtensor_lib = {OURS!r} or "
            f"dtensor_lib = {TORCHS!r} on the test class")


def _origin(value: Any) -> str | None:
    if isinstance(value, ModuleType):
        where = value.__name__
    elif isinstance(value, type) or inspect.isroutine(value):
        where = getattr(value, "__module__", None)
    else:
        return None
    if not isinstance(where, str):
        return None
    for lib, prefixes in _ORIGINS.items():
        if any(where == p or where.startswith(p + ".") for p in prefixes):
            return lib
    return None


def _namespaces(test: Callable[..., Any] | None, cls: type) -> Iterator[tuple[str, dict]]:
    if test is not None:
        fn = inspect.unwrap(test)
        globs = getattr(fn, "__globals__", None)
        if isinstance(globs, dict):
            yield globs.get("__name__", "?"), globs
    for klass in cls.__mro__:
        name = klass.__module__
        if name.split(".")[0] in _HARNESS or name.startswith("torch.testing."):
            continue
        module = sys.modules.get(name)
        if module is not None:
            yield name, vars(module)


def choose_library(test: Callable[..., Any] | None, cls: type) -> LibraryChoice:
    """The DTensor library seen by ``test`` (a test function) of class ``cls``
    (Note [choosing the DTensor library]).

    >>> from torch.distributed.tensor import Shard, distribute_tensor
    >>> def test_rows(): ...
    >>> choose_library(test_rows, object).lib
    'torch.distributed.tensor'
    """
    seen: dict[str, dict[str, None]] = {OURS: {}, TORCHS: {}}
    done: set[str] = set()
    for module_name, namespace in _namespaces(test, cls):
        if module_name in done:
            continue
        done.add(module_name)
        for key, value in list(namespace.items()):
            lib = _origin(value)
            if lib is not None:
                seen[lib].setdefault(f"{module_name}.{key}", None)
    found = {lib: tuple(itertools.islice(names, 3)) for lib, names in seen.items() if names}
    if len(found) == 2:
        return LibraryChoice(None, found)
    return LibraryChoice(next(iter(found), OURS), found)


__all__ = ["OURS", "TORCHS", "LibraryChoice", "choose_library"]
