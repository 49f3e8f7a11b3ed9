"""One torch.distributed program, run unchanged on simpg and on real gloo processes.

It uses only ``torch.distributed`` and the default group (no simpg import), on integer data
so that any two correct backends must agree bit for bit. ``program()`` returns a dict of
int64 tensors; ``tests/simpg/test_dropin.py`` runs it with ``simpg.run`` and, as a script,
on ``WORLD_SIZE`` gloo processes:

    python tests/programs/collectives_program.py RANK WORLD_SIZE STORE_PORT OUT_PATH

Each process joins the TCPStore the test hosts on 127.0.0.1:STORE_PORT (so no port has to
be guessed free), runs ``program()`` and writes its dict to OUT_PATH with ``torch.save``.
"""

from __future__ import annotations

import sys
from datetime import timedelta

import torch
import torch.distributed as dist

STORE_TIMEOUT = timedelta(seconds=30)


def _data(rank: int, n: int, salt: int) -> torch.Tensor:
    """Distinct small integers per (rank, salt): a wrong source or order shows in the result."""
    return torch.arange(n, dtype=torch.int64) * 7 + 100 * rank + salt


def program() -> dict[str, torch.Tensor]:
    rank, n = dist.get_rank(), dist.get_world_size()
    out: dict[str, torch.Tensor] = {}

    t = _data(rank, 5, 1)
    dist.all_reduce(t)
    out["all_reduce_sum"] = t
    t = _data(rank, 5, 2) * (-1) ** rank
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    out["all_reduce_max"] = t
    t = _data(rank, 5, 3) % 5 + 1
    dist.all_reduce(t, op=dist.ReduceOp.PRODUCT)
    out["all_reduce_product"] = t

    # Note [gloo has no uneven all_gather]: ProcessGroupGloo::allgather rejects pieces of
    # different sizes ("invalid tensor size at index 1"), so both backends gather equal
    # pieces; the uneven exchange is all_to_all_single below
    parts = [torch.empty(2, 2, dtype=torch.int64) for _ in range(n)]
    dist.all_gather(parts, _data(rank, 4, 4).reshape(2, 2))
    out["all_gather"] = torch.cat(parts)
    flat = torch.empty(3 * n, dtype=torch.int64)
    dist.all_gather_single(flat, _data(rank, 3, 5))
    out["all_gather_single"] = flat

    # uneven (gloo's list form allows it): rank k receives the sum of k + 1 elements
    rs = torch.empty(rank + 1, dtype=torch.int64)
    dist.reduce_scatter(rs, [_data(rank, k + 1, 10 * k + 6) for k in range(n)])
    out["reduce_scatter_uneven"] = rs
    rs = torch.empty(2, dtype=torch.int64)
    dist.reduce_scatter_single(rs, _data(rank, 2 * n, 7))
    out["reduce_scatter_single"] = rs

    # uneven: rank r sends k + r + 1 elements to rank k
    in_splits = [k + rank + 1 for k in range(n)]
    out_splits = [rank + s + 1 for s in range(n)]
    a2a = torch.empty(sum(out_splits), dtype=torch.int64)
    dist.all_to_all_single(a2a, _data(rank, sum(in_splits), 8), out_splits, in_splits)
    out["all_to_all_single_uneven"] = a2a
    outs = [torch.empty(1, dtype=torch.int64) for _ in range(n)]
    dist.all_to_all(outs, [_data(rank, 1, 20 + k) for k in range(n)])
    out["all_to_all"] = torch.cat(outs)

    b = _data(rank, 4, 9)
    dist.broadcast(b, src=n - 1)
    out["broadcast"] = b
    t = _data(rank, 3, 17)
    dist.reduce(t, dst=1, op=dist.ReduceOp.MIN)
    if rank == 1:  # elsewhere the buffer's contents are unspecified
        out["reduce_min"] = t
    gl = [torch.empty(2, dtype=torch.int64) for _ in range(n)] if rank == 0 else None
    dist.gather(_data(rank, 2, 18), gl, dst=0)
    if gl is not None:
        out["gather"] = torch.cat(gl)
    sc = torch.empty(2, dtype=torch.int64)
    dist.scatter(sc, [_data(k, 2, 19) for k in range(n)] if rank == n - 1 else None, src=n - 1)
    out["scatter"] = sc
    dist.barrier()

    # ring: even ranks send first, odd ranks receive first, so blocking p2p cannot deadlock
    nxt, prv = (rank + 1) % n, (rank - 1) % n
    got = torch.empty(3, dtype=torch.int64)
    if rank % 2 == 0:
        dist.send(_data(rank, 3, 11), dst=nxt)
        dist.recv(got, src=prv)
    else:
        dist.recv(got, src=prv)
        dist.send(_data(rank, 3, 11), dst=nxt)
    out["send_recv_ring"] = got
    got = torch.empty(2, dtype=torch.int64)
    works = [dist.isend(_data(rank, 2, 12), dst=prv), dist.irecv(got, src=nxt)]
    for w in works:
        w.wait()
    out["isend_irecv_reverse_ring"] = got

    # every rank creates every group, in the same order (c10d requires it)
    pairs = [dist.new_group([0, n - 1]), dist.new_group(list(range(1, n)))]
    for i, g in enumerate(pairs):
        if rank in dist.get_process_group_ranks(g):
            t = _data(rank, 3, 13 + i)
            dist.all_reduce(t, group=g)
            out[f"subgroup{i}_all_reduce"] = t
            t = _data(rank, 2, 15 + i)
            dist.broadcast(t, src=dist.get_process_group_ranks(g)[-1], group=g)
            out[f"subgroup{i}_broadcast"] = t
    return out


if __name__ == "__main__":
    from tests.support.gloo_runner import run_as_gloo_rank

    run_as_gloo_rank(program, sys.argv[1:], STORE_TIMEOUT, barrier=False)
