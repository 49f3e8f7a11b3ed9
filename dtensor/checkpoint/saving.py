"""``save``: every rank writes the pieces it is the one writer of, then rank 0 commits
(Note [commit]).

Note [saving Partial]
A DTensor with Partial placements is reduced before it is written: ``redistribute`` to
Replicate on those mesh dims (an all-reduce over each), so the file holds the value the
tensor stands for and loading into any layout needs no knowledge of how it was split. It
costs that collective at save time; the reduced copy is dropped once written.

Note [one writer]
Each box is written by exactly one rank: for a DTensor, the rank whose coordinate is 0 on
every mesh dim of the root mesh that does not shard it (replicas, and copies held on sibling
sub-meshes, are skipped); plain tensors, the same on every rank, go round-robin over the
ranks in key order. Rank 0 checks that the boxes written tile every tensor exactly once.

Note [different keys per rank]
Ranks may save different keys: the stages of a pipeline each hold their own layers (and
their optimizer state). ``begin`` all-gathers a digest of each rank's keys; only where they
differ does it all-gather the key lists, so each rank knows which ranks hold each key (its
holders). Then the one-writer rule is taken over the holders only: a plain tensor goes
round-robin over its holders; a DTensor's box is written by the holder with the lowest root
coordinate among those holding the same box (coordinate 0 on the dims that do not shard it
when every rank holds it, as above; a later pipeline stage's first replica otherwise). A
value is written by its lowest holder. Where every rank holds the same keys this costs one
all-gather of 40 bytes a rank.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from dtensor.checkpoint import metadata
from dtensor.checkpoint.errors import CheckpointError, SaveFailedError
from dtensor.checkpoint.hooks import reached
from dtensor.checkpoint.pending import settle_previous
from dtensor.checkpoint.pieces import (CHUNK_BYTES, TensorView, chunk_name, chunk_shape, grid,
                                      view_of)
from dtensor.checkpoint.storage import dtype_name
from dtensor.checkpoint.stores import FolderStore, LinkStore, store_for
from dtensor.checkpoint.tree import flatten
from dtensor.checkpoint.writer import Piece, file_size
from dtensor.placements import Partial, Replicate, Shard, fmt_placements
from dtensor.tensor import DTensor


@dataclass(frozen=True)
class SaveReport:
    """What one rank did: the version directory published, this rank's bytes written."""

    path: str
    version: str
    bytes_written: int
    seconds: float


class _Comm:
    """The few collectives of a save; none in a world of one (no process group)."""

    def __init__(self, group: Any) -> None:
        self.on = dist.is_available() and dist.is_initialized()
        self.group = group
        self.rank = dist.get_rank(group) if self.on else 0
        self.size = dist.get_world_size(group) if self.on else 1

    def broadcast(self, obj: Any) -> Any:
        if not self.on:
            return obj
        box = [obj]
        src = 0 if self.group is None else dist.get_global_rank(self.group, 0)
        dist.broadcast_object_list(box, src=src, group=self.group)
        return box[0]

    def all_gather(self, obj: Any) -> list[Any]:
        if not self.on:
            return [obj]
        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def global_rank(self, rank: int) -> int:
        return rank if self.group is None or not self.on else dist.get_global_rank(self.group,
                                                                                    rank)

    def gather(self, obj: Any) -> list[Any] | None:
        """Every rank's ``obj`` on rank 0, None elsewhere (manifests grow with the state: only
        rank 0 needs them)."""
        if not self.on:
            return [obj]
        out: list[Any] | None = [None] * self.size if self.rank == 0 else None
        dst = 0 if self.group is None else dist.get_global_rank(self.group, 0)
        dist.gather_object(obj, out, dst=dst, group=self.group)
        return out


def _attempt(fn: Callable[[], Any]) -> tuple[str, Any]:
    """("ok", result) or ("error", message): a rank's failure is shared, so that every rank
    raises instead of waiting on it. A BaseException (a crash, a kill) is not caught."""
    try:
        return "ok", fn()
    except Exception as e:  # noqa: BLE001 - re-raised on every rank as SaveFailedError
        return "error", f"{type(e).__name__}: {e}"


def _failures(results: list[tuple[str, Any]]) -> list[tuple[int, str]]:
    return [(r, msg) for r, (status, msg) in enumerate(results) if status != "ok"]


def raise_failure(what: str, failed: list[tuple[int, str]]) -> None:
    detail = "; ".join(f"rank {r}: {msg}" for r, msg in failed)
    raise SaveFailedError(f"save failed at {what} ({detail}); the previous checkpoint at "
                          f"this path is intact")


