"""Writing one rank's tensor file: the safetensors format (8-byte little-endian header
length, a JSON header, then every chunk's bytes back to back), written by our own code from
each chunk's memory, with its crc32 taken on the way (Note [one pass]). Readers need nothing
of ours: ``safetensors.safe_open`` reads the file, and so does ``storage.Reader``.

>>> import os, tempfile, torch, zlib
>>> path = os.path.join(tempfile.mkdtemp(), "f.safetensors")
>>> w = torch.arange(6.0).reshape(2, 3)  # two chunks: columns [0, 2) and [2, 3)
>>> piece = Piece(w, ((0, 2), (0, 3)), [((0, 2), (0, 2)), ((0, 2), (2, 3))], ["w@0,0", "w@0,2"])
>>> size, [crcs] = write_pieces(path, [piece])
>>> crcs[1] == zlib.crc32(w[:, 2:].contiguous().numpy()), size == os.path.getsize(path)
(True, True)

Note [one pass]
Each chunk of a piece is a box of the rank's local tensor, mostly not contiguous in it (a
column block of a row-major piece). Its bytes are copied once, by one ``copy_``, into a
staging buffer, at the offset they take in the file; their crc32 is taken right away, while
they are in cache; full buffers go to the file by ``pwrite``, on a thread pool (file writes
release the GIL), so a rank copies and checksums its next chunks while its previous buffer is
being written and several ranks' writes are in flight at once. No chunk gets its own
allocation, and a rank never holds its pieces twice: three buffers of ``STAGE_BYTES`` at most.

Note [direct writes]
Where the filesystem takes it, the file is opened with ``O_DIRECT``: a write goes from the
staging buffer to the device without passing through the page cache, so the kernel does not
copy every byte a second time and the final fsync has nothing left to flush but metadata.
``O_DIRECT`` asks for buffers, offsets and lengths aligned to the device's block: the staging
buffers are ``ALIGN``-aligned and hold the file's bytes from offset 0 on, header included,
so every write but the last starts at a multiple of ``ALIGN`` and is a whole number of
``ALIGN`` blocks (a part of a chunk past the last whole block is carried over to the next
buffer), and the last is padded with zeros and the file truncated back to its size. The
header is padded with spaces to a multiple of 8 bytes, as safetensors pads it, and chunks
are laid out by element size, largest first, so every chunk starts at a multiple of its own
element size and is copied into the buffer as its own dtype. A filesystem that refuses
``O_DIRECT`` (tmpfs, some network filesystems: ``EINVAL`` at open or at the first write)
gets ordinary writes; there, a chunk that is contiguous in the local tensor is written from
its own memory, without the copy. The price of ``O_DIRECT``: the file is not left in the
page cache, so a load right after the save reads it from the device (Note [read-ahead] in
loading.py keeps that cheap).
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import threading
import zlib
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import torch

from dtensor.checkpoint.errors import UnsupportedValueError
from dtensor.checkpoint.pieces import relative
from dtensor.checkpoint.storage import ST_DTYPES, dtype_name
from dtensor.layout import Box

ALIGN = 4096  # O_DIRECT's alignment: the block size of common devices and filesystems
STAGE_BYTES = 8 << 20  # one staging buffer; a multiple of ALIGN
BUFFERS = 3  # staging buffers per file: one filling, up to two being written
_DATA_ALIGN = 8  # the largest element size ST_DTYPES holds
_O_DIRECT = getattr(os, "O_DIRECT", 0)  # Linux; elsewhere ordinary writes
_datasync = getattr(os, "fdatasync", os.fsync)  # the file's data and size; mtime not needed

_ST_NAMES = {dtype: name for name, dtype in ST_DTYPES.items()}


@dataclass(frozen=True)
class Piece:
    """A box of a rank's local tensor, written as chunks: ``names[i]`` is the chunk whose
    global box is ``chunks[i]`` (inside ``box``, which ``local`` holds)."""

    local: torch.Tensor
    box: Box
    chunks: Sequence[Box]
    names: Sequence[str]


def write_pieces(path: str, pieces: Sequence[Piece], *, stage_bytes: int = STAGE_BYTES,
                 direct: bool = True) -> tuple[int, list[list[int]]]:
    """Write every chunk of ``pieces`` as one new safetensors file at ``path`` and make it
    durable (fdatasync) before returning (its size in bytes, each piece's chunks' crc32s).
    ``direct=False`` never tries O_DIRECT; ``stage_bytes`` (a multiple of ALIGN) sizes the
    staging buffers."""
    order = ordered(pieces)
    header, data_bytes = _header([pieces[i] for i in order])
    size = len(header) + data_bytes
    crcs: list[list[int]] = [[] for _ in pieces]
    with _File(path, size, stage_bytes, direct) as out, torch.no_grad():
        out.put(header)
        for i in order:
            local, box = pieces[i].local, pieces[i].box
            crcs[i] = [out.put_tensor(local[relative(c, box)]) for c in pieces[i].chunks]
    return size, crcs


def ordered(pieces: Sequence[Piece]) -> list[int]:
    """The order of the pieces in the file: by element size, largest first (Note [direct
    writes]: every chunk then starts at a multiple of its element size)."""
    return sorted(range(len(pieces)), key=lambda i: -pieces[i].local.element_size())


def header_for(pieces: Sequence[Piece]) -> tuple[bytes, int]:
    """(the file's 8-byte length and JSON header, its data's bytes) for ``pieces``."""
    return _header([pieces[i] for i in ordered(pieces)])


def file_size(pieces: Sequence[Piece]) -> int:
    """The size of the file ``write_pieces`` writes for ``pieces``, known before writing."""
    header, data_bytes = header_for(pieces)
    return len(header) + data_bytes


def _header(pieces: Sequence[Piece]) -> tuple[bytes, int]:
    """(8-byte length and JSON header, padded so that the data starts at a multiple of 8, as
    safetensors pads it; the data's bytes)."""
    entries: dict[str, dict] = {}
    at = 0
    for p in pieces:
        st = _ST_NAMES.get(p.local.dtype)
        if st is None:
            key = p.names[0].rsplit("@", 1)[0] if p.names else ""
            raise UnsupportedValueError(f"{key!r} is {dtype_name(p.local.dtype)}, which "
                                        f"safetensors cannot store: expected one of "
                                        f"{sorted(dtype_name(d) for d in _ST_NAMES)}", key=key)
        itemsize = p.local.element_size()
        for name, c in zip(p.names, p.chunks, strict=True):
            shape = [b - a for a, b in c]
            n = math.prod(shape) * itemsize
            entries[name] = {"dtype": st, "shape": shape, "data_offsets": [at, at + n]}
            at += n
    raw = json.dumps(entries, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % _DATA_ALIGN)
    return len(raw).to_bytes(8, "little") + raw, at


def _parts(t: torch.Tensor, limit: int) -> Iterator[torch.Tensor]:
    """``t`` as sub-tensors of at most ``limit`` bytes (one element at least) whose row-major
    bytes, one after another, are ``t``'s: slabs along the first dimension."""
    nbytes = t.numel() * t.element_size()
    if nbytes <= limit or t.dim() == 0:
        yield t
        return
    row = nbytes // t.shape[0]
    if row > limit:
        for i in range(t.shape[0]):
            yield from _parts(t[i], limit)
        return
    step = limit // row
    for i in range(0, t.shape[0], step):
        yield t[i:i + step]


def _aligned(nbytes: int) -> torch.Tensor:
    """A uint8 CPU tensor of ``nbytes`` whose memory starts at an ALIGN boundary."""
    raw = torch.empty(nbytes + ALIGN, dtype=torch.uint8)
    skip = -raw.data_ptr() % ALIGN
    return raw[skip:skip + nbytes]


# Staging buffers of finished files, kept for the next (Note [one pass]): a fresh one costs
# a page fault per 4 KiB at first touch, and the kernel zeroes each page. At most _KEEP kept.
_FREE: list[torch.Tensor] = []
_FREE_LOCK = threading.Lock()
_KEEP = 2 * BUFFERS


def _take(nbytes: int) -> torch.Tensor:
    with _FREE_LOCK:
        for i, b in enumerate(_FREE):
            if b.numel() == nbytes:
                return _FREE.pop(i)
    return _aligned(nbytes)


def _give(buffers: list[torch.Tensor]) -> None:
    with _FREE_LOCK:
        for b in buffers:
            if b.numel() == STAGE_BYTES and len(_FREE) < _KEEP:
                _FREE.append(b)


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    """Write all of ``data`` at ``offset``; drop O_DIRECT for this file where the device
    wants another alignment than ours (EINVAL)."""
    while data:
        try:
            n = os.pwrite(fd, data, offset)
        except OSError as e:
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
            if e.errno != errno.EINVAL or not flags & _O_DIRECT:
                raise
            fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~_O_DIRECT)
            continue
        data, offset = data[n:], offset + n


