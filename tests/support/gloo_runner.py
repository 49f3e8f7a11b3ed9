"""Running a test program as real gloo processes on 127.0.0.1 (shared by the gloo tests).

A program is a script taking ``RANK WORLD_SIZE STORE_PORT OUT_PATH``: the test starts it
with ``run_program_on_gloo``, and each process ends in ``run_as_gloo_rank``, which joins the
TCPStore the test hosts, runs the program and ``torch.save``s its result to OUT_PATH. The
processes see the repository root on their path (``tests``, ``examples`` importable).
``load_program`` imports the same file to run its ``program`` on simpg. ``torchrun_module``
starts a module under torchrun (the main job) instead.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
import importlib.util
import time
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import pytest
import torch
import torch.distributed as dist

from tests.support.paths import ROOT


def _loopback_env() -> dict[str, str]:
    # gloo binds to the interface its hostname resolves to unless told: keep it on loopback
    return dict(os.environ, OMP_NUM_THREADS="1",
                GLOO_SOCKET_IFNAME="lo0" if sys.platform == "darwin" else "lo")


def load_program(path: Path) -> ModuleType:
    """The test program at ``path`` as a module (its ``program`` runs on simpg too)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def torchrun_module(module: str, args: list[str], nproc: int,
                    timeout_s: float = 300) -> subprocess.CompletedProcess:
    """``python -m torch.distributed.run --standalone --nproc-per-node N -m module args`` from
    the repository root on loopback gloo; fails the test with the output if it fails."""
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
         str(nproc), "-m", module, *args],
        cwd=ROOT, env=_loopback_env() | {"PYTHONPATH": str(ROOT)}, capture_output=True,
        text=True, timeout=timeout_s)
    if proc.returncode != 0:
        pytest.fail(f"torchrun -m {module} exited with {proc.returncode}\n"
                    f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return proc


def run_program_on_gloo(program: Path, world_size: int, tmp_path: Path,
                        timeout_s: float) -> list[Any]:
    """Run ``program`` as `world_size` gloo processes on 127.0.0.1; return each rank's dict.

    The test hosts the TCPStore (port 0: the OS picks a free one, nothing to race for) and
    waits for all processes against one deadline; on timeout it kills them all and fails with
    their output."""
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=timeout_s))
    env = _loopback_env() | {"PYTHONPATH": str(ROOT)}
    procs, logs = [], []
    for rank in range(world_size):
        log = (tmp_path / f"rank{rank}.log").open("w")  # a file: a full pipe cannot block it
        logs.append(log)
        procs.append(subprocess.Popen(
            [sys.executable, str(program), str(rank), str(world_size), str(store.port),
             str(tmp_path / f"rank{rank}.pt")],
            env=env, stdout=log, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + timeout_s
    try:
        for p in procs:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass
    finally:
        hung = [r for r, p in enumerate(procs) if p.poll() is None]
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for log in logs:
            log.close()
        del store

    def output() -> str:
        return "\n".join(f"--- rank {r} ---\n{(tmp_path / f'rank{r}.log').read_text()[-3000:]}"
                         for r in range(world_size))

    if hung:
        pytest.fail(f"gloo ranks {hung} still running after {timeout_s:g}s, killed\n"
                    f"{output()}")
    failed = {r: p.returncode for r, p in enumerate(procs) if p.returncode != 0}
    if failed:
        pytest.fail(f"gloo ranks exited with codes {failed}\n{output()}")
    return [torch.load(tmp_path / f"rank{r}.pt") for r in range(world_size)]


def run_as_gloo_rank(program: Callable[[], Any], argv: list[str], timeout: timedelta,
                     barrier: bool = True) -> None:
    """The end of every program's ``__main__``: join the test's TCPStore as one gloo rank, run
    ``program``, ``torch.save`` its result. ``argv``: RANK WORLD_SIZE STORE_PORT OUT_PATH, as
    ``run_program_on_gloo`` passes them."""
    rank, world_size, port, out_path = int(argv[0]), int(argv[1]), int(argv[2]), argv[3]
    store = dist.TCPStore("127.0.0.1", port, world_size, is_master=False, timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size,
                            timeout=timeout)
    try:
        torch.save(program(), out_path)
        print(f"rank {rank}: result saved", file=sys.stderr, flush=True)
        if barrier:
            dist.barrier()  # nobody tears down gloo while a peer still connects
    finally:
        gc.collect()  # free the program's tensors and works while gloo's threads are alive
        dist.destroy_process_group()
    # what a normal exit does first: join non-daemon threads (a background save) and shut
    # executors down (joining their idle workers by hand would wait forever)
    threading._shutdown()
    print(f"rank {rank}: process group destroyed", file=sys.stderr, flush=True)
    sys.stdout.flush()
    # The result is saved and the group is down. Skip interpreter finalization: a gloo thread
    # that frees a Python-owned tensor while the interpreter is torn down aborts the process
    # ("terminate called without an active exception", pytorch/pytorch#179291). That crash
    # once failed CI after every rank had finished; it is torch's, not the program's.
    os._exit(0)


def assert_bit_for_bit(on_simpg: list[dict[str, torch.Tensor]],
                       on_gloo: list[dict[str, torch.Tensor]]) -> None:
    """A program's per-rank results on simpg and on gloo: the same ranks and keys, and every
    tensor equal bit for bit."""
    for rank, (sim, real) in enumerate(zip(on_simpg, on_gloo, strict=True)):
        assert sim.keys() == real.keys(), f"rank {rank}"
        for key in sim:
            assert torch.equal(sim[key], real[key]), f"rank {rank} {key}"
