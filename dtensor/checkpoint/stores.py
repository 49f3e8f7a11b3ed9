"""Where a checkpoint's versions live, how one is published, which one a load reads: a local
path published by a link (``LinkStore``, Note [commit]), or a folder of versions on any
fsspec filesystem (``FolderStore``, Note [folder of versions]). ``store_for`` picks one.

Note [folder of versions]
Object stores have no links and no renames, and a copied checkpoint (``cp -r``, ``rsync``, a
download) is a plain folder, not a link. There a checkpoint is a folder that holds versions::

    ckpt/v-20261202-183012-123456-3fa2c1d0/rank00000.safetensors ... metadata.json

A save writes a new version folder; its ``metadata.json``, written last by rank 0 once every
rank's file is durable, is the commit marker: a version with it is complete (an object
store's PUT makes an object appear whole), one without it is a save that never finished.
Readers pick the newest committed version (names sort by their UTC time); a flat checkpoint
(``metadata.json`` at the top, as a copied link version is) counts as the oldest. After the
commit rank 0 removes the other versions (each ``metadata.json`` first, so nothing half
removed ever loads) and the flat checkpoint's files. A save that dies anywhere before the
commit leaves the newest committed version as it was. Local paths that are links, or new,
keep the link protocol and its fast writer (Note [direct writes]); a local folder that is
not a checkpoint is refused, as before.

>>> import tempfile
>>> type(store_for(tempfile.mkdtemp() + "/new")).__name__, type(store_for("memory://c")).__name__
('LinkStore', 'FolderStore')
"""

from __future__ import annotations

import os
import secrets
import time
import zlib
from collections.abc import Sequence
from typing import Any

import torch

from dtensor.checkpoint import commit
from dtensor.checkpoint.errors import CheckpointError, CheckpointNotFoundError
from dtensor.checkpoint.hooks import reached
from dtensor.checkpoint.pieces import relative
from dtensor.checkpoint.storage import Reader, fsync_dir
from dtensor.checkpoint.writer import Piece, header_for, ordered, write_pieces

METADATA = "metadata.json"
_VERSION = "v-"


def store_for(path: str | os.PathLike) -> LinkStore | FolderStore:
    """``FolderStore`` for a URL (``memory://``, ``s3://``, ``file://``...) or a local folder
    that already holds a checkpoint; ``LinkStore`` for any other local path."""
    path = os.fspath(path)
    if "://" in path:
        return FolderStore(path)
    path = os.path.abspath(path)
    if os.path.isdir(path) and not os.path.islink(path) and os.listdir(path):
        return FolderStore(path)  # a copied checkpoint; anything else is refused there
    return LinkStore(path)


