"""Errors of ``dtensor.checkpoint``. Each names the checkpoint file and the tensor (state key)
involved, as fields (``file``, ``key``) and in the message, and says what was expected.

>>> e = ChecksumError("bytes differ", file="/ck/rank00000.safetensors", key="w")
>>> isinstance(e, CorruptCheckpointError), e.file, e.key
(True, '/ck/rank00000.safetensors', 'w')
"""

from __future__ import annotations


class CheckpointError(Exception):
    """Base of every checkpoint error; ``file`` and ``key`` are None where none applies."""

    def __init__(self, message: str, *, file: str | None = None,
                 key: str | None = None) -> None:
        super().__init__(message)
        self.file, self.key = file, key


class CheckpointNotFoundError(CheckpointError):
    """Nothing at the path: no checkpoint was ever published there."""


class IncompleteCheckpointError(CheckpointError):
    """A directory a save began but never finished (no metadata.json): never loadable."""


class CorruptCheckpointError(CheckpointError):
    """The bytes on disk are not what the save wrote: bad metadata, bad header, wrong size."""


class ChecksumError(CorruptCheckpointError):
    """A piece whose bytes do not match the checksum recorded when it was written."""


class TruncatedFileError(CorruptCheckpointError):
    """A file shorter than its header or the metadata says."""


class MissingFileError(CorruptCheckpointError):
    """A file the metadata lists is not in the checkpoint directory."""


class StateMismatchError(CheckpointError):
    """The target state does not fit the checkpoint: shape, dtype or structure differ."""


class MissingKeyError(CheckpointError):
    """The target state asks for a key the checkpoint does not hold."""


class UnsupportedValueError(CheckpointError):
    """A value save cannot store without pickle (only tensors and JSON-like values)."""


class SaveFailedError(CheckpointError):
    """A save that did not publish: some rank failed; the previous checkpoint is intact."""


__all__ = [
    "CheckpointError", "CheckpointNotFoundError", "ChecksumError", "CorruptCheckpointError",
    "IncompleteCheckpointError", "MissingFileError", "MissingKeyError", "SaveFailedError",
    "StateMismatchError", "TruncatedFileError", "UnsupportedValueError",
]
