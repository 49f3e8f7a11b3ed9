"""Sharded checkpoints: save from any layout, load into any other, never lose a checkpoint.

``save(state, path)`` writes each piece of each DTensor once (its one writer, Note [one
writer]), as checksummed chunks of safetensors files, one per writing rank, plus a JSON
metadata file, and publishes atomically (Note [commit]). ``load(state, path)`` fills a
target state in place in the target's own layout, reading only the chunks each rank needs.
``async_save`` returns once each rank's pieces are in host memory and writes them in the
background (Note [async save]). ``export_safetensors``/``load_safetensors`` write and read
the consolidated files model hubs keep. ``load_torch_dcp`` reads torch.distributed.checkpoint's
format (trusted input only).

>>> import tempfile, torch, simpg, dtensor, dtensor.checkpoint as dcp
>>> d = tempfile.mkdtemp()
>>> def save_on_4():  # rows over 4 ranks, then read back on one process
...     mesh = dtensor.init_device_mesh("cpu", (4,))
...     w = dtensor.distribute_tensor(torch.arange(10.0), mesh, [dtensor.Shard(0)])
...     dcp.save({"w": w}, f"{d}/ck")
>>> _ = simpg.run(save_on_4, 4)
>>> state = {"w": torch.zeros(10)}
>>> _ = dcp.load(state, f"{d}/ck")
>>> state["w"].tolist()
[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]
"""

from dtensor.checkpoint.background import async_save
from dtensor.checkpoint.consolidated import export_safetensors, load_safetensors
from dtensor.checkpoint.errors import (CheckpointError, CheckpointNotFoundError,
                                       ChecksumError, CorruptCheckpointError,
                                       IncompleteCheckpointError, MissingFileError,
                                       MissingKeyError, SaveFailedError, StateMismatchError,
                                       TruncatedFileError, UnsupportedValueError)
from dtensor.checkpoint.hooks import STEPS, step_hook
from dtensor.checkpoint.loading import LoadReport, load
from dtensor.checkpoint.optim import init_optimizer_state
from dtensor.checkpoint.saving import SaveReport, save
from dtensor.checkpoint.torch_dcp import load_torch_dcp

__all__ = [
    "CheckpointError", "CheckpointNotFoundError", "ChecksumError", "CorruptCheckpointError",
    "IncompleteCheckpointError", "LoadReport", "MissingFileError", "MissingKeyError", "STEPS",
    "SaveFailedError", "SaveReport", "StateMismatchError", "TruncatedFileError",
    "UnsupportedValueError", "async_save", "export_safetensors", "init_optimizer_state", "load",
    "load_safetensors", "load_torch_dcp", "save",
    "step_hook",
]
