"""Where a checkpoint lives on disk, and its atomic publication.

Note [commit]
``path`` is a symbolic link to a version directory beside it, ``<path>.v-<time>-<id>``,
which holds one safetensors file per writing rank and ``metadata.json``. A save:

1. rank 0 makes a new version directory (the staging name: nothing points at it);
2. every rank writes its file there and makes it durable (``fdatasync``);
3. every rank sends rank 0 its manifest, or its error (``gather_object``: after it, every
   rank's file is durable);
4. rank 0 checks them, writes ``metadata.json`` (temporary name, fsync, rename), fsyncs the
   directory, then makes a new link beside ``path`` and renames it onto ``path``:
   ``rename(2)`` swaps the link atomically, so ``path`` names the old complete version or the
   new complete one, never a mix and never nothing;
5. rank 0 removes the other version directories of ``path`` (the previous one, leftovers of
   interrupted saves) and broadcasts the outcome: a failure on any rank reaches every rank
   there, so all raise ``SaveFailedError`` instead of waiting on each other.

A save interrupted anywhere before the rename leaves ``path`` on the previous version,
untouched. A version directory without ``metadata.json`` never loads
(``IncompleteCheckpointError``); one interrupted between steps 4's metadata and its rename
is complete and consistent but unpublished, and the next save removes it. Loading resolves
the link once, so a save that replaces ``path`` during a load does not mix versions into it.
Two jobs saving to one path at once are not supported.
"""

from __future__ import annotations

import os
import secrets
import shutil
import time

from dtensor.checkpoint.errors import CheckpointError, CheckpointNotFoundError
from dtensor.checkpoint.storage import fsync_dir

_MARK = ".v-"


def new_version_dir(path: str) -> str:
    """Step 1: a fresh, empty version directory beside ``path``."""
    path = os.path.abspath(path)
    empty_dir = os.path.isdir(path) and not os.listdir(path)
    if os.path.lexists(path) and not os.path.islink(path) and not empty_dir:
        raise CheckpointError(f"{path} exists and is not a checkpoint link: expected a path "
                              f"that a previous save published, or a new path", file=path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    name = f"{path}{_MARK}{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(4)}"
    os.mkdir(name)
    return name


def publish(path: str, version: str) -> None:
    """Step 4's rename: point ``path`` at ``version`` atomically."""
    path = os.path.abspath(path)
    parent = os.path.dirname(path)
    tmp = f"{version}.link"
    os.symlink(os.path.basename(version), tmp)  # relative: the pair can move together
    if os.path.isdir(path) and not os.path.islink(path):
        os.rmdir(path)  # an empty directory (new_version_dir allowed only that): no checkpoint
    os.replace(tmp, path)
    fsync_dir(parent)


def remove_others(path: str, keep: str) -> None:
    """Step 5: remove ``path``'s version directories other than ``keep``."""
    path = os.path.abspath(path)
    parent, base = os.path.split(path)
    for name in os.listdir(parent):
        full = os.path.join(parent, name)
        if name.startswith(base + _MARK) and full != keep:
            if name.endswith(".link"):
                os.unlink(full)
            else:
                # the new version is published already: a leftover that will not go is
                # removed by the next save, not worth failing this one
                shutil.rmtree(full, ignore_errors=True)


def resolve(path: str) -> str:
    """The version directory ``path`` names now (resolved once per load)."""
    if not os.path.lexists(path):
        raise CheckpointNotFoundError(f"{path}: no checkpoint there (nothing was published at "
                                      f"this path)", file=str(path))
    real = os.path.realpath(path)
    if not os.path.isdir(real):
        raise CheckpointNotFoundError(f"{path}: points at {real}, which is not a checkpoint "
                                      f"directory", file=str(path))
    return real