class _File:
    """One file being written: staging buffers filled in file order, each written by the
    pool once full (Note [one pass], Note [direct writes])."""

    def __init__(self, path: str, size: int, stage_bytes: int, direct: bool) -> None:
        if stage_bytes < 2 * ALIGN or stage_bytes % ALIGN:
            raise ValueError(f"stage_bytes={stage_bytes}: expected a multiple of {ALIGN}, "
                             f"at least {2 * ALIGN}")
        self.size = size
        # a small file fits in one buffer, with ALIGN to spare for a part carried over
        stage = min(stage_bytes, size + -size % ALIGN + ALIGN)
        self.buffers = [_take(stage) for _ in range(BUFFERS if stage == stage_bytes else 1)]
        self.limit = stage - ALIGN  # the largest part put at once (see _flush)
        self.views = [memoryview(b.numpy()) for b in self.buffers]
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL  # last: nothing after it may fail
        self.fd = -1
        if direct and _O_DIRECT:
            try:
                self.fd = os.open(path, flags | _O_DIRECT, 0o644)
            except OSError as e:
                if e.errno != errno.EINVAL:
                    raise
        self.direct = self.fd >= 0
        if not self.direct:
            self.fd = os.open(path, flags, 0o644)
        self.pending: list[Future | None] = [None] * len(self.buffers)
        self.current = 0  # index of the buffer being filled
        self.fill = 0  # bytes in it
        self.offset = 0  # file offset of its first byte (a multiple of ALIGN)
        self.background: list[Future] = []  # writes from tensors' own memory

    def __enter__(self) -> _File:
        return self

    def __exit__(self, kind: type | None, *exc: object) -> None:
        try:
            if kind is None:
                self._finish()
        finally:
            for f in [*self.pending, *self.background]:
                if f is not None:
                    f.exception()  # wait: the pool must be done with our buffers and fd
            os.close(self.fd)
            _give(self.buffers)

    def put(self, data: bytes) -> None:
        for at in range(0, len(data), self.limit):
            part = data[at:at + self.limit]
            self._room(len(part))
            self.views[self.current][self.fill:self.fill + len(part)] = part
            self.fill += len(part)

    def put_tensor(self, t: torch.Tensor) -> int:
        """Append ``t``'s row-major bytes; their crc32."""
        if not self.direct and t.device.type == "cpu" and t.is_contiguous() and t.numel():
            return self._put_own_memory(t)
        crc = 0
        for part in _parts(t, self.limit):
            n = part.numel() * part.element_size()
            self._room(n)
            at = self.fill
            dst = self.buffers[self.current][at:at + n]
            dst.view(part.dtype).view(part.shape).copy_(part)
            crc = zlib.crc32(self.views[self.current][at:at + n], crc)
            self.fill += n
        return crc

    def _put_own_memory(self, t: torch.Tensor) -> int:
        """Ordinary writes only: a contiguous chunk goes to the file from its own memory."""
        data = memoryview(t.reshape(-1).view(torch.uint8).numpy())
        crc = zlib.crc32(data)
        self._flush(whole=True)
        at = self.offset
        self.background.append(_pool().submit(_pwrite_all, self.fd, data, at))
        self.offset += len(data)  # unaligned: fine without O_DIRECT
        return crc

    def _room(self, n: int) -> None:
        """Make room for ``n`` bytes in the current buffer, writing it out if it is full."""
        if self.fill + n > len(self.views[self.current]):
            self._flush(whole=False)

    def _flush(self, whole: bool) -> None:
        """Write the current buffer's aligned prefix (all of it if ``whole``, which only
        ordinary writes ask for) and move on to the next buffer, carrying the rest over."""
        keep = 0 if whole else self.fill % ALIGN
        out = self.fill - keep
        if out:
            view = self.views[self.current][:out]
            self.pending[self.current] = _pool().submit(_pwrite_all, self.fd, view, self.offset)
        nxt = (self.current + 1) % len(self.buffers)
        if nxt != self.current:
            self._wait(nxt)
            if keep:
                self.views[nxt][:keep] = self.views[self.current][out:self.fill]
        elif keep:  # one buffer: wait for its write, then move the rest to its start
            self._wait(nxt)
            self.views[nxt][:keep] = self.views[nxt][out:self.fill]
        else:
            self._wait(nxt)
        self.current, self.fill, self.offset = nxt, keep, self.offset + out

    def _wait(self, i: int) -> None:
        f, self.pending[i] = self.pending[i], None
        if f is not None:
            f.result()

    def _finish(self) -> None:
        """The last buffer (padded to ALIGN under O_DIRECT, then the file cut back to its
        size), every write waited for, then the data made durable."""
        if self.fill:
            end = self.fill + (-self.fill % ALIGN if self.direct else 0)
            self.buffers[self.current][self.fill:end] = 0
            _pwrite_all(self.fd, self.views[self.current][:end], self.offset)
            if end != self.fill:
                os.ftruncate(self.fd, self.size)
        for i in range(len(self.pending)):
            self._wait(i)
        for f in self.background:
            f.result()
        _datasync(self.fd)


_POOL: list[ThreadPoolExecutor] = []
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    """Threads that run file writes (which release the GIL), for every save of the process:
    writes of several ranks and several buffers in flight at once. Made on first use."""
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(max_workers=8,
                                            thread_name_prefix="dtensor-checkpoint-io"))
        return _POOL[0]
