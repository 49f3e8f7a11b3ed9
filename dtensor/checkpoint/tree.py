"""State dicts as leaves: nested dicts, lists and tuples walked down to tensors and to
*value subtrees* (the largest parts holding no tensor), each named by its key path joined
with dots (``"state.0.exp_avg"``, as torch.distributed.checkpoint names them).

A value subtree is stored whole as JSON (``encode``/``decode``; tuples and non-string dict
keys are tagged so they come back as they were) and replaced whole on load, so an optimizer's
``param_groups`` list loads as one value whatever its length in the target.

>>> import torch
>>> [(k, kind) for k, kind, _ in leaves({"w": torch.ones(2), "opt": {"lr": 0.1}})]
[('w', 'tensor'), ('opt', 'value')]
>>> decode(encode({"betas": (0.9, 0.99), 3: None}))
{'betas': (0.9, 0.99), 3: None}
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import torch

from dtensor.checkpoint.errors import StateMismatchError, UnsupportedValueError

_SCALARS = (type(None), bool, int, float, str)

# Note [no pickle]
# A checkpoint never holds a pickle: tensors are safetensors chunks (raw bytes, a JSON
# header), everything else is JSON. Loading one therefore never runs code from it; a value
# JSON cannot hold is refused at save time, naming its key.


def key_of(path: tuple) -> str:
    return ".".join(str(p) for p in path)


def has_tensor(node: Any) -> bool:
    if isinstance(node, torch.Tensor):
        return True
    if isinstance(node, dict):
        return any(has_tensor(v) for v in node.values())
    if isinstance(node, (list, tuple)):
        return any(has_tensor(v) for v in node)
    return False


def _recurse(node: Any, path: tuple) -> bool:
    """Walk into ``node``: it holds a tensor, or it is the state dict itself."""
    return isinstance(node, (dict, list, tuple)) and (has_tensor(node) or not path)


def _children(node: Any) -> Iterator[tuple[Any, Any]]:
    return iter(node.items()) if isinstance(node, dict) else enumerate(node)


def leaves(node: Any, path: tuple = ()) -> Iterator[tuple[str, str, Any]]:
    """``(key, "tensor" | "value", object)`` for every leaf under ``node``, in order."""
    if isinstance(node, torch.Tensor):
        yield key_of(path), "tensor", node
    elif _recurse(node, path):
        for k, v in _children(node):
            yield from leaves(v, path + (k,))
    else:
        yield key_of(path), "value", node


def flatten(state: dict) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """``(tensors, values)`` by key; values JSON-encoded. Two leaves with one key raise."""
    tensors: dict[str, torch.Tensor] = {}
    values: dict[str, Any] = {}
    for key, kind, obj in leaves(state):
        if key in tensors or key in values:
            raise UnsupportedValueError(f"two entries of the state flatten to the key {key!r} "
                                        f"(e.g. 0 and '0' in one dict): expected distinct keys",
                                        key=key)
        if kind == "tensor":
            tensors[key] = obj
        else:
            values[key] = encode(obj, key)
    return tensors, values


def encode(value: Any, key: str = "") -> Any:
    """A JSON-ready form of a tensor-free value (Note [no pickle]: nothing else is stored)."""
    if isinstance(value, _SCALARS):
        if isinstance(value, float) and not math.isfinite(value):
            return {"__float__": repr(value)}
        return value
    if isinstance(value, tuple):
        return {"__tuple__": [encode(v, _sub(key, i)) for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [encode(v, _sub(key, i)) for i, v in enumerate(value)]
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in value):
            return {k: encode(v, _sub(key, k)) for k, v in value.items()}
        bad = [k for k in value if not isinstance(k, _SCALARS)]
        if bad:
            raise UnsupportedValueError(f"{key!r}: dict key {bad[0]!r} of type "
                                        f"{type(bad[0]).__name__}: expected str, int, float, "
                                        f"bool or None keys", key=key)
        return {"__dict__": [[k, encode(v, _sub(key, k))] for k, v in value.items()]}
    raise UnsupportedValueError(
        f"{key!r} holds a {type(value).__name__} ({value!r:.60}): a checkpoint stores tensors "
        f"and JSON-like values (None, bool, int, float, str, lists, tuples, dicts), never "
        f"pickles; convert it to one of those", key=key)


def _sub(key: str, part: Any) -> str:
    return f"{key}.{part}" if key else str(part)


def decode(value: Any) -> Any:
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        if "__tuple__" in value:
            return tuple(decode(v) for v in value["__tuple__"])
        if "__float__" in value:
            return float(value["__float__"])
        if "__dict__" in value:
            return {decode(k): decode(v) for k, v in value["__dict__"]}
        return {k: decode(v) for k, v in value.items()}
    return value


def fill(state: dict, load_tensor: Callable[[str, torch.Tensor], None],
         load_value: Callable[[str, Any], Any]) -> None:
    """Walk ``state`` in place: ``load_tensor(key, t)`` fills each tensor,
    ``load_value(key, old)`` returns the replacement of each value subtree."""
    if not isinstance(state, dict):
        raise StateMismatchError(f"load fills a state dict in place: got a "
                                 f"{type(state).__name__}, expected a dict")
    _fill(state, (), load_tensor, load_value)


def _fill(node: Any, path: tuple, load_tensor: Callable, load_value: Callable) -> Any:
    if isinstance(node, torch.Tensor):
        load_tensor(key_of(path), node)
        return node
    if _recurse(node, path):
        if isinstance(node, tuple):
            return tuple(_fill(v, path + (i,), load_tensor, load_value)
                         for i, v in enumerate(node))
        for k, v in list(_children(node)):
            node[k] = _fill(v, path + (k,), load_tensor, load_value)
        return node
    return load_value(key_of(path), node)
