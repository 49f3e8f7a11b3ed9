"""Consolidated safetensors files, as model hubs keep them: one file of whole tensors with
plain names (``layers.0.attn.wq``), or several with the hub's index
(``model.safetensors.index.json``: ``{"metadata": {"total_size": n}, "weight_map": {name:
file}}``). ``export_safetensors`` writes them from a sharded checkpoint or from a live
state; ``load_safetensors`` reads one into any layout, each rank reading only the bytes of
its own piece (Note [box runs]).

>>> import os, tempfile, torch
>>> from safetensors.torch import load_file
>>> d = tempfile.mkdtemp()
>>> export_safetensors({"w": torch.arange(6.0).reshape(2, 3)}, f"{d}/model.safetensors")
['.../model.safetensors']
>>> load_file(f"{d}/model.safetensors")["w"][1].tolist()
[3.0, 4.0, 5.0]
>>> state = {"w": torch.zeros(2, 3)}
>>> load_safetensors(state, f"{d}/model.safetensors")
>>> state["w"][0].tolist()
[0.0, 1.0, 2.0]

Note [box runs]
A safetensors tensor is row-major, so the box a rank holds is a set of contiguous byte runs:
with ``k`` the last dimension the box does not span whole, each run is the box's extent on
``k`` times the size of the whole dimensions after it, one run per index of the dimensions
before ``k``. A row block (``Shard(0)``) is one run, a column block of a matrix one run per
row. A rank reads exactly those runs (``preadv`` locally, ``cat_ranges`` on fsspec), nothing
else of the file but its header.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

from dtensor.checkpoint import metadata
from dtensor.checkpoint.errors import (CheckpointError, CorruptCheckpointError, MissingKeyError,
                                       StateMismatchError, UnsupportedValueError)
from dtensor.checkpoint.loading import _fill_tensor, read_metadata
from dtensor.checkpoint.pieces import view_of
from dtensor.checkpoint.saving import _Comm, keys_differ
from dtensor.checkpoint.storage import ST_DTYPES, dtype_from_name, dtype_name
from dtensor.checkpoint.stores import store_for
from dtensor.checkpoint.tree import fill, flatten
from dtensor.layout import Box
from dtensor.tensor import DTensor

INDEX = "model.safetensors.index.json"
_ST_NAMES = {dtype: name for name, dtype in ST_DTYPES.items()}


def export_safetensors(source: dict | str | os.PathLike, path: str | os.PathLike, *,
                       max_shard_bytes: int | None = None, process_group: Any = None
                       ) -> list[str]:
    """Write ``source`` (a checkpoint path, read on this process alone; or a state of
    DTensors and tensors, called by every rank: each DTensor is gathered, rank 0 writes;
    ranks may hold different keys, as pipeline stages do: Note [a live export across
    stages]) as
    whole tensors named by their state keys to the file ``path``; with ``max_shard_bytes``,
    into the folder ``path`` as files of at most that size (one tensor at least), named
    ``model-00001-of-0000N.safetensors``, and their ``INDEX``. Values other than tensors are
    not written.
    Returns the files written (on rank 0; [] elsewhere)."""
    path = os.fspath(path)
    rank = dist.get_rank(process_group) if dist.is_available() and dist.is_initialized() \
        else 0
    if isinstance(source, dict):
        tensors, _ = flatten(source)
        specs, get = _live_source(tensors, process_group)
    else:
        if rank != 0:
            return []  # a checkpoint needs no other rank: rank 0 reads and writes it all
        store = store_for(source)
        version = store.resolve()
        body, _ = read_metadata(store, version)
        reader = store.reader(version, {f: int(n) for f, n in body["files"].items()}, 0)
        specs = {k: (tuple(e["shape"]), dtype_from_name(e["dtype"]))
                 for k, e in body["tensors"].items()}
        get = _checkpoint_getter(body, reader, os.path.join(version, metadata.NAME))
    for key, (_, dtype) in specs.items():
        if dtype not in _ST_NAMES:
            raise UnsupportedValueError(f"{key!r} is {dtype_name(dtype)}, which safetensors "
                                        f"cannot store", key=key)
    groups = _split(sorted(specs), specs, max_shard_bytes)
    if max_shard_bytes is None:
        names = [path]
    else:
        names = [f"{path.rstrip('/')}/model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
                 for i in range(len(groups))]
    for name, keys in zip(names, groups):
        _write_file(name, keys, specs, get, rank == 0)
    if rank != 0:
        return []
    if max_shard_bytes is None:
        return names
    total = sum(math.prod(s) * d.itemsize for s, d in specs.values())
    weight_map = {k: os.path.basename(n) for n, keys in zip(names, groups) for k in keys}
    index = f"{path.rstrip('/')}/{INDEX}"
    _put(index, json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map},
                           indent=2).encode())
    return [*names, index]


def _split(keys: list[str], specs: dict, limit: int | None) -> list[list[str]]:
    if limit is None:
        return [keys]
    if limit <= 0:
        raise ValueError(f"max_shard_bytes={limit}: expected a positive size in bytes")
    groups: list[list[str]] = [[]]
    size = 0
    for k in keys:
        n = math.prod(specs[k][0]) * specs[k][1].itemsize
        if groups[-1] and size + n > limit:
            groups.append([])
            size = 0
        groups[-1].append(k)
        size += n
    return groups


def _live_source(tensors: dict[str, torch.Tensor], group: Any):
    """The specs of every key of a live state and the getter of its whole value on rank 0.

    Note [a live export across stages]
    Where every rank holds every key, each value is gathered (a DTensor's ``full_tensor``,
    every rank, keys in one order). Pipeline stages hold different keys (Note [different
    keys per rank] in saving.py): the ranks then share their keys' shapes and dtypes (one
    all-gather), and each key, in sorted order, is gathered by the ranks that hold it (its
    DTensor's mesh) and sent by the lowest of them to rank 0, which writes it. Every rank
    walks the keys in the same order and only rank 0 receives, so no rank waits on one that
    waits on it."""
    comm = _Comm(group)
    if not keys_differ(comm, sorted(tensors)):
        return {k: (tuple(t.shape), t.dtype) for k, t in tensors.items()}, \
            _live_getter(tensors)
    mine = sorted((k, (tuple(t.shape), t.dtype)) for k, t in tensors.items())
    specs: dict[str, tuple] = {}
    holders: dict[str, list[int]] = {}
    for rank, items in enumerate(comm.all_gather(mine)):
        for key, spec in items:
            if specs.setdefault(key, spec) != spec:
                raise StateMismatchError(
                    f"export_safetensors: {key!r} is {specs[key]} on rank {holders[key][0]} "
                    f"and {spec} on rank {rank}: expected one shape and dtype for a key")
            holders.setdefault(key, []).append(rank)
    whole = _live_getter(tensors)
    device = next((t.device for t in tensors.values()), torch.device("cpu"))

    def get(key: str) -> torch.Tensor | None:
        first = holders[key][0]
        value = whole(key) if key in tensors else None  # the holders gather it together
        if first == 0 or comm.rank not in (0, first):
            return value if comm.rank == 0 else None
        if comm.rank == first:
            dist.send(value.contiguous(), dst=comm.global_rank(0), group=group)
            return None
        shape, dtype = specs[key]
        out = torch.empty(shape, dtype=dtype, device=device)
        dist.recv(out, src=comm.global_rank(first), group=group)
        return out

    return specs, get


def _live_getter(tensors: dict[str, torch.Tensor]):
    def get(key: str) -> torch.Tensor:
        t = tensors[key]
        with torch.no_grad():
            if isinstance(t, DTensor) or hasattr(t, "full_tensor"):  # ours, or torch's
                return t.full_tensor()  # a collective: every rank, keys in the same order
            return t.detach()
    return get


def _checkpoint_getter(body: dict, reader: Any, where: str):
    def get(key: str) -> torch.Tensor:
        entry = body["tensors"][key]
        out = torch.empty(entry["shape"], dtype=dtype_from_name(entry["dtype"]))
        _fill_tensor(reader, key, entry, out, where, {})
        return out
    return get


def _write_file(name: str, keys: list[str], specs: dict, get, writes: bool) -> None:
    """One safetensors file: the header from the specs, then each tensor as it is fetched
    (one whole tensor in memory at a time)."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    at = 0
    for k in keys:
        shape, dtype = specs[k]
        n = math.prod(shape) * dtype.itemsize
        header[k] = {"dtype": _ST_NAMES[dtype], "shape": list(shape), "data_offsets": [at, at + n]}
        at += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    out = _open_write(name) if writes else None
    try:
        if out is not None:
            out.write(len(raw).to_bytes(8, "little") + raw)
        for k in keys:
            t = get(k)  # on every rank: a DTensor's gather is collective
            if out is not None:
                out.write(memoryview(t.contiguous().reshape(-1).view(torch.uint8).numpy()))
    finally:
        if out is not None:
            out.close()
            _finish(name)


def _is_url(path: str) -> bool:
    return "://" in path


def _open_write(name: str):
    if _is_url(name):
        import fsspec

        return fsspec.open(name, "wb").open()
    os.makedirs(os.path.dirname(os.path.abspath(name)), exist_ok=True)
    return open(name + ".tmp", "wb")


def _finish(name: str) -> None:
    """Local files are written under a temporary name and renamed whole."""
    if not _is_url(name):
        os.replace(name + ".tmp", name)


def _put(name: str, data: bytes) -> None:
    f = _open_write(name)
    try:
        f.write(data)
    finally:
        f.close()
        _finish(name)


def load_safetensors(state: dict, path: str | os.PathLike) -> None:
    """Fill the tensors of ``state`` in place from a consolidated safetensors file, or from
    the hub's ``INDEX`` of several, by their state keys; each DTensor reads only its piece
    (Note [box runs]), plain tensors the whole. Values other than tensors are left as they
    are. No collective: ranks read independently."""
    path = os.fspath(path)
    files = _files_of(path)
    headers: dict[str, tuple[dict, int]] = {}

    def load_tensor(key: str, target: torch.Tensor) -> None:
        file = files(key)
        if file not in headers:
            headers[file] = _header(file)
        header, data_start = headers[file]
        entry = header.get(key)
        if not isinstance(entry, dict):
            raise MissingKeyError(f"{file}: no tensor {key!r} (the target holds one)",
                                  file=file, key=key)
        view, local = view_of(target, key)
        shape, dtype = tuple(entry["shape"]), ST_DTYPES.get(entry["dtype"])
        if (shape, dtype) != (view.shape, view.dtype):
            raise StateMismatchError(f"{file}: tensor {key!r} is {entry['dtype']} "
                                     f"{list(shape)}, but the target is "
                                     f"{dtype_name(view.dtype)} {list(view.shape)}",
                                     file=file, key=key)
        if local is None:
            return
        with torch.no_grad():
            if not view.holds_value():  # Note [loading into Partial]
                local.zero_()
                return
            begin = data_start + entry["data_offsets"][0]
            for box, at in view.boxes():  # one, or one per run of a block shard
                runs = list(box_runs(shape, box, dtype.itemsize))
                buf = _read_ranges(file, [(begin + a, begin + b) for a, b in runs])
                piece = (torch.frombuffer(buf, dtype=dtype) if buf
                         else torch.empty(0, dtype=dtype))
                local[at].copy_(piece.reshape(tuple(b - a for a, b in box)))

    fill(state, load_tensor, lambda key, old: old)


def box_runs(shape: tuple[int, ...], box: Box, itemsize: int) -> Iterator[tuple[int, int]]:
    """Note [box runs]: the byte ranges ``[start, end)`` of ``box`` in a row-major tensor.

    >>> list(box_runs((4, 6), ((1, 3), (0, 6)), 1)), list(box_runs((4, 6), ((0, 2), (2, 4)), 1))
    ([(6, 18)], [(2, 4), (8, 10)])
    """
    if any(b <= a for a, b in box):
        return
    strides = [math.prod(shape[i + 1:]) for i in range(len(shape))]
    k = len(shape) - 1
    while k >= 0 and box[k] == (0, shape[k]):
        k -= 1
    if k < 0:
        yield 0, math.prod(shape) * itemsize
        return
    run = (box[k][1] - box[k][0]) * strides[k] * itemsize
    for index in itertools.product(*(range(a, b) for a, b in box[:k])):
        start = (sum(i * s for i, s in zip(index, strides)) + box[k][0] * strides[k]) * itemsize
        yield start, start + run


def _files_of(path: str):
    """key -> file: the one file, or the index's weight map."""
    if not path.endswith(".json"):
        return lambda key: path
    index = json.loads(_read_whole(path))
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict):
        raise CorruptCheckpointError(f"{path}: not a safetensors index (no weight_map)",
                                     file=path)
    folder = path.rsplit("/", 1)[0] if "/" in path else "."

    def file(key: str) -> str:
        if key not in weight_map:
            raise MissingKeyError(f"{path}: no tensor {key!r} in the weight map (the target "
                                  f"holds one); it maps {len(weight_map)} tensors",
                                  file=path, key=key)
        return f"{folder}/{weight_map[key]}"
    return file


