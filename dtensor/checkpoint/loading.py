"""``load``: fill a target state in place from a checkpoint, in the target's own layout.

Each rank reads the metadata, works out the box each of its tensors holds in the target
layout, and reads only the chunks that intersect it (Note [chunks]), checking each chunk's
crc32. No collective: ranks read independently, so a load works on any world size, one
process without a process group included. Keys the target does not ask for are not read.

Note [read-ahead]
A rank needs a few runs of adjacent chunks per source piece, and reads them one 128 KiB
chunk at a time (each checked by its crc32 before it is used). From the page cache that costs
little; from the device, small reads one after another leave it idle between requests: a
save writes its files past the page cache (Note [direct writes] in writer.py), and a job
resuming on another host finds nothing cached either. So before the first read, a load
tells the kernel every run it will read (``posix_fadvise(WILLNEED)``: asynchronous
readahead), and the chunk reads that follow find their bytes cached or on their way.
"""

from __future__ import annotations

import os
import reprlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from dtensor.checkpoint import metadata
from dtensor.checkpoint.errors import (
    CheckpointError,
    CorruptCheckpointError,
    IncompleteCheckpointError,
    MissingKeyError,
    StateMismatchError,
)
from dtensor.checkpoint.pieces import (chunk_name, chunks_meeting, grid_size, overlaps,
                                      relative, view_of)
from dtensor.checkpoint.storage import Reader, dtype_from_name, dtype_name
from dtensor.checkpoint.stores import FolderStore, LinkStore, store_for
from dtensor.checkpoint.tree import decode, fill, leaves
from dtensor.layout import box_intersect, box_numel

# a target value in an error, shortened where it is long, with '...' where it was cut
_SHORT = reprlib.Repr()  # its keyword arguments are Python 3.12's
_SHORT.maxlevel, _SHORT.maxdict, _SHORT.maxlist, _SHORT.maxstring, _SHORT.maxother = 2, 4, 4, 40, 40


@dataclass(frozen=True)
class LoadReport:
    """What one rank read: bytes (metadata, headers, chunks), chunks, files opened."""

    version: str
    bytes_read: int
    chunks_read: int
    files_opened: int
    seconds: float


def read_metadata(store: LinkStore | FolderStore, directory: str) -> tuple[dict, int]:
    """(the checked metadata body, its size in bytes) of a version directory."""
    where = os.path.join(directory, metadata.NAME)
    raw = store.get(directory, metadata.NAME)
    if raw is None:
        raise IncompleteCheckpointError(
            f"{where}: missing: {directory} is a save that never finished (it publishes "
            f"metadata.json last), not a checkpoint", file=where)
    return metadata.validate_body(metadata.parse(raw, where), where), len(raw)


def load(state: dict, path: str | os.PathLike, *, process_group: Any = None) -> LoadReport:
    """Fill ``state`` in place from the checkpoint at ``path``: tensors are copied into
    (DTensors keep their placements: each rank reads the part its piece needs), value
    entries replaced. Every key of ``state`` must be in the checkpoint with the same global
    shape and dtype. ``process_group`` is accepted for symmetry with ``save``: a load needs
    no communication.

    >>> import tempfile, torch, dtensor.checkpoint as dcp
    >>> d = tempfile.mkdtemp()
    >>> _ = dcp.save({"w": torch.ones(2)}, f"{d}/ck")
    >>> dcp.load({"w": torch.zeros(3)}, f"{d}/ck")
    Traceback (most recent call last):
    ...
    dtensor.checkpoint.errors.StateMismatchError: ...: tensor 'w' is float32 [2] in the ...
    """
    start = time.perf_counter()
    store = store_for(path)
    directory = store.resolve()
    body, meta_bytes = read_metadata(store, directory)
    reader = store.reader(directory, {f: int(n) for f, n in body["files"].items()},
                          meta_bytes)
    where = os.path.join(directory, metadata.NAME)
    counts = {"chunks": 0}

    def load_tensor(key: str, target: torch.Tensor) -> None:
        entry = body["tensors"].get(key)
        if entry is None:
            _missing(body, key, where, "a tensor")
        counts["chunks"] += _fill_tensor(reader, key, entry, target, where, planned)

    def load_value(key: str, old: Any) -> Any:
        if key in body["values"]:
            return decode(body["values"][key])
        _missing(body, key, where, f"the value {_SHORT.repr(old)}")

    try:
        planned: dict[str, tuple[torch.Tensor, list]] = {}  # key -> (target, its chunks)
        reader.prefetch(_wanted(state, body, planned))
        fill(state, load_tensor, load_value)
    finally:
        reader.close()
    return LoadReport(directory, reader.bytes_read, counts["chunks"], len(reader.sizes),
                      time.perf_counter() - start)