def save(state: dict, path: str | os.PathLike, *, process_group: Any = None,
         chunk_bytes: int = CHUNK_BYTES) -> SaveReport:
    """Save ``state`` (nested dicts/lists of DTensors, tensors and JSON-like values) to
    ``path``, called by every rank of ``process_group`` (default: the world; none needed in
    one process). Publishes atomically (Note [commit]); returns this rank's report. Values
    (everything but tensors) are taken from rank 0, as JSON (Note [no pickle]); ranks may hold
    different keys (Note [different keys per rank]). A failed ``async_save`` before it is
    raised here first (Note [async save]).

    >>> import tempfile, torch, dtensor.checkpoint as dcp
    >>> d = tempfile.mkdtemp()
    >>> _ = dcp.save({"w": torch.arange(4.0), "step": 3}, f"{d}/ck")
    >>> state = {"w": torch.zeros(4), "step": 0}
    >>> _ = dcp.load(state, f"{d}/ck")
    >>> state
    {'w': tensor([0., 1., 2., 3.]), 'step': 3}
    """
    start = time.perf_counter()
    settle_previous()
    begun = begin(state, path, process_group)
    comm, version = begun.comm, begun.version
    mine = _attempt(lambda: write_planned(plan_rank(begun, chunk_bytes)))
    reached("file_written")
    gathered = comm.gather(mine)
    reached("gathered")
    verdict = None  # rank 0: None (published) or (step, [(rank, message)])
    if gathered is not None:
        failed = _failures(gathered)
        if failed:
            verdict = ("writing the files", failed)
        else:
            manifests = [m for _, m in gathered]
            status, message = _attempt(lambda: commit_version(begun.store, version, manifests,
                                                              comm.size))
            verdict = None if status == "ok" else ("committing", [(0, message)])
    verdict = comm.broadcast(verdict)
    if verdict is not None:
        raise_failure(*verdict)
    reached("done")
    return SaveReport(begun.path, version, mine[1]["bytes"], time.perf_counter() - start)


@dataclass
class Begun:
    """A save after its first collectives: the version directory made (step 1 of Note
    [commit]), Partial tensors reduced (Note [saving Partial]); nothing written yet."""

    path: str
    store: LinkStore | FolderStore
    version: str
    comm: _Comm
    tensors: dict[str, torch.Tensor]
    source: dict[str, str]  # key -> placements as saved from, before any reduction
    values: dict[str, Any]
    # Note [different keys per rank]: key -> the group ranks holding it; None: every rank
    holders: dict[str, tuple[int, ...]] | None = None
    plain_keys: tuple[str, ...] = ()  # every plain tensor key of any rank, sorted


def begin(state: dict, path: str | os.PathLike, process_group: Any) -> Begun:
    """The collective start of a save, the same for ``save`` and ``async_save``."""
    store = store_for(path)
    path = os.fspath(path) if "://" in os.fspath(path) else os.path.abspath(os.fspath(path))
    comm = _Comm(process_group)
    tensors, values = flatten(state)
    source = {k: fmt_placements(view_of(t, k)[0].placements) for k, t in tensors.items()}
    reached("begin")
    made = comm.broadcast(_attempt(store.new_version)
                          if comm.rank == 0 else None)
    if made[0] != "ok":
        raise_failure("making the version directory", [(0, made[1])])
    reached("dir_made")
    holders, plain_keys = _holders(comm, tensors, values)
    tensors = _reduce_partials(tensors)
    reached("partials_reduced")
    return Begun(path, store, made[1], comm, tensors, source, values, holders, plain_keys)


def _holders(comm: _Comm, tensors: dict[str, torch.Tensor], values: dict[str, Any]
             ) -> tuple[dict[str, tuple[int, ...]] | None, tuple[str, ...]]:
    """Note [different keys per rank]: who holds each key, and every rank's plain tensor keys
    (None and this rank's where every rank holds the same keys)."""
    kinds = {k: "dtensor" if view_of(t, k)[0].distributed else "tensor"
             for k, t in tensors.items()} | {k: "value" for k in values}
    mine = tuple(sorted(kinds.items()))
    plain = tuple(sorted(k for k, kind in kinds.items() if kind == "tensor"))
    if not keys_differ(comm, mine):
        return None, plain
    holders: dict[str, list[int]] = {}
    every_plain: set[str] = set()
    for rank, keys in enumerate(comm.all_gather(mine)):
        for key, kind in keys:
            holders.setdefault(key, []).append(rank)
            if kind == "tensor":
                every_plain.add(key)
    return {k: tuple(v) for k, v in holders.items()}, tuple(sorted(every_plain))


def keys_differ(group: Any, keys: Any) -> bool:
    """Whether any rank of ``group`` holds other ``keys`` than another (one all-gather of a
    digest; False in one process)."""
    comm = group if isinstance(group, _Comm) else _Comm(group)
    digest = hashlib.sha1(repr(keys).encode()).hexdigest()
    return len(set(comm.all_gather(digest))) > 1


def _first_holder(t: torch.Tensor, view: TensorView, holders: tuple[int, ...],
                  comm: _Comm) -> bool:
    """Note [different keys per rank]: this rank writes its box of DTensor ``t`` if it has the
    lowest root coordinate among the holders of the same box."""
    if view.coordinate is None:
        return False
    mesh = t.device_mesh
    root, root_dims = mesh.root_mesh() if isinstance(t, DTensor) else (mesh, list(range(
        mesh.ndim)))
    where = {int(root.mesh[index]): index
             for index in itertools.product(*(range(n) for n in root.mesh.shape))}
    mine = where[comm.global_rank(comm.rank)]
    sharding = {root_dims[m] for m, p in enumerate(view.placements) if isinstance(p, Shard)}
    same_box = [where[g] for g in map(comm.global_rank, holders) if g in where
                and all(where[g][d] == mine[d] for d in sharding)]
    return min(same_box) == mine