def _header(file: str) -> tuple[dict, int]:
    head = _read_ranges(file, [(0, 8)])
    n = int.from_bytes(head, "little") if len(head) == 8 else -1
    if not 0 < n < 1 << 30:
        raise CorruptCheckpointError(f"{file}: not a safetensors file (header length {n})",
                                     file=file)
    try:
        header = json.loads(bytes(_read_ranges(file, [(8, 8 + n)])))
    except ValueError as e:
        raise CorruptCheckpointError(f"{file}: safetensors header is not JSON ({e})",
                                     file=file) from None
    return header, 8 + n


def _read_whole(path: str) -> bytes:
    if _is_url(path):
        import fsspec

        with fsspec.open(path, "rb") as f:
            return f.read()
    with open(path, "rb") as f:
        return f.read()


def _read_ranges(file: str, ranges: list[tuple[int, int]]) -> bytearray:
    """The bytes of ``ranges`` of ``file``, one after another."""
    out = bytearray(sum(b - a for a, b in ranges))
    view, at = memoryview(out), 0
    if _is_url(file):
        import fsspec

        fs, p = fsspec.core.url_to_fs(file)
        parts = fs.cat_ranges([p] * len(ranges), [a for a, _ in ranges], [b for _, b in ranges])
        for part, (a, b) in zip(parts, ranges):
            if isinstance(part, Exception) or len(part) != b - a:
                raise CorruptCheckpointError(f"{file}: bytes [{a}, {b}) could not be read "
                                             f"whole ({part!r:.80})", file=file)
            view[at:at + b - a] = part
            at += b - a
        return out
    try:
        fd = os.open(file, os.O_RDONLY)
    except FileNotFoundError:
        raise CheckpointError(f"{file}: missing", file=file) from None
    try:
        for a, b in ranges:
            got = os.preadv(fd, [view[at:at + b - a]], a)
            if got != b - a:
                raise CorruptCheckpointError(f"{file}: ends before byte {b}", file=file)
            at += b - a
    finally:
        os.close(fd)
    return out
