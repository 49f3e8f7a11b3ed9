"""Tensor files, read: safetensors files (written by ``writer.py``) read by byte offsets:
parse the 8-byte header length and the JSON header, then ``preadv`` exactly one chunk's
bytes into a buffer, check its crc32 and view it as a tensor. Nothing read is ever
unpickled.

>>> dtype_from_name("bfloat16")
torch.bfloat16
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from dtensor.checkpoint.errors import (
    CheckpointError,
    ChecksumError,
    CorruptCheckpointError,
    MissingFileError,
    TruncatedFileError,
)

# safetensors' dtype names -> torch
ST_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "U16": torch.uint16, "U32": torch.uint32, "U64": torch.uint64,
    "BOOL": torch.bool, "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
    "C64": torch.complex64,
}
_MAX_HEADER = 1 << 30


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def dtype_from_name(name: str) -> torch.dtype:
    """``"float32"`` -> ``torch.float32``; anything but a dtype name raises (no eval)."""
    value = getattr(torch, name, None) if isinstance(name, str) else None
    if not isinstance(value, torch.dtype):
        raise CorruptCheckpointError(f"dtype {name!r} in the metadata is not a torch dtype")
    return value


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class _Open:
    fd: Any  # an os file descriptor; a path for FsReader
    header: dict[str, Any]
    data_start: int


@dataclass
class Reader:
    """Reads chunks from the safetensors files of one checkpoint directory, counting bytes."""

    directory: str
    sizes: dict[str, int]  # file -> size the save recorded
    bytes_read: int = 0
    files: dict[str, _Open] = field(default_factory=dict)

    def read(self, file: str, name: str, key: str, dtype: torch.dtype,
             shape: tuple[int, ...], crc: int) -> torch.Tensor:
        """The chunk ``name`` of ``file``, checked against its header entry and crc32."""
        f = self._open(file, key)
        where = os.path.join(self.directory, file)
        entry = f.header.get(name)
        expected = f"dtype {dtype_name(dtype)} and shape {list(shape)} as the metadata records"
        if entry is None:
            raise CorruptCheckpointError(
                f"{where}: tensor {key!r}: the file's header has no entry {name!r}, expected "
                f"one with {expected}: the file was replaced or damaged after the save",
                file=where, key=key)
        if not isinstance(entry, dict) or ST_DTYPES.get(entry.get("dtype")) != dtype \
                or tuple(entry.get("shape", ())) != shape:
            found = (f"dtype {entry.get('dtype')!r} and shape {entry.get('shape')!r}"
                     if isinstance(entry, dict) else f"{entry!r}")
            raise CorruptCheckpointError(
                f"{where}: tensor {key!r}: header entry {name!r} has {found}, expected "
                f"{expected}: the file was replaced or damaged after the save",
                file=where, key=key)
        offsets = entry.get("data_offsets")
        if not (isinstance(offsets, list) and len(offsets) == 2
                and all(isinstance(o, int) for o in offsets) and 0 <= offsets[0] <= offsets[1]):
            raise CorruptCheckpointError(f"{where}: tensor {key!r}: header entry {name!r} has "
                                         f"data_offsets {offsets!r}, expected [begin, end]",
                                         file=where, key=key)
        begin, end = offsets
        nbytes = end - begin
        buf = bytearray(nbytes)
        got = self._read_into(f.fd, buf, f.data_start + begin) if nbytes else 0
        self.bytes_read += got
        if got != nbytes:
            raise TruncatedFileError(f"{where}: tensor {key!r}: chunk {name!r} needs bytes "
                                     f"[{f.data_start + begin}, {f.data_start + end}) but the "
                                     f"file ends early", file=where, key=key)
        found = zlib.crc32(buf)
        if found != crc:
            raise ChecksumError(f"{where}: tensor {key!r}: chunk {name!r} has crc32 "
                                f"{found:#010x}, expected {crc:#010x} as written: the file was "
                                f"modified or damaged after the save", file=where, key=key)
        return torch.frombuffer(buf, dtype=dtype).reshape(shape)

    def prefetch(self, wanted: Iterable[tuple[str, str, str]]) -> None:
        """Start reading the chunks ``(file, name, key)`` that the reads to come will ask for:
        one ``posix_fadvise(WILLNEED)`` per run of chunks adjacent in a file, all issued
        before the first read, so the device works on large requests, several files at once,
        while the reader checks and copies (Note [read-ahead]). Only a hint: anything wrong
        (a missing file, a bad header) is left to ``read``, which raises it in its order."""
        advise = getattr(os, "posix_fadvise", None)
        if advise is None or not self.local:
            return
        spans: dict[str, list[tuple[int, int]]] = {}
        for file, name, key in wanted:
            try:
                f = self._open(file, key)
            except CheckpointError:
                continue
            entry = f.header.get(name)
            offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
            if isinstance(offsets, list) and len(offsets) == 2 \
                    and all(isinstance(o, int) for o in offsets):
                spans.setdefault(file, []).append((f.data_start + offsets[0],
                                                   f.data_start + offsets[1]))
        for file, runs in spans.items():
            fd = self.files[file].fd
            start, end = -1, -1
            for a, b in sorted(runs) + [(-1, -1)]:
                if a != end:  # not adjacent to the run so far: advise that run, start anew
                    if end > start >= 0:
                        advise(fd, start, end - start, os.POSIX_FADV_WILLNEED)
                    start = a
                end = b

    def _open(self, file: str, key: str) -> _Open:
        f = self.files.get(file)
        if f is not None:
            return f
        where = os.path.join(self.directory, file)
        try:
            fd = self._open_file(where)
        except FileNotFoundError:
            raise MissingFileError(f"{where}: missing, but the metadata lists it as holding "
                                   f"tensor {key!r}", file=where, key=key) from None
        try:
            f = self._parse(fd, where, key)
        except BaseException:
            self._close_file(fd)
            raise
        self.files[file] = f
        return f

    def _parse(self, fd: Any, where: str, key: str) -> _Open:
        size = self._size(fd)
        expected = self.sizes.get(os.path.basename(where))
        if expected is not None and size != expected:
            kind = TruncatedFileError if size < expected else CorruptCheckpointError
            raise kind(f"{where}: {size} bytes, expected {expected} as written (opened for "
                       f"tensor {key!r})", file=where, key=key)
        head = self._pread(fd, 8, 0)
        self.bytes_read += len(head)
        n = int.from_bytes(head, "little") if len(head) == 8 else -1
        if not 0 < n <= min(size - 8, _MAX_HEADER):
            raise CorruptCheckpointError(f"{where}: not a safetensors file (header length "
                                         f"{n}, file size {size}; opened for tensor {key!r})",
                                         file=where, key=key)
        raw = self._pread(fd, n, 8)
        self.bytes_read += len(raw)
        try:
            header = json.loads(raw)
        except ValueError as e:
            raise CorruptCheckpointError(f"{where}: safetensors header is not JSON ({e}); "
                                         f"opened for tensor {key!r}", file=where,
                                         key=key) from None
        if not isinstance(header, dict):
            raise CorruptCheckpointError(f"{where}: safetensors header is not an object",
                                         file=where, key=key)
        return _Open(fd, header, 8 + n)

    def close(self) -> None:
        for f in self.files.values():
            self._close_file(f.fd)
        self.files.clear()

    # the I/O, local files by descriptor; FsReader reads byte ranges through fsspec instead
    local = True

    def _open_file(self, where: str) -> Any:
        return os.open(where, os.O_RDONLY)

    def _close_file(self, fd: Any) -> None:
        os.close(fd)

    def _size(self, fd: Any) -> int:
        return os.fstat(fd).st_size

    def _pread(self, fd: Any, n: int, offset: int) -> bytes:
        return os.pread(fd, n, offset)

    def _read_into(self, fd: Any, buf: bytearray, offset: int) -> int:
        return os.preadv(fd, [buf], offset)
