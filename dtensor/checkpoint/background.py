"""``async_save``: a save that returns once each rank's pieces are copied to host memory and
finishes in the background while training goes on.

Note [async save]
A save has collectives (the version directory's broadcast, the Partial reductions, the
manifests' gather, the verdict's broadcast: Note [commit]) and I/O. Collectives from a
background thread would run on the training job's process group at the same time as the
next step's collectives, in an order that differs between ranks: a mismatch on a real
backend, an error on simpg (whose ranks are its own threads; a thread they start is no rank
at all). So every collective of ``async_save`` runs before it returns, on the caller's
thread, and the background thread does I/O only:

1. synchronously, as ``save`` does: rank 0 makes the version directory and broadcasts it,
   Partial tensors are reduced (Note [saving Partial]); then each rank plans its file and
   copies the pieces it writes (Note [one writer]) to host memory: the *staging* copy, which
   is all the background thread reads, so an update of the parameters right after
   ``async_save`` returns never reaches the bytes being written;
2. synchronously: the manifests, which need no bytes written (boxes, chunk shapes and file
   sizes are known from the plan; only the crc32s are not), are gathered on rank 0, which
   checks that they tile every tensor, and broadcasts its verdict: a bad state raises on
   every rank here (rank 0 also writes the failure as ``outcome.json``, see 5). Each rank
   starts its background thread *before* it enters that broadcast: once any rank is out of
   it, every rank's thread runs, so a rank may block on its future at once. (On simpg,
   where one rank runs at a time and a rank blocked outside a collective keeps the baton,
   a future waited on before the other ranks have reached their next collective would
   wait for threads not yet started.) A thread that finds ``outcome.json`` there already
   writes nothing;
3. in the background, each rank writes its file from the staging copy and makes it durable,
   then puts its crc32s (or its error) beside it as ``rankNNNNN.crc32.json`` (written whole
   under a temporary name, then renamed);
4. in the background on rank 0: it waits for every writing rank's crc32 file (the barrier of
   this protocol, through the storage instead of a process group), then commits exactly as
   ``save`` does (metadata last, then the atomic publish) and writes ``outcome.json`` into
   the version directory: published, or the failures;
5. in the background on the other ranks: they wait for ``outcome.json``; each rank's future
   then holds the same outcome, a ``SaveReport`` or ``SaveFailedError``.

Atomicity and checksums are those of ``save``: the same files, metadata and publish. The
waits of steps 4 and 5 end after ``timeout`` seconds (a rank that died mid-write never puts
its crc32 file): the save then fails and the previous checkpoint stays. One save is in flight
per rank: every save first waits for the previous one, and raises its failure if it failed
(``pending.settle_previous``), so a failure nobody asked the future about still surfaces.
The background thread is not a daemon: a job that ends with a save in flight finishes it.
"""

from __future__ import annotations

import contextvars
import dataclasses
import json
import os
import threading
import time
from concurrent.futures import Future
from typing import Any

import torch

from dtensor.checkpoint import metadata
from dtensor.checkpoint.hooks import reached
from dtensor.checkpoint.pending import settle_previous, track
from dtensor.checkpoint.pieces import CHUNK_BYTES
from dtensor.checkpoint.stores import FolderStore, LinkStore
from dtensor.checkpoint.saving import (Begun, Planned, SaveReport, _attempt, _failures, begin,
                                       commit_version, fill_crcs, plan_rank, raise_failure,
                                       write_planned)

OUTCOME = "outcome.json"
Store = LinkStore | FolderStore
TIMEOUT = 1800.0  # seconds the background waits for the other ranks, as c10d's default


