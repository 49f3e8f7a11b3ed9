"""``load_torch_dcp``: read a checkpoint written by ``torch.distributed.checkpoint`` (DCP,
``FileSystemWriter``: ``.metadata`` + ``__<rank>_<n>.distcp`` files) into a state of our
DTensors (or plain tensors) in any layout.

Note [trusted DCP checkpoints only]
DCP's ``.metadata`` is a pickle and each stored item is a ``torch.save`` blob: reading them
is unpickling. This module unpickles ``.metadata`` with an allow-list (DCP's metadata
classes stand in by plain records, ``torch.Size``, dtypes, layouts, memory formats, paths;
any other global refuses) and each item with ``torch.load(weights_only=True)``. That narrows
what a file can do but is not a guarantee for hostile input: use it for checkpoints you
trust. Our own format (``save``/``load``) never unpickles. It does not import
torch.distributed.checkpoint (nor therefore torch.distributed.tensor).

Note [the reverse]
Writing DCP's format from dtensor would mean pickling DCP's own metadata classes (importing
torch.distributed.checkpoint, which imports torch.distributed.tensor, which dtensor never
does) and producing an unverifiable pickle. Instead ``load`` accepts torch's DTensors as
targets: load one of our checkpoints into torch's model and optimizer state, then
``torch.distributed.checkpoint.save`` it if a DCP copy is wanted.
"""

from __future__ import annotations

import io
import os
import pickle
import time
from typing import Any

import torch

from dtensor.checkpoint.errors import (
    CheckpointNotFoundError,
    ChecksumError,
    CorruptCheckpointError,
    MissingFileError,
    MissingKeyError,
    StateMismatchError,
    TruncatedFileError,
)
from dtensor.checkpoint.loading import LoadReport
from dtensor.checkpoint.pieces import overlaps, relative, view_of
from dtensor.checkpoint.storage import dtype_name
from dtensor.checkpoint.tree import fill
from dtensor.layout import box_intersect, box_numel

_DCP = ("torch.distributed.checkpoint.metadata", "torch.distributed.checkpoint.filesystem")


class _Record:
    """Stands in for one of DCP's metadata dataclasses: its fields, nothing callable."""

    kind = ""

    def __setstate__(self, state: Any) -> None:
        if self.kind == "TensorProperties" and isinstance(state, tuple) and len(state) == 5:
            # its own __getstate__: (dtype, layout, requires_grad, memory format, pin_memory)
            state = {"dtype": state[0], "requires_grad": state[2]}
        elif isinstance(state, tuple) and len(state) == 2:  # (dict, slots)
            state = {**(state[0] or {}), **(state[1] or {})}
        if not isinstance(state, dict):
            raise CorruptCheckpointError(f"DCP metadata: unexpected state for {self.kind}")
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"{self.kind}({self.__dict__})"


def _record(name: str) -> type:
    return type(name, (_Record,), {"kind": name})


_RECORDS = {name: _record(name) for name in (
    "Metadata", "TensorStorageMetadata", "TensorProperties", "ChunkStorageMetadata",
    "BytesStorageMetadata", "MetadataIndex", "StorageMeta", "_StorageInfo")}
def _path(*parts: str) -> str:
    return os.path.join(*parts)  # a pathlib path pickles as its parts


_ALLOWED = {("torch", "Size"): torch.Size, ("pathlib", "PosixPath"): _path,
            ("pathlib", "WindowsPath"): _path}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module in _DCP and name in _RECORDS:
            return _RECORDS[name]
        if module in _DCP and name == "_MEM_FORMAT_ENCODING":
            return lambda *a: None  # an enum of memory formats; not needed to read
        if (module, name) in _ALLOWED:
            return _ALLOWED[(module, name)]
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        if (module, name) == ("torch.serialization", "_get_layout"):
            return lambda n: None  # the layout (strided); not needed to read
        raise CorruptCheckpointError(f"DCP metadata refers to {module}.{name}, which is not "
                                     f"on the allow-list of DCP metadata classes "
                                     f"(Note [trusted DCP checkpoints only])")


