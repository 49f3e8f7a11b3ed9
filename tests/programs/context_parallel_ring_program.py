"""Ring attention on real gloo processes (tests/parallel/test_context_parallel_ring.py runs
it on 2): each rank attends its part of a causal sequence by passing keys and values around
the ring and returns its output and gradients next to one device's:

    python tests/programs/context_parallel_ring_program.py RANK WORLD_SIZE STORE_PORT OUT_PATH
"""

from __future__ import annotations

import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F

import dtensor
from dtensor.experimental import _ring, context_parallel, set_rotate_method
from dtensor.parallel.context import shard_sequence

TIMEOUT = timedelta(seconds=60)


def program() -> dict[str, object]:
    cp, rank = dist.get_world_size(), dist.get_rank()
    g = torch.Generator().manual_seed(0)  # the same whole inputs on every rank
    q, k, v, grad_out = (torch.randn(2, 4, 16, 8, generator=g, dtype=torch.float64)
                         for _ in range(4))
    whole = [t.clone().requires_grad_() for t in (q, k, v)]
    want = F.scaled_dot_product_attention(*whole, is_causal=True)
    want.backward(grad_out)

    ops: list[str] = []
    exchange = _ring.Ring.exchange

    def counted(self, sends, recvs):  # what crosses between the processes, by kind
        ops.extend(["send"] * len(sends))
        return exchange(self, sends, recvs)

    _ring.Ring.exchange = counted
    set_rotate_method("alltoall")
    mesh = dtensor.init_device_mesh("cpu", (cp,), mesh_dim_names=("cp",))
    mine = [shard_sequence(t, 2, cp, rank).requires_grad_() for t in (q, k, v)]
    with context_parallel(mesh, buffers=[torch.zeros(16)], buffer_seq_dims=[0]):
        out = F.scaled_dot_product_attention(*mine, is_causal=True)
        out.backward(shard_sequence(grad_out, 2, cp, rank))
    result: dict[str, object] = {"method": "alltoall", "ops": sorted(set(ops)),
                                 "sends": len(ops)}
    for name, got, w in zip(("output", "dq", "dk", "dv"), (out.detach(), *(t.grad for t in mine)),
                            (want.detach(), *(t.grad for t in whole))):
        result[name], result[f"want {name}"] = got, shard_sequence(w, 2, cp, rank)
    return result


if __name__ == "__main__":
    from tests.support.gloo_runner import run_as_gloo_rank

    run_as_gloo_rank(program, sys.argv[1:], TIMEOUT)
