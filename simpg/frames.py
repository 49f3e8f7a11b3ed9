"""Which frames are the user's: where simpg reports a collective, a stuck rank or a failure.

Note [the user's frame]
A report should point at the line the user wrote, not at the library that issued the
collective on their behalf: a deadlock caused by skipping ``full_tensor()`` on one rank is at
``test_x.py:12``, not at a DTensor runtime's ``comm.py``. A frame is *library* code when its
file lies in the standard library, in site-packages, or in the folder of a package that an
installed distribution provides (``importlib.metadata.packages_distributions()``: simpg,
torch, a DTensor runtime, editable installs included). Everything else — test files, scripts,
``__main__``, doctests — is the user's. The answer is cached per file, so classifying a stack
costs a dict look-up per frame.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import sys
import sysconfig
import traceback

_cache: dict[str, bool] = {}  # file name -> whether it is library code


_roots: tuple[int, tuple[str, ...]] = (-1, ())  # (len(sys.modules) when made, the roots)


def _library_roots() -> tuple[str, ...]:
    """Where library code lives, from the installed packages imported so far (a frame's
    module is always imported; finding an unimported one could import it)."""
    global _roots
    if _roots[0] == len(sys.modules):
        return _roots[1]
    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    for name in _distribution_packages():
        file = getattr(sys.modules.get(name), "__file__", None)
        if file:
            roots.add(os.path.dirname(file) if file.endswith("__init__.py") else file)
    _roots = (len(sys.modules), tuple(os.path.realpath(r) for r in roots if r))
    return _roots[1]


@functools.cache
def _distribution_packages() -> tuple[str, ...]:
    return tuple(importlib.metadata.packages_distributions())


def is_library_file(filename: str) -> bool:
    """True when ``filename`` belongs to the standard library or an installed package."""
    known = _cache.get(filename)
    if known is None:
        if filename.startswith("<"):  # <doctest ...>, <string>, <stdin>: the user's
            known = filename.startswith("<frozen")
        else:
            path = os.path.realpath(filename)
            known = any(path == r or path.startswith(r + os.sep) for r in _library_roots())
        _cache[filename] = known
    return known


def user_location(error: BaseException) -> str | None:
    """``file:line in function`` of the innermost user frame where ``error`` was raised."""
    frames = [f for f in traceback.extract_tb(error.__traceback__)
              if not is_library_file(f.filename)]
    if not frames:
        return None
    f = frames[-1]
    return f"{f.filename}:{f.lineno} in {f.name}"


def format_user_traceback(error: BaseException) -> str:
    """``error`` with its traceback cut to the user's frames (all of them if none are)."""
    frames = traceback.extract_tb(error.__traceback__)
    mine = [f for f in frames if not is_library_file(f.filename)] or list(frames)
    lines = ["Traceback (most recent call last):\n",
             *traceback.StackSummary.from_list(mine).format(),
             *traceback.format_exception_only(type(error), error)]
    return "".join(lines).rstrip()
