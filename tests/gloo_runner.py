"""Running a test program as real gloo processes on 127.0.0.1 (shared by the gloo tests).

A program is a script taking ``RANK WORLD_SIZE STORE_PORT OUT_PATH``: it joins the TCPStore
the test hosts, runs, and ``torch.save``s its result to OUT_PATH.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist


def run_program_on_gloo(program: Path, world_size: int, tmp_path: Path,
                        timeout_s: float) -> list[Any]:
    """Run ``program`` as `world_size` gloo processes on 127.0.0.1; return each rank's dict.

    The test hosts the TCPStore (port 0: the OS picks a free one, nothing to race for) and
    waits for all processes against one deadline; on timeout it kills them all and fails with
    their output."""
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=timedelta(seconds=timeout_s))
    # gloo binds to the interface its hostname resolves to unless told: keep it on loopback
    env = dict(os.environ, OMP_NUM_THREADS="1",
               GLOO_SOCKET_IFNAME="lo0" if sys.platform == "darwin" else "lo")
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
