"""The metadata file: global shape, dtype and placements of every tensor, which file holds
which box (as checksummed chunks), the Python values, and each file's size. JSON with a
crc32 of its canonical body, written last by rank 0 once every rank's files are durable
(Note [commit]). ``merge`` is where the pieces every rank reports are checked to cover each
tensor exactly once.

>>> body = {"tensors": {}, "values": {"lr": 0.1}, "files": {}}
>>> parse(dumps(body), "metadata.json")["values"]
{'lr': 0.1}
"""

from __future__ import annotations

import json
import math
import zlib
from typing import Any

from dtensor.checkpoint.errors import CorruptCheckpointError, SaveFailedError
from dtensor.checkpoint.pieces import overlaps
from dtensor.layout import box_numel

FORMAT = "dtensor.checkpoint"
VERSION = 1
NAME = "metadata.json"


def _canonical(body: dict) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def dumps(body: dict) -> bytes:
    return json.dumps({"format": FORMAT, "version": VERSION,
                       "crc32": zlib.crc32(_canonical(body)), "body": body}).encode()


def parse(raw: bytes, where: str) -> dict:
    """The body of a metadata file; anything but what ``dumps`` wrote raises."""
    try:
        doc = json.loads(raw)
    except ValueError as e:
        raise CorruptCheckpointError(f"{where}: not JSON ({e})", file=where) from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise CorruptCheckpointError(f"{where}: not a {FORMAT} metadata file", file=where)
    if doc.get("version") != VERSION:
        raise CorruptCheckpointError(f"{where}: format version {doc.get('version')!r}, this "
                                     f"reader knows {VERSION}", file=where)
    body = doc.get("body")
    if not isinstance(body, dict) or zlib.crc32(_canonical(body)) != doc.get("crc32"):
        raise CorruptCheckpointError(f"{where}: metadata checksum does not match its body: "
                                     f"the file was modified or damaged", file=where)
    return body


def merge(manifests: list[dict], world_size: int) -> dict:
    """The metadata body from every rank's manifest; raises ``SaveFailedError`` naming the
    tensor and ranks unless every tensor is covered exactly once by the boxes written."""
    tensors: dict[str, dict] = {}
    writers: dict[str, list[tuple[int, list]]] = {}
    files: dict[str, int] = {}
    for rank, m in enumerate(manifests):
        if m["file"] is not None:
            files[m["file"]] = m["bytes"]
        for key, t in m["tensors"].items():
            entry = tensors.setdefault(key, {k: t[k] for k in ("shape", "dtype", "placements",
                                                               "mesh")} | {"pieces": []})
            if (entry["shape"], entry["dtype"]) != (t["shape"], t["dtype"]):
                raise SaveFailedError(f"tensor {key!r} is {t['dtype']} {t['shape']} on rank "
                                      f"{rank} but {entry['dtype']} {entry['shape']} on a "
                                      f"lower rank: expected one global tensor", key=key)
            # what a rank writes is its pieces' boxes: one, or one per run of a block shard
            writers.setdefault(key, []).extend((rank, p["box"]) for p in t["pieces"])
            entry["pieces"].extend(t["pieces"])
    # ranks may hold different keys (Note [different keys per rank] in saving.py): what
    # must hold is that the boxes written tile each tensor exactly once
    for key, entry in tensors.items():
        _check_cover(key, entry["shape"], writers.get(key, []))
    values: dict[str, Any] = {}
    for m in manifests:  # each value comes from its lowest holder only
        values.update(m.get("values", {}))
    return {"world_size": world_size, "tensors": tensors, "values": values, "files": files}


def _check_cover(key: str, shape: list[int], written: list[tuple[int, list]]) -> None:
    boxes = [(r, tuple(tuple(b) for b in box)) for r, box in written if box_numel(
        tuple(tuple(b) for b in box))]
    for i, (ra, a) in enumerate(boxes):
        for rb, b in boxes[i + 1:]:
            if overlaps(a, b):
                raise SaveFailedError(f"tensor {key!r}: ranks {ra} and {rb} both write box "
                                      f"{list(a)} / {list(b)}: expected one writer per piece "
                                      f"(is it held on two meshes?)", key=key)
    total = sum(box_numel(b) for _, b in boxes)
    if total != math.prod(shape):
        raise SaveFailedError(f"tensor {key!r} of shape {shape}: the ranks write {total} "
                              f"elements, expected {math.prod(shape)}", key=key)


def validate_body(body: Any, where: str) -> dict:
    """Shallow shape check of a parsed body, so later lookups fail with a named error."""
    if not (isinstance(body, dict) and all(isinstance(body.get(k), dict)
                                           for k in ("tensors", "values", "files"))):
        raise CorruptCheckpointError(f"{where}: metadata lacks tensors/values/files",
                                     file=where)
    return body