def async_save(state: dict, path: str | os.PathLike, *, process_group: Any = None,
               chunk_bytes: int = CHUNK_BYTES, timeout: float = TIMEOUT) -> Future:
    """Start saving ``state`` to ``path`` as ``save`` does, and return once this rank's
    pieces are copied to host memory: a ``concurrent.futures.Future`` whose ``result()`` is
    this rank's ``SaveReport``, or raises ``SaveFailedError`` (Note [async save]). Called by
    every rank of ``process_group``; the state may change as soon as it returns.

    >>> import tempfile, torch, dtensor.checkpoint as dcp
    >>> d, w = tempfile.mkdtemp(), torch.zeros(3)
    >>> future = dcp.async_save({"w": w}, f"{d}/ck")
    >>> _ = w.add_(1)  # the next step: not in the checkpoint
    >>> _ = future.result()
    >>> state = {"w": torch.ones(3)}
    >>> _ = dcp.load(state, f"{d}/ck")
    >>> state["w"].tolist()
    [0.0, 0.0, 0.0]
    """
    if not timeout > 0:
        raise ValueError(f"timeout={timeout!r}: expected seconds > 0")
    start = time.perf_counter()
    settle_previous()
    begun = begin(state, path, process_group)
    comm = begun.comm
    staged = _attempt(lambda: _stage(plan_rank(begun, chunk_bytes)))
    gathered = comm.gather((staged[0], staged[1].manifest) if staged[0] == "ok" else staged)
    reached("gathered")
    verdict = None
    manifests: list[dict] = []
    if gathered is not None:
        failed = _failures(gathered)
        if failed:
            verdict = ("planning the files", failed)
        else:
            manifests = [m for _, m in gathered]
            status, message = _attempt(lambda: metadata.merge(manifests, comm.size))
            verdict = None if status == "ok" else ("checking the plan", [(0, message)])
    if verdict is not None:  # rank 0: tell the threads of the others, started below
        _attempt(lambda: _put_outcome(begun.store, begun.version, verdict))
    # every thread starts before the verdict's broadcast: that way no rank can block on its
    # future (which waits for the other ranks' threads) before every thread has started,
    # even on simpg, where a rank that blocks outside a collective keeps the others waiting
    future: Future = Future()
    future.set_running_or_notify_cancel()
    thread = None
    if staged[0] == "ok" and not (comm.rank == 0 and verdict is not None):
        job = _Job(begun, staged[1], manifests, start, time.monotonic() + timeout, future)
        thread = threading.Thread(target=contextvars.copy_context().run, args=(job.run,),
                                  name=f"dtensor-checkpoint-save-rank{comm.rank}")
        thread.start()
    verdict = comm.broadcast(verdict)
    if verdict is not None:
        if thread is not None:
            thread.join()  # it finds the outcome rank 0 wrote and stops
        raise_failure(*verdict)
    track(future)
    return future


def _stage(planned: Planned) -> Planned:
    """Step 1's staging copy: each piece's local tensor copied to (pinned, for a GPU) host
    memory, contiguous, so the background reads nothing the training step can change."""
    pieces = []
    for p in planned.pieces:
        pinned = p.local.is_cuda and torch.cuda.is_available()
        host = torch.empty(p.local.shape, dtype=p.local.dtype, pin_memory=pinned)
        with torch.no_grad():
            host.copy_(p.local)
        pieces.append(dataclasses.replace(p, local=host))
    return dataclasses.replace(planned, pieces=pieces)


