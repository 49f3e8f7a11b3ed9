"""simpg.run and torch.distributed on simulated ranks: collectives, groups, async, p2p."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.distributed as dist

import simpg

DTYPES = [torch.bool, torch.int8, torch.int32, torch.int64, torch.bfloat16, torch.float16,
          torch.float32, torch.float64, torch.complex64]


def _value(rank: int, dtype: torch.dtype, shape=(3,)) -> torch.Tensor:
    base = torch.arange(1, 1 + torch.Size(shape).numel()).reshape(shape) + rank
    if dtype == torch.bool:
        return (base % 2 == 0)
    return base.to(dtype)


def test_run_returns_results_in_rank_order():
    out = simpg.run(lambda: (dist.get_rank(), dist.get_world_size()), 3)
    assert out == [(0, 3), (1, 3), (2, 3)]


def test_run_passes_args_and_kwargs():
    assert simpg.run(lambda a, b=0: a + b + dist.get_rank(), 2, 10, b=5) == [15, 16]


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True])
def test_world_size_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match="world_size must be an int >= 1"):
        simpg.run(lambda: None, bad)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_all_reduce_sum_every_dtype(dtype):
    def body():
        t = _value(dist.get_rank(), dtype)
        dist.all_reduce(t)
        return t

    out = simpg.run(body, 4)
    expected = _value(0, dtype)
    for r in range(1, 4):
        expected = torch.logical_or(expected, _value(r, dtype)) if dtype == torch.bool \
            else expected + _value(r, dtype)
    for t in out:
        assert torch.equal(t, expected)


@pytest.mark.parametrize("op,fn", [
    (dist.ReduceOp.MAX, lambda xs: torch.stack(xs).amax(0)),
    (dist.ReduceOp.MIN, lambda xs: torch.stack(xs).amin(0)),
    (dist.ReduceOp.PRODUCT, lambda xs: torch.stack(xs).prod(0)),
    (dist.ReduceOp.BAND, lambda xs: xs[0] & xs[1] & xs[2]),
    (dist.ReduceOp.BOR, lambda xs: xs[0] | xs[1] | xs[2]),
    (dist.ReduceOp.BXOR, lambda xs: xs[0] ^ xs[1] ^ xs[2]),
], ids=["max", "min", "product", "band", "bor", "bxor"])
def test_all_reduce_ops_on_integers(op, fn):
    def body():
        t = _value(dist.get_rank(), torch.int64) * 7 % 5
        dist.all_reduce(t, op=op)
        return t

    inputs = [_value(r, torch.int64) * 7 % 5 for r in range(3)]
    for t in simpg.run(body, 3):
        assert torch.equal(t, fn(inputs))


def test_all_reduce_avg_on_floats():
    def body():
        t = torch.full((2,), float(dist.get_rank()))
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        return t

    assert all(torch.equal(t, torch.full((2,), 1.5)) for t in simpg.run(body, 4))


def test_unsupported_reduce_op_names_op_and_dtype():
    def body():
        dist.all_reduce(torch.ones(2), op=dist.ReduceOp.BAND)

    with pytest.raises(ValueError, match="'band' does not support dtype torch.float32"):
        simpg.run(body, 2)


def test_all_gather_list_uneven_and_into_tensor():
    def body():
        r = dist.get_rank()
        mine = torch.full((r + 1, 2), r, dtype=torch.bfloat16)
        outs = [torch.empty(k + 1, 2, dtype=torch.bfloat16) for k in range(3)]
        dist.all_gather(outs, mine)
        flat = torch.empty(6, dtype=torch.int32)
        dist.all_gather_single(flat, torch.tensor([r, 10 * r], dtype=torch.int32))
        return outs, flat

    for outs, flat in simpg.run(body, 3):
        for k, o in enumerate(outs):
            assert torch.equal(o, torch.full((k + 1, 2), k, dtype=torch.bfloat16))
        assert flat.tolist() == [0, 0, 1, 10, 2, 20]


def test_reduce_scatter_list_and_tensor():
    def body():
        r = dist.get_rank()
        out = torch.empty(2, dtype=torch.complex64)
        dist.reduce_scatter(out, [torch.full((2,), complex(r, k)) for k in range(3)])
        out2 = torch.empty(2)
        dist.reduce_scatter_single(out2, torch.arange(6.0) * (r + 1))
        return out, out2

    for r, (out, out2) in enumerate(simpg.run(body, 3)):
        assert torch.equal(out, torch.full((2,), complex(3, 3 * r), dtype=torch.complex64))
        assert torch.equal(out2, torch.arange(6.0)[2 * r:2 * r + 2] * 6)


def test_all_to_all_single_uneven_and_list():
    def body():
        r = dist.get_rank()
        # rank r sends k+1 rows to rank k; receives r+1 rows from everyone
        inp = torch.cat([torch.full((k + 1,), 10 * r + k) for k in range(3)])
        out = torch.empty(3 * (r + 1), dtype=inp.dtype)
        dist.all_to_all_single(out, inp, [r + 1] * 3, [1, 2, 3])
        outs = [torch.empty(1, dtype=torch.int64) for _ in range(3)]
        dist.all_to_all(outs, [torch.tensor([100 * r + k]) for k in range(3)])
        return out, outs

    for r, (out, outs) in enumerate(simpg.run(body, 3)):
        assert out.tolist() == [v for s in range(3) for v in [10 * s + r] * (r + 1)]
        assert [o.item() for o in outs] == [100 * s + r for s in range(3)]


def test_broadcast_reduce_gather_scatter():
    def body():
        r = dist.get_rank()
        b = torch.full((2,), r)
        dist.broadcast(b, src=2)
        red = torch.full((2,), r + 1)
        dist.reduce(red, dst=1, op=dist.ReduceOp.PRODUCT)
        gl = [torch.empty(1, dtype=torch.int64) for _ in range(4)] if r == 3 else None
        dist.gather(torch.tensor([r * r]), gl, dst=3)
        sc = torch.empty(1, dtype=torch.int64)
        dist.scatter(sc, [torch.tensor([7 * k]) for k in range(4)] if r == 0 else None, src=0)
        return b, red, gl, sc

    out = simpg.run(body, 4)
    assert all(b.tolist() == [2, 2] for b, *_ in out)
    assert out[1][1].tolist() == [24, 24]
    assert [t.item() for t in out[3][2]] == [0, 1, 4, 9]
    assert [o[3].item() for o in out] == [0, 7, 14, 21]


def test_subgroups_rows_and_columns_of_a_2x2_mesh():
    def body():
        r = dist.get_rank()
        rows = [dist.new_group([0, 1]), dist.new_group([2, 3])]
        cols = [dist.new_group([0, 2]), dist.new_group([1, 3])]
        row, col = rows[r // 2], cols[r % 2]
        a = torch.tensor([r])
        dist.all_reduce(a, group=row)
        b = torch.tensor([r])
        dist.all_reduce(b, group=col)
        return a.item(), b.item(), dist.get_rank(row), dist.get_world_size(col)

    assert simpg.run(body, 4) == [(1, 2, 0, 2), (1, 4, 1, 2), (5, 2, 0, 2), (5, 4, 1, 2)]


def test_async_op_completes_on_wait():
    def body():
        t = torch.tensor([dist.get_rank() + 1.0])
        work = dist.all_reduce(t, async_op=True)
        work.wait()
        return t.item(), work.is_completed()

    assert simpg.run(body, 3) == [(6.0, True)] * 3


def test_send_recv_with_tags_and_any_source():
    def body():
        r = dist.get_rank()
        if r == 0:
            dist.send(torch.tensor([1.0]), dst=1, tag=7)
            dist.send(torch.tensor([2.0]), dst=1, tag=3)
            return None
        if r == 1:
            a, b = torch.empty(1), torch.empty(1)
            dist.recv(b, src=0, tag=3)  # tags match out of order
            dist.recv(a, src=0, tag=7)
            c = torch.empty(1)
            src = dist.recv(c, tag=5)  # any source
            return a.item(), b.item(), c.item(), src
        dist.send(torch.tensor([9.0]), dst=1, tag=5)
        return None

    assert simpg.run(body, 3)[1] == (1.0, 2.0, 9.0, 2)


def test_barrier_and_object_collectives():
    def body():
        dist.barrier()
        objs = [None] * 3
        dist.all_gather_object(objs, {"rank": dist.get_rank()})
        return objs

    assert simpg.run(body, 3)[2] == [{"rank": 0}, {"rank": 1}, {"rank": 2}]


def test_reinit_after_destroy_inside_a_rank():
    def body():
        dist.destroy_process_group()
        assert not dist.is_initialized()
        return True

    assert simpg.run(body, 2) == [True, True]


def test_bad_arguments_get_clear_errors():
    def wrong_list_length():
        dist.all_gather([torch.empty(1)], torch.ones(1))

    with pytest.raises(ValueError, match=r"output_tensor_list: got 1 tensors, expected 2"):
        simpg.run(wrong_list_length, 2)

    def meta_tensor():
        dist.all_reduce(torch.empty(2, device="meta"))

    with pytest.raises(ValueError, match="simpg moves real data"):
        simpg.run(meta_tensor, 2)

    def bad_root():
        dist.broadcast(torch.ones(1), src=5)

    with pytest.raises(ValueError):
        simpg.run(bad_root, 2)


def test_threads_you_start_yourself_with_init_process_group():
    store = dist.HashStore()
    results = [None] * 3

    def worker(rank):
        dist.init_process_group("simpg", rank=rank, world_size=3, store=store)
        t = torch.tensor([rank])
        dist.all_reduce(t)
        results[rank] = t.item()
        dist.destroy_process_group()

    threads = [threading.Thread(target=worker, args=(r,)) for r in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert results == [3, 3, 3]
    assert not dist.is_initialized()  # the main thread's torch.distributed is untouched


def test_rank_out_of_range_in_init_process_group():
    errors = []

    def worker():
        try:
            dist.init_process_group("simpg", rank=3, world_size=2, store=dist.HashStore())
        except ValueError as e:
            errors.append(str(e))

    t = threading.Thread(target=worker)
    t.start()
    t.join(timeout=30)
    assert errors == ["rank must be in [0, 1] for a world of 2 ranks, got 3"]


@pytest.mark.world(4)
def test_world_marker_runs_the_body_on_every_rank():
    t = torch.ones(2)
    dist.all_reduce(t)
    assert t.tolist() == [4.0, 4.0]