class LinkStore:
    """A local path published as a link to a version directory (Note [commit])."""

    def __init__(self, path: str) -> None:
        self.path = path

    def new_version(self) -> str:
        return commit.new_version_dir(self.path)

    def write(self, version: str, file: str, pieces: Sequence[Piece]) -> tuple[int, list]:
        return write_pieces(os.path.join(version, file), pieces)

    def commit(self, version: str, metadata_bytes: bytes) -> None:
        tmp = os.path.join(version, METADATA + ".tmp")
        with open(tmp, "wb") as f:
            f.write(metadata_bytes)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(version, METADATA))
        fsync_dir(version)
        reached("metadata_written")
        commit.publish(self.path, version)
        reached("published")
        commit.remove_others(self.path, version)

    def resolve(self) -> str:
        return commit.resolve(self.path)

    def reader(self, version: str, sizes: dict[str, int], bytes_read: int) -> Reader:
        return Reader(version, sizes, bytes_read=bytes_read)

    def get(self, version: str, name: str) -> bytes | None:
        try:
            with open(os.path.join(version, name), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def put(self, version: str, name: str, data: bytes) -> None:
        """Whole and durable: a reader polling for ``name`` never sees a part."""
        tmp = os.path.join(version, name + ".tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(version, name))

    def remove(self, version: str, name: str) -> None:
        try:
            os.unlink(os.path.join(version, name))
        except FileNotFoundError:
            pass


class FolderStore:
    """A folder of versions on an fsspec filesystem (Note [folder of versions])."""

    def __init__(self, url: str) -> None:
        import fsspec  # the `checkpoint` extra; only needed for this kind of store

        self.url = url
        self.fs, self.root = fsspec.core.url_to_fs(url)

    def _join(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    def _versions(self) -> list[str]:
        """Version folders, oldest first."""
        if not self.fs.isdir(self.root):
            return []
        names = [p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(self.root, detail=False)]
        return sorted(self._join(n) for n in names if n.startswith(_VERSION))

    def new_version(self) -> str:
        if self.fs.exists(self.root) and not self.fs.isdir(self.root):
            raise CheckpointError(f"{self.url} is a file: expected a checkpoint folder or a "
                                  f"new path", file=self.url)
        parent, base = os.path.split(self.root.rstrip("/"))
        if commit._MARK in base and os.path.islink(os.path.join(parent, base.split(
                commit._MARK)[0])):
            raise CheckpointError(f"{self.url} is a version directory that the link "
                                  f"{base.split(commit._MARK)[0]!r} beside it publishes: "
                                  f"expected the link's path, to save over it", file=self.url)
        flat = self.fs.exists(self._join(METADATA))
        if self.fs.isdir(self.root) and self.fs.ls(self.root) and not flat \
                and not self._versions():
            raise CheckpointError(f"{self.url} exists and holds no checkpoint: expected a "
                                  f"checkpoint folder (metadata.json or v-* versions in it), "
                                  f"a checkpoint link, or a new path", file=self.url)
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        name = self._join(f"{_VERSION}{stamp}-{time.time_ns() // 1000 % 1_000_000:06d}-"
                          f"{secrets.token_hex(4)}")
        self.fs.makedirs(name, exist_ok=True)
        return name

    def write(self, version: str, file: str, pieces: Sequence[Piece]) -> tuple[int, list]:
        """The same bytes as ``write_pieces``, streamed through the filesystem's writer."""
        header, data_bytes = header_for(pieces)
        crcs: list[list[int]] = [[] for _ in pieces]
        with self.fs.open(f"{version}/{file}", "wb") as out:
            out.write(header)
            for i in ordered(pieces):
                p = pieces[i]
                for c in p.chunks:
                    raw = p.local[relative(c, p.box)].contiguous().reshape(-1)
                    data = memoryview(raw.view(torch.uint8).numpy())
                    crcs[i].append(zlib.crc32(data))
                    out.write(data)
        return len(header) + data_bytes, crcs

    def commit(self, version: str, metadata_bytes: bytes) -> None:
        self.put(version, METADATA, metadata_bytes)  # the commit marker
        reached("metadata_written")
        reached("published")
        for other in self._versions():
            if other != version:
                self._drop(other)
        if self.fs.exists(self._join(METADATA)):  # the flat checkpoint, marker first
            self.fs.rm_file(self._join(METADATA))
            for path in self.fs.ls(self.root, detail=False):
                if path.rstrip("/").rsplit("/", 1)[-1].endswith(".safetensors"):
                    self.fs.rm_file(path)

    def _drop(self, version: str) -> None:
        try:
            if self.fs.exists(f"{version}/{METADATA}"):
                self.fs.rm_file(f"{version}/{METADATA}")
            self.fs.rm(version, recursive=True)
        except OSError:
            pass  # the new version is committed: a leftover goes with the next save

    def resolve(self) -> str:
        versions = self._versions()
        for version in reversed(versions):
            if self.fs.exists(f"{version}/{METADATA}"):
                return version
        if self.fs.exists(self._join(METADATA)) or (
                not versions and self.fs.isdir(self.root) and self.fs.ls(self.root)):
            return self.root  # flat: a copied checkpoint, or a save's unfinished folder
        raise CheckpointNotFoundError(f"{self.url}: no committed checkpoint there (no "
                                      f"version folder with {METADATA})", file=self.url)

    def reader(self, version: str, sizes: dict[str, int], bytes_read: int) -> Reader:
        return FsReader(version, sizes, bytes_read=bytes_read, fs=self.fs)

    def get(self, version: str, name: str) -> bytes | None:
        try:
            return self.fs.cat_file(f"{version}/{name}")
        except FileNotFoundError:
            return None

    def put(self, version: str, name: str, data: bytes) -> None:
        """Whole: an object store's PUT shows an object whole; a local file is written under
        a temporary name and renamed, so a reader never sees a part."""
        where = f"{version}/{name}"
        protocols = (self.fs.protocol,) if isinstance(self.fs.protocol, str) \
            else self.fs.protocol
        if "file" not in protocols:
            self.fs.pipe_file(where, data)
            return
        with open(where + ".tmp", "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(where + ".tmp", where)

    def remove(self, version: str, name: str) -> None:
        try:
            self.fs.rm_file(f"{version}/{name}")
        except FileNotFoundError:
            pass


class FsReader(Reader):
    """``Reader`` over fsspec: each chunk one byte-range request (``cat_file(start, end)``),
    nothing else of the file read."""

    local = False

    def __init__(self, directory: str, sizes: dict[str, int], *, bytes_read: int = 0,
                 fs: Any) -> None:
        super().__init__(directory, sizes, bytes_read=bytes_read)
        self.fs = fs

    def _open_file(self, where: str) -> Any:
        if not self.fs.exists(where):
            raise FileNotFoundError(where)
        return where

    def _close_file(self, fd: Any) -> None:
        pass

    def _size(self, fd: Any) -> int:
        return int(self.fs.size(fd))

    def _pread(self, fd: Any, n: int, offset: int) -> bytes:
        return self.fs.cat_file(fd, start=offset, end=offset + n)

    def _read_into(self, fd: Any, buf: bytearray, offset: int) -> int:
        data = self.fs.cat_file(fd, start=offset, end=offset + len(buf))
        buf[:len(data)] = data
        return len(data)