def load_torch_dcp(state: dict, path: str | os.PathLike) -> LoadReport:
    """Fill ``state`` in place from the DCP checkpoint directory ``path`` (trusted input only:
    Note [trusted DCP checkpoints only]). Keys are DCP's dotted names, as ours are; each rank
    reads only the DCP chunks that intersect its pieces.

    >>> load_torch_dcp({}, "/nonexistent")
    Traceback (most recent call last):
    ...
    dtensor.checkpoint.errors.CheckpointNotFoundError: /nonexistent/.metadata: no DCP ...
    """
    start = time.perf_counter()
    path = os.fspath(path)
    where = os.path.join(path, ".metadata")
    try:
        with open(where, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise CheckpointNotFoundError(f"{where}: no DCP checkpoint there", file=where) from None
    try:
        meta = _Unpickler(io.BytesIO(raw)).load()
    except CorruptCheckpointError:
        raise
    except Exception as e:  # noqa: BLE001 - any unpickling failure: a damaged file
        raise CorruptCheckpointError(f"{where}: unreadable DCP metadata ({e})",
                                     file=where) from None
    storage = {(k.fqn, _offset(k)): v for k, v in meta.storage_data.items()}
    stats = {"bytes": len(raw), "chunks": 0}
    files: set[str] = set()

    def read_item(key: str, offset: tuple | None) -> Any:
        info = storage.get((key, offset))
        if info is None:
            raise CorruptCheckpointError(f"{where}: no storage entry for {key!r} at offset "
                                         f"{offset}", file=where, key=key)
        if getattr(info, "transform_descriptors", None):
            raise CorruptCheckpointError(f"{where}: {key!r} is stored with transforms "
                                         f"{info.transform_descriptors}: not supported",
                                         file=where, key=key)
        file = os.path.join(path, info.relative_path)
        files.add(file)
        try:
            with open(file, "rb") as f:
                blob = os.pread(f.fileno(), info.length, info.offset)
        except FileNotFoundError:
            raise MissingFileError(f"{file}: missing, but DCP's metadata lists it as holding "
                                   f"{key!r}", file=file, key=key) from None
        stats["bytes"] += len(blob)
        stats["chunks"] += 1
        if len(blob) != info.length:
            raise TruncatedFileError(f"{file}: {key!r} needs bytes [{info.offset}, "
                                     f"{info.offset + info.length}) but the file ends early",
                                     file=file, key=key)
        try:
            return torch.load(io.BytesIO(blob), weights_only=True)
        except Exception as e:  # noqa: BLE001 - any failure to load: damaged bytes
            # DCP keeps no checksum: damaged bytes show only as an unreadable item
            raise ChecksumError(f"{file}: {key!r} does not load ({type(e).__name__}: "
                                f"{str(e)[:200]})", file=file, key=key) from None

    def load_tensor(key: str, target: torch.Tensor) -> None:
        md = meta.state_dict_metadata.get(key)
        if md is None or md.kind != "TensorStorageMetadata":
            _missing(meta, key, where, md)
        _fill(read_item, key, md, target, where)

    def load_value(key: str, old: Any) -> Any:
        md = meta.state_dict_metadata.get(key)
        if md is None or md.kind != "BytesStorageMetadata":
            _missing(meta, key, where, md)
        return read_item(key, None)

    fill(state, load_tensor, load_value)
    return LoadReport(path, stats["bytes"], stats["chunks"], len(files),
                      time.perf_counter() - start)


def _offset(index: Any) -> tuple | None:
    offset = getattr(index, "offset", None)  # absent for non-tensor items
    return None if offset is None else tuple(offset)


def _missing(meta: Any, key: str, where: str, md: Any) -> None:
    if md is not None:
        raise StateMismatchError(f"{where}: {key!r} is a {md.kind} in the DCP checkpoint, "
                                 f"which does not fit the target's entry", file=where, key=key)
    raise MissingKeyError(f"{where}: no {key!r} in the DCP checkpoint (it has "
                          f"{len(meta.state_dict_metadata)} entries)", file=where, key=key)


def _fill(read_item: Any, key: str, md: Any, target: torch.Tensor, where: str) -> None:
    view, local = view_of(target, key)
    shape, dtype = tuple(md.size), md.properties.dtype
    if (shape, dtype) != (view.shape, view.dtype):
        raise StateMismatchError(f"{where}: tensor {key!r} is {dtype_name(dtype)} "
                                 f"{list(shape)} in the DCP checkpoint, but the target is "
                                 f"{dtype_name(view.dtype)} {list(view.shape)}", file=where,
                                 key=key)
    if local is None:
        return
    with torch.no_grad():
        if not view.holds_value():
            local.zero_()
            return
        for box, at in view.boxes():  # one, or one per run of a block shard
            if box_numel(box):
                _fill_box(read_item, key, md, local[at], box, where)


def _fill_box(read_item: Any, key: str, md: Any, part: torch.Tensor, box: tuple,
              where: str) -> None:
    covered = 0
    for c in md.chunks:
        cbox = tuple((o, o + s) for o, s in zip(c.offsets, c.sizes))
        if not overlaps(cbox, box):
            continue
        chunk = read_item(key, tuple(c.offsets))
        common = box_intersect(cbox, box)
        part[relative(common, box)] = chunk[relative(common, cbox)].to(part.device)
        covered += box_numel(common)
    if covered != box_numel(box):
        raise CorruptCheckpointError(f"{where}: tensor {key!r}: DCP's chunks cover "
                                     f"{covered} of the {box_numel(box)} elements this "
                                     f"rank needs", file=where, key=key)
