"""Writing one rank's tensor file: the safetensors format (8-byte little-endian header
length, a JSON header, then every chunk's bytes back to back), written by our own code from
each chunk's memory, with its crc32 taken on the way (Note [one pass]). Readers need nothing
of ours: ``safetensors.safe_open`` reads the file, and so does ``storage.Reader``.

>>> import os, tempfile, torch, zlib
>>> path = os.path.join(tempfile.mkdtemp(), "f.safetensors")
>>> w = torch.arange(6.0).reshape(2, 3)
>>> size, crcs = write_chunks(path, [("w@0,0", w[:, :2]), ("w@0,2", w[:, 2:])])
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
element size and is copied into the buffer as its own dtype. A filesystem that refuses ``O_DIRECT`` (tmpfs, some
network filesystems: ``EINVAL`` at open or at the first write) gets ordinary writes; there,
a chunk that is contiguous in the local tensor is written from its own memory, without the
copy. The price of ``O_DIRECT``: the file is not left in the page cache, so a load right
after the save reads it from the device.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import threading
import zlib
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from dtensor.checkpoint.errors import UnsupportedValueError
from dtensor.checkpoint.storage import ST_DTYPES, dtype_name

ALIGN = 4096  # O_DIRECT's alignment: the block size of common devices and filesystems
STAGE_BYTES = 8 << 20  # one staging buffer; a multiple of ALIGN
BUFFERS = 3  # staging buffers per file: one filling, up to two being written
_DATA_ALIGN = 8  # the largest element size ST_DTYPES holds
_O_DIRECT = getattr(os, "O_DIRECT", 0)  # Linux; elsewhere ordinary writes
_datasync = getattr(os, "fdatasync", os.fsync)  # the file's data and size; mtime not needed

_ST_NAMES = {dtype: name for name, dtype in ST_DTYPES.items()}


def write_chunks(path: str, chunks: Sequence[tuple[str, torch.Tensor]]) -> tuple[int, list[int]]:
    """Write ``chunks`` (name, tensor of any strides and device) as one new safetensors file
    at ``path`` and make it durable (fdatasync) before returning (its size in bytes, each
    chunk's crc32 in the order given)."""
    order = sorted(range(len(chunks)), key=lambda i: -chunks[i][1].element_size())
    header, data_bytes = _header([chunks[i] for i in order])
    size = len(header) + data_bytes
    crcs = [0] * len(chunks)
    with _File(path, size) as out, torch.no_grad():
        out.put(header)
        for i in order:
            crcs[i] = out.put_tensor(chunks[i][1])
    return size, crcs


def _header(chunks: Sequence[tuple[str, torch.Tensor]]) -> tuple[bytes, int]:
    """(8-byte length and JSON header, padded so that the data starts at a multiple of 8, as
    safetensors pads it; the data's bytes)."""
    entries: dict[str, dict] = {}
    at = 0
    for name, t in chunks:
        st = _ST_NAMES.get(t.dtype)
        if st is None:
            key = name.rsplit("@", 1)[0]
            raise UnsupportedValueError(f"{key!r} is {dtype_name(t.dtype)}, which safetensors "
                                        f"cannot store: expected one of "
                                        f"{sorted(dtype_name(d) for d in _ST_NAMES)}", key=key)
        n = t.numel() * t.element_size()
        entries[name] = {"dtype": st, "shape": list(t.shape), "data_offsets": [at, at + n]}
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

    def __init__(self, path: str, size: int) -> None:
        self.size = size
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        try:
            self.fd = os.open(path, flags | _O_DIRECT, 0o644) if _O_DIRECT else -1
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise
            self.fd = -1
        self.direct = self.fd >= 0
        if not self.direct:
            self.fd = os.open(path, flags, 0o644)
        # a small file fits in one buffer, with ALIGN to spare for a part carried over
        stage = min(STAGE_BYTES, size + -size % ALIGN + ALIGN)
        self.buffers = [_aligned(stage) for _ in range(BUFFERS if stage == STAGE_BYTES else 1)]
        self.limit = stage - ALIGN  # the largest part put at once (see _flush)
        self.views = [memoryview(b.numpy()) for b in self.buffers]
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
