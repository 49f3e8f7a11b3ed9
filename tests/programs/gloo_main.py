"""What every test program does as one gloo rank (tests/support/gloo_runner.py starts them): join the
test's TCPStore, run the program, ``torch.save`` its result."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist


def run_as_gloo_rank(program: Callable[[], Any], argv: list[str], timeout: timedelta,
                     barrier: bool = True) -> None:
    """``argv``: RANK WORLD_SIZE STORE_PORT OUT_PATH, as gloo_runner passes them."""
    rank, world_size, port, out_path = int(argv[0]), int(argv[1]), int(argv[2]), argv[3]
    store = dist.TCPStore("127.0.0.1", port, world_size, is_master=False, timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world_size,
                            timeout=timeout)
    try:
        torch.save(program(), out_path)
        if barrier:
            dist.barrier()  # nobody tears down gloo while a peer still connects
    finally:
        dist.destroy_process_group()
