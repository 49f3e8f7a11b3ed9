"""Seeing and controlling what propagation decides.

- ``DTENSOR_DEBUG=1`` (read at each op) or ``with explain_ops() as log:`` logs, per op, the
  input specs, the chosen strategy, the other candidates with their costs, and each inserted
  redistribute with its bytes. ``explain(fn, *args)`` returns the same as a table.
- ``implicit_communication("error" | "warn" | "allow")`` makes any redistribute that
  propagation inserts raise or warn, naming the op, the tensor and the bytes it would move.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from dtensor.comm.debug_mode import CommDebugMode  # noqa: F401  (torch: tensor.debug.CommDebugMode)
from dtensor.ops.propagate import Decision, format_candidate

log = logging.getLogger("dtensor")

_records: contextvars.ContextVar[list | None] = contextvars.ContextVar("dtensor_explain",
                                                                      default=None)
_implicit: contextvars.ContextVar[str] = contextvars.ContextVar("dtensor_implicit",
                                                                default="allow")


class ImplicitCommunicationError(RuntimeError):
    """An op would redistribute an input while implicit communication is forbidden."""


@dataclass(frozen=True)
class OpRecord:
    op: str
    inputs: tuple[str, ...]  # each tensor input's spec, as it arrived
    chosen: str
    moves: tuple[str, ...]  # each inserted redistribute with its bytes
    alternatives: tuple[str, ...]

    def __str__(self) -> str:
        lines = [f"{self.op}", f"  inputs:  {'; '.join(self.inputs)}",
                 f"  chosen:  {self.chosen}"]
        lines += [f"  moves:   {m}" for m in self.moves]
        lines += [f"  other:   {a}" for a in self.alternatives]
        return "\n".join(lines)


# os.environ's own byte mapping: a membership test there is ~50x cheaper than
# os.environ.get, which matters on a path every op takes (it is still read at each op).
_ENV = getattr(os.environ, "_data", None)


def _debug_env() -> bool:
    if _ENV is not None and b"DTENSOR_DEBUG" not in _ENV:
        return False
    return os.environ.get("DTENSOR_DEBUG", "") not in ("", "0")


def _fmt(p: tuple) -> str:
    return "[" + ",".join(str(x) for x in p) + "]"


def recording() -> bool:
    """Decisions are being collected (``explain``) or printed (``DTENSOR_DEBUG``): the
    dispatcher's fast path (Note [fast path]) steps aside so that every call is recorded."""
    return _records.get() is not None or _debug_env()


def record(decision: Decision, tensors: list) -> None:
    """Called by the dispatcher for every op with a rule."""
    chosen = decision.chosen
    mode = _implicit.get()
    sink = _records.get()
    debug_env = _debug_env()
    if chosen.cost == 0 and sink is None and not debug_env:
        return  # the common case costs one comparison
    specs = decision.op.tensors()
    moves = tuple(
        f"input {i} {_fmt(specs[i].placements)} -> {_fmt(p)}: {b} bytes"
        for i, (p, b) in enumerate(zip(chosen.inputs, chosen.moves))
        if p != specs[i].placements)
    if moves and mode != "allow":
        msg = (f"{decision.op.op} would redistribute its inputs implicitly: "
               + "; ".join(moves) + f" (shapes {[s.shape for s in specs]})")
        if mode == "error":
            raise ImplicitCommunicationError(msg)
        warnings.warn(msg, stacklevel=4)
    if sink is None and not debug_env:
        return
    rec = OpRecord(
        op=str(decision.op.op),
        inputs=tuple(f"{_fmt(s.placements)} {s.shape} {s.dtype}" for s in specs),
        chosen=format_candidate(chosen),
        moves=moves,
        alternatives=tuple(format_candidate(c) for c in decision.candidates[1:6]),
    )
    if sink is not None:
        sink.append(rec)
    if debug_env:
        log.warning("%s", rec)


@contextlib.contextmanager
def explain_ops() -> Iterator[list[OpRecord]]:
    """Collect an ``OpRecord`` per op dispatched on this rank inside the block."""
    sink: list[OpRecord] = []
    token = _records.set(sink)
    try:
        yield sink
    finally:
        _records.reset(token)


def explain(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
    """Run ``fn(*args, **kwargs)`` and return a table of every op's sharding decision."""
    with explain_ops() as records:
        fn(*args, **kwargs)
    header = f"{'op':<34} {'inputs':<40} {'chosen (bytes moved)':<40}"
    rows = [header, "-" * len(header)]
    for r in records:
        rows.append(f"{r.op:<34} {' '.join(i.split(' ')[0] for i in r.inputs):<40} "
                    f"{r.chosen:<40}")
        rows.extend(f"{'':<34} move {m}" for m in r.moves)
    return "\n".join(rows)


@contextlib.contextmanager
def implicit_communication(mode: str) -> Iterator[None]:
    """"error": an op that would redistribute an input raises; "warn": warns; "allow"."""
    if mode not in ("allow", "warn", "error"):
        raise ValueError(f"implicit_communication({mode!r}): expected 'allow', 'warn' or 'error'")
    token = _implicit.set(mode)
    try:
        yield
    finally:
        _implicit.reset(token)

