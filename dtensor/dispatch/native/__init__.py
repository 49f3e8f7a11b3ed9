"""The dispatcher's cached case in compiled code, when it is built.

Note [native fast path]
A steady-state call (Note [fast path] in dtensor.dispatch.entry) costs torch's Python-key entry,
then in Python: the key, the lookup, the local op through ``func._op`` and the output's
``_make_wrapper_subclass``. ``fast_dispatch.cpp`` is ``DTensor.__torch_dispatch__`` itself, a
C function: it builds the same key into the same table, runs the entry's op through the
dispatcher on a stack prepared when the entry was recorded (only the local tensors change),
and builds the wrappers as ``_make_wrapper_subclass`` does, without a Python frame. Every
call it does not take (a miss, debugging on, an entry with a local function, a move or a list
of DTensors, a local piece that is a subclass) goes, untouched, to the Python entry
``dtensor.dispatch.torch_dispatch``: one cache, one set of rules.

Where the time goes (add of two 2x8 pieces, µs of rank 0's CPU, each piece timed with the
TSC inside the entry): torch's Python-key entry and return 1.75 (a C ``__torch_dispatch__``
that only returns its argument costs that much), key 0.09, lookup and checks 0.12, the op
through the dispatcher 0.59, the wrapper 0.2, freeing the result and the rest about 0.6:
3.4 in all, where the Python entry takes 6.2 and torch's DTensor 7-8.

Built by ``scripts/setup.sh`` (``python -m dtensor.dispatch.native.build``) into
``_build/``; never at import. Absent, stale (its source changed since) or switched off with
``DTENSOR_NATIVE=0``, dtensor uses the Python entry; ``REASON`` says why.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import os
import threading
from types import ModuleType
from typing import Any, Iterator

from dtensor.dispatch.native import build as _build

REASON = ""


def _load() -> ModuleType | None:
    global REASON
    if os.environ.get("DTENSOR_NATIVE", "1") == "0":
        REASON = "switched off by DTENSOR_NATIVE=0"
        return None
    path = _build.built_library()
    if not path.exists():
        REASON = (f"not built ({path} is missing): build it with `python -m "
                  "dtensor.dispatch.native.build` (scripts/setup.sh does)")
        return None
    loader = importlib.machinery.ExtensionFileLoader(_build.NAME, str(path))
    spec = importlib.util.spec_from_file_location(_build.NAME, str(path), loader=loader)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    try:
        loader.exec_module(module)
    except ImportError as e:
        REASON = f"failed to load {path}: {e}"
        return None
    if module.SOURCE_HASH != _build.source_hash():
        REASON = (f"stale ({path} was built from other sources): rebuild it with `python -m "
                  "dtensor.dispatch.native.build` (scripts/setup.sh does)")
        return None
    return module


MODULE = _load()


# class -> its Python entry (recorded by dtensor.dispatch.entry.bind)
python_entries: dict[type, Any] = {}


def _raise_in_dispatch(func: Any, error: BaseException) -> None:
    """An error of a compiled entry's op, raised again from a frame whose local ``func`` is
    the op, as the Python entry's frame has it (``opdb_tests.causes`` names the op from it)."""
    raise error


def compile_plan(func: Any, args: tuple, kwargs: dict, rewrite: tuple, outs: tuple,
                 container: type | None, returns_arg: int | None, local: Any, boxes: Any,
                 moves: tuple, lists: tuple) -> Any:
    """A fast-path entry's compiled plan (its fields as in ``dispatch._FastPlan``), or None
    (the entry stays with the Python entry)."""
    if MODULE is None:
        return None
    return MODULE.compile(func, tuple(args), kwargs or None, rewrite, outs, container,
                          returns_arg, local, boxes, moves, lists)


# class -> [blocks open, the entry to restore]: ranks (threads) may open overlapping blocks
_python_only: dict[type, list] = {}
_python_only_lock = threading.Lock()


@contextlib.contextmanager
def python_entry_only(dtensor_class: type) -> Iterator[None]:
    """Within the block, ``dtensor_class`` dispatches through the Python entry (for tests and
    benchmarks that compare the two). Process-wide: the first block opened swaps the entry,
    the last one closed puts it back, so every rank of a simulated world may open one."""
    with _python_only_lock:
        state = _python_only.setdefault(dtensor_class, [0, None])
        if state[0] == 0:
            state[1] = dtensor_class.__dict__["__torch_dispatch__"]
            dtensor_class.__torch_dispatch__ = classmethod(  # type: ignore[assignment]
                python_entries[dtensor_class])
        state[0] += 1
    try:
        yield
    finally:
        with _python_only_lock:
            state[0] -= 1
            if state[0] == 0:
                dtensor_class.__torch_dispatch__ = state[1]  # type: ignore[assignment]