@dataclasses.dataclass
class _Job:
    """One rank's background part of an asynchronous save (steps 3 to 5)."""

    begun: Begun
    planned: Planned
    manifests: list[dict]  # rank 0: every rank's, crc32s still None; elsewhere empty
    start: float
    deadline: float  # time.monotonic()
    future: Future

    def run(self) -> None:
        try:
            self.future.set_result(self._finish())
        except BaseException as e:  # noqa: BLE001 - handed to whoever waits on the future
            self.future.set_exception(e)

    def _finish(self) -> SaveReport:
        rank, version = self.begun.comm.rank, self.begun.version
        store = self.begun.store
        if store.get(version, OUTCOME) is not None:
            return _verdict(_wait_json(store, version, OUTCOME, self.deadline))  # failed
        mine = _attempt(lambda: write_planned(self.planned))
        reached("file_written")
        if rank != 0 and (mine[0] != "ok" or self.planned.manifest["file"] is not None):
            _put_json(store, version, _crc_file(rank), {"crc32": _crcs(mine[1])} if mine[0] == "ok"
                      else {"error": mine[1]})
        verdict = self._commit(mine) if rank == 0 else self._outcome()
        if verdict is not None:
            raise_failure(*verdict)
        reached("done")
        return SaveReport(self.begun.path, version, self.planned.manifest["bytes"],
                          time.perf_counter() - self.start)

    def _commit(self, mine: tuple[str, Any]) -> tuple[str, list] | None:
        """Rank 0: wait for every writer's crc32s, commit, tell the others (step 4)."""
        version, failed = self.begun.version, []
        if mine[0] != "ok":
            failed.append((0, mine[1]))
        else:  # the gathered copy of rank 0's own manifest, which holds the values
            fill_crcs(self.manifests[0], _crcs(mine[1]))
        for rank, m in enumerate(self.manifests[1:], start=1):
            if m["file"] is None:
                continue
            got = _wait_json(self.begun.store, version, _crc_file(rank), self.deadline)
            if got is None:
                failed.append((rank, "no crc32s within the timeout: the rank died or stalled "
                                     "while writing"))
            elif "error" in got:
                failed.append((rank, got["error"]))
            else:
                fill_crcs(m, got["crc32"])
        verdict: tuple[str, list] | None = ("writing the files", failed) if failed else None
        if verdict is None:
            status, message = _attempt(lambda: self._publish())
            verdict = None if status == "ok" else ("committing", [(0, message)])
        _put_outcome(self.begun.store, version, verdict)
        return verdict

    def _publish(self) -> None:
        for rank in range(1, len(self.manifests)):
            self.begun.store.remove(self.begun.version, _crc_file(rank))
        commit_version(self.begun.store, self.begun.version, self.manifests,
                       self.begun.comm.size)

    def _outcome(self) -> tuple[str, list] | None:
        """Ranks but 0: rank 0's verdict (step 5)."""
        got = _wait_json(self.begun.store, self.begun.version, OUTCOME, self.deadline)
        return _verdict(got)


def _put_outcome(store: Store, version: str, verdict: tuple[str, list] | None) -> None:
    _put_json(store, version, OUTCOME, {"published": verdict is None,
                                 "failed_at": verdict and verdict[0],
                                 "failures": verdict and verdict[1]})


def _verdict(outcome: dict | None) -> tuple[str, list] | None:
    """The verdict rank 0 wrote in ``outcome.json`` (None: published), read by the others."""
    if outcome is None:
        return ("waiting for rank 0 to commit", [(0, "no outcome within the timeout")])
    if outcome["published"]:
        return None
    return outcome["failed_at"], [tuple(f) for f in outcome["failures"]]


def _crc_file(rank: int) -> str:
    return f"rank{rank:05d}.crc32.json"


def _crcs(manifest: dict) -> list[list[int]]:
    return [p["crc32"] for e in manifest["tensors"].values() for p in e["pieces"]]


def _put_json(store: Store, version: str, name: str, obj: Any) -> None:
    """Write ``obj`` whole and durably: a reader polling for ``name`` never sees a part."""
    store.put(version, name, json.dumps(obj).encode())


def _wait_json(store: Store, version: str, name: str, deadline: float) -> Any:
    """The JSON in ``name`` once it appears, or None at ``deadline``."""
    pause = 0.0005
    while True:
        raw = store.get(version, name)
        if raw is not None:
            return json.loads(raw)
        if time.monotonic() >= deadline:
            return None
        time.sleep(pause)
        pause = min(2 * pause, 0.05)
