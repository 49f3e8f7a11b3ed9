"""A mesh built on a simpg rank gets an identity of its own (Note [per-rank process state],
point 2, in simpg/isolation.py): a token unique to that rank of that world, in the field
torch's own "threaded" backend sets to the thread id for the same reason."""

from __future__ import annotations

import contextvars
import functools
import itertools
import threading
from typing import Any, Callable

from simpg.world import rank_context

_tokens = itertools.count(1 << 62)  # far from any real thread id
_mesh_token: contextvars.ContextVar[int | None] = contextvars.ContextVar("simpg_mesh_token",
                                                                        default=None)


def _rank_token() -> int:
    token = _mesh_token.get()
    if token is None:
        token = next(_tokens)
        _mesh_token.set(token)
    return token


def _per_rank_mesh(original: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(original)
    def init(mesh: Any, *args: Any, **kwargs: Any) -> None:
        original(mesh, *args, **kwargs)
        if rank_context.get() is not None and getattr(mesh, "_thread_id", None) is None:
            mesh._thread_id = _rank_token()  # Note [per-rank process state], point 2
            mesh._hash = None  # computed lazily from _thread_id too

    init.simpg_per_rank = True  # type: ignore[attr-defined]
    return init


_install_lock = threading.Lock()


def install() -> None:
    """Give meshes built on simpg ranks a per-rank identity; idempotent."""
    from torch.distributed.device_mesh import DeviceMesh

    with _install_lock:
        if getattr(DeviceMesh.__init__, "simpg_per_rank", False):
            return
        DeviceMesh.__init__ = _per_rank_mesh(DeviceMesh.__init__)  # type: ignore[method-assign]