def _reduce_partials(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Note [saving Partial]; in key order, the same on every rank."""
    out = dict(tensors)
    for key in sorted(tensors):
        t = tensors[key]
        if isinstance(t, DTensor) and any(isinstance(p, Partial) for p in t.placements) \
                and t.device_mesh.get_coordinate() is not None:
            with torch.no_grad():  # not t.detach(): torch's C++ would import its DTensor
                out[key] = t.redistribute(placements=[
                    Replicate() if isinstance(p, Partial) else p for p in t.placements])
    return out


@dataclass
class Planned:
    """This rank's part of a save: its file's pieces (Note [one writer]) and its manifest,
    whose crc32s ``write_planned`` fills in."""

    store: LinkStore | FolderStore
    version: str
    file: str
    pieces: list[Piece]
    manifest: dict


def plan_rank(begun: Begun, chunk_bytes: int) -> Planned:
    """The pieces this rank writes and its manifest, crc32s still None; no I/O."""
    rank = begun.comm.rank
    file = f"rank{rank:05d}.safetensors"
    views = {k: view_of(t, k) for k, t in begun.tensors.items()}
    plain = {k: i for i, k in enumerate(begun.plain_keys)}
    holders = begun.holders
    pieces: list[Piece] = []
    entries: dict[str, dict] = {}
    for key, (view, local) in views.items():
        if view.distributed and any(isinstance(p, Partial) for p in view.placements):
            raise CheckpointError(f"{key!r}: torch's DTensor with Partial placements "
                                  f"{view.placements}: reduce it before saving", key=key)
        if holders is None:
            writes = (plain[key] % begun.comm.size == rank if not view.distributed
                      else view.coordinate is not None and view.replica_zero)
        elif not view.distributed:
            writes = holders[key][plain[key] % len(holders[key])] == rank
        else:
            writes = _first_holder(begun.tensors[key], view, holders[key], begun.comm)
        boxes = view.boxes() if writes else []
        entries[key] = {"shape": list(view.shape), "dtype": dtype_name(view.dtype),
                        "placements": begun.source[key], "mesh": list(view.mesh_shape),
                        "box": boxes[0][0] if len(boxes) == 1 else None, "pieces": []}
        for box, where in boxes:  # one box, or one per run of a block shard
            if any(b == a for a, b in box):
                continue  # an empty piece (a 0-d box is () and is written)
            assert local is not None
            chunk = chunk_shape(tuple(b - a for a, b in box), view.dtype.itemsize, chunk_bytes)
            cboxes = grid(box, chunk)
            pieces.append(Piece(local.detach()[where], box, cboxes,
                                [chunk_name(key, c) for c in cboxes]))
            entries[key]["pieces"].append({"file": file, "box": [list(b) for b in box],
                                           "chunk": list(chunk), "crc32": None})
    # values: rank 0's, and (Note [different keys per rank]) those no lower rank holds
    values = {k: v for k, v in begun.values.items()
              if (rank == 0 if holders is None else holders[k][0] == rank)}
    if not pieces:
        return Planned(begun.store, begun.version, file, [],
                       {"file": None, "bytes": 0, "tensors": entries, "values": values})
    return Planned(begun.store, begun.version, file, pieces,
                   {"file": file, "bytes": file_size(pieces), "tensors": entries,
                    "values": values})


def write_planned(planned: Planned) -> dict:
    """Write the planned file, each chunk straight from its tensor (Note [one pass] in
    writer.py), and return the manifest with the chunks' crc32s."""
    if planned.pieces:
        nbytes, crcs = planned.store.write(planned.version, planned.file, planned.pieces)
        if nbytes != planned.manifest["bytes"]:
            raise CheckpointError(f"{planned.file}: wrote {nbytes} bytes, planned "
                                  f"{planned.manifest['bytes']}", file=planned.file)
        fill_crcs(planned.manifest, crcs)
    return planned.manifest


def fill_crcs(manifest: dict, crcs: list[list[int]]) -> None:
    """Put each written piece's chunk crc32s (in the order of the planned pieces) into the
    manifest."""
    written = [p for e in manifest["tensors"].values() for p in e["pieces"]]
    for entry, piece_crcs in zip(written, crcs, strict=True):
        entry["crc32"] = piece_crcs


def commit_version(store: LinkStore | FolderStore, version: str, manifests: list[dict],
                   world_size: int) -> str:
    """Rank 0's part of Note [commit] (steps 4 and 5), or of Note [folder of versions]."""
    store.commit(version, metadata.dumps(metadata.merge(manifests, world_size)))
    return version