def _missing(body: dict, key: str, where: str, what: str) -> None:
    if key in body["tensors"]:
        raise StateMismatchError(f"{where}: {key!r} is a tensor in the checkpoint, but the "
                                 f"target holds {what}", file=where, key=key)
    if key in body["values"]:
        raise StateMismatchError(f"{where}: {key!r} is a value in the checkpoint, but the "
                                 f"target holds {what}", file=where, key=key)
    under = sorted(k for k in (*body["tensors"], *body["values"]) if k.startswith(key + "."))
    if under:
        raise StateMismatchError(
            f"{where}: the target holds {what} at {key!r}, but the checkpoint has "
            f"{len(under)} entries under it (e.g. {under[0]!r}): expected the same structure; "
            f"for an optimizer, call dtensor.checkpoint.init_optimizer_state(opt) before "
            f"opt.state_dict()", file=where, key=key)
    raise MissingKeyError(f"{where}: no {key!r} in the checkpoint (the target holds {what}); "
                          f"it has {len(body['tensors'])} tensors and {len(body['values'])} "
                          f"values", file=where, key=key)


def _wanted(state: dict, body: dict,
            planned: dict[str, tuple[torch.Tensor, list]]) -> Iterator[tuple[str, str, str]]:
    """(file, chunk name, key) of every chunk this rank's load will read, in read order
    (Note [read-ahead]), each tensor's chunks kept in ``planned`` for its fill; tensors that
    will not load (missing, mismatched, damaged metadata) are left out: their errors come
    from the load itself."""
    for key, kind, target in leaves(state):
        entry = body["tensors"].get(key) if kind == "tensor" else None
        if not isinstance(entry, dict) or list(target.shape) != entry.get("shape"):
            continue
        view, local = view_of(target, key)
        if local is None or not view.holds_value():
            continue
        try:
            needed = [n for box, _ in view.boxes() for n in _needed(entry, box, key, "")]
        except (CheckpointError, KeyError, TypeError, ValueError):
            continue
        planned[key] = (target, needed)
        for p, cbox, _ in needed:
            yield p["file"], chunk_name(key, cbox), key


def _needed(entry: dict, box: tuple, key: str, where: str) -> Iterator[tuple[dict, tuple, Any]]:
    """(piece, chunk box, crc32) of the saved chunks that intersect ``box``."""
    for p in entry["pieces"]:
        pbox = tuple(tuple(b) for b in p["box"])
        if not overlaps(pbox, box):
            continue
        chunk = p["chunk"]
        if len(chunk) != len(pbox) or not all(isinstance(c, int) and c > 0 for c in chunk):
            raise CorruptCheckpointError(f"{where}: tensor {key!r}: chunk shape {chunk!r} for "
                                         f"box {list(pbox)}", file=where, key=key)
        if grid_size(pbox, chunk) != len(p["crc32"]):
            raise CorruptCheckpointError(f"{where}: tensor {key!r}: {len(p['crc32'])} "
                                         f"checksums for {grid_size(pbox, chunk)} chunks",
                                         file=where, key=key)
        for i, cbox in chunks_meeting(pbox, chunk, box):
            yield p, cbox, p["crc32"][i]


def _fill_tensor(reader: Reader, key: str, entry: dict, target: torch.Tensor, where: str,
                 planned: dict[str, tuple[torch.Tensor, list]]) -> int:
    """Copy the saved tensor's part that ``target``'s piece holds into it; chunks read."""
    view, local = view_of(target, key)
    shape, dtype = tuple(entry["shape"]), dtype_from_name(entry["dtype"])
    if (shape, dtype) != (view.shape, view.dtype):
        raise StateMismatchError(
            f"{where}: tensor {key!r} is {entry['dtype']} {list(shape)} in the checkpoint, but "
            f"the target is {dtype_name(view.dtype)} {list(view.shape)}", file=where, key=key)
    if local is None:
        return 0  # not on the target's mesh: holds nothing
    with torch.no_grad():
        if not view.holds_value():  # Note [loading into Partial]
            local.zero_()
            return 0
        boxes = view.boxes()  # one box, or one per run of a block shard
        plan = planned.get(key)
        chunks = 0
        for box, at in boxes:
            covered = 0
            part = local[at]
            needed = plan[1] if plan is not None and plan[0] is target and len(boxes) == 1 \
                else _needed(entry, box, key, where)
            for p, cbox, crc in needed:
                chunk = reader.read(p["file"], chunk_name(key, cbox), key, dtype,
                                    tuple(b - a for a, b in cbox), int(crc))
                common = box_intersect(cbox, box)
                part[relative(common, box)] = chunk[relative(common, cbox)].to(local.device)
                covered += box_numel(common)
                chunks += 1
            if covered != box_numel(box):
                raise CheckpointError(f"{where}: tensor {key!r}: the chunks cover {covered} of "
                                      f"the {box_numel(box)} elements of box {list(box)}",
                                      file=where, key=key)
    return chunks
