"""Indexing rules (dtensor/ops/indexing.py): every strategy sound (harness sweep, including
the indexed writes and the value searches on even, uneven, tiny and empty shapes); sharded
strategies offered; end-to-end runs on simpg."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import dtensor
import simpg
from tests.support.cases import offered, soundness_test
from tests.support.mesh_world import run_on_mesh as _world
from dtensor import (Partial, Replicate, Shard, distribute_tensor, fallback_policy)

aten = torch.ops.aten
g = torch.Generator().manual_seed(0)


def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=g).to(dtype)


def randint(hi: int, *shape: int) -> torch.Tensor:
    return torch.randint(0, max(hi, 1), shape, generator=g)


def perm(n: int, *shape: int) -> torch.Tensor:
    """Distinct indices along the last dim (scatter with duplicates is nondeterministic)."""
    rows = [torch.randperm(n, generator=g)[:shape[-1]] for _ in range(int(torch.tensor(
        shape[:-1]).prod()) if shape[:-1] else 1)]
    return torch.stack(rows).reshape(shape) if rows else torch.empty(shape, dtype=torch.long)


CASES = [
    # index_select: even, uneven, size-1, zero-size, 0-d index
    ("index_select", aten.index_select.default, (randn(5, 4), 1, randint(4, 6)), {}),
    ("index_select-d0", aten.index_select.default, (randn(3, 2), 0, randint(3, 1)), {}),
    ("index_select-empty", aten.index_select.default, (randn(4, 3), 0, randint(4, 0)), {}),
    ("index_select-0d", aten.index_select.default, (randn(4, 3), 1, torch.tensor(2)), {}),
    ("index_select-int", aten.index_select.default,
     (randint(9, 7, 3), -1, randint(3, 5)), {}),
    # gather: equal and unequal extents on the non-gathered dim
    ("gather", aten.gather.default, (randn(5, 4), 1, randint(4, 5, 3)), {}),
    ("gather-short", aten.gather.default, (randn(5, 4), 1, randint(4, 3, 6)), {}),
    ("gather-d0", aten.gather.default, (randn(3, 4, 2), 0, randint(3, 7, 4, 1)), {}),
    ("gather-kw", aten.gather.default, (randn(6, 1), 0, randint(6, 2, 1)),
     {"sparse_grad": False}),
    # scatter family (distinct indices along dim for scatter.src/value)
    ("scatter-src", aten.scatter.src, (randn(5, 6), 1, perm(6, 5, 3), randn(5, 3)), {}),
    ("scatter-src-short", aten.scatter.src, (randn(5, 6), 1, perm(6, 2, 3), randn(4, 4)), {}),
    ("scatter-value", aten.scatter.value, (randn(5, 6), 1, perm(6, 5, 2), 2.5), {}),
    ("scatter-value0", aten.scatter.value, (randn(3, 6), 1, perm(6, 3, 2), 0), {}),
    ("scatter_add", aten.scatter_add.default, (randn(5, 4), 1, randint(4, 5, 7), randn(5, 7)),
     {}),
    ("scatter_add-d0", aten.scatter_add.default,
     (randn(4, 3), 0, randint(4, 9, 3), randn(9, 3)), {}),
    ("scatter_add-short", aten.scatter_add.default,
     (randn(4, 3), 0, randint(4, 5, 2), randn(6, 3)), {}),
    ("scatter_reduce", aten.scatter_reduce.two,
     (randn(5, 4), 1, randint(4, 5, 6), randn(5, 6), "amax"), {"include_self": False}),
    ("index_add", aten.index_add.default, (randn(5, 4), 0, randint(5, 7), randn(7, 4)),
     {"alpha": 2}),
    ("index_add-d1", aten.index_add.default, (randn(3, 5), 1, randint(5, 2), randn(3, 2)), {}),
    # advanced indexing: one index, several (adjacent / separated), None gaps, broadcast
    ("index-1", aten.index.Tensor, (randn(5, 4), [randint(5, 3, 2)]), {}),
    ("index-mid", aten.index.Tensor, (randn(3, 5, 2), [None, randint(5, 7)]), {}),
    ("index-adjacent", aten.index.Tensor,
     (randn(3, 5, 4, 2), [None, randint(5, 3, 1), randint(4, 6)]), {}),
    ("index-separated", aten.index.Tensor,
     (randn(5, 3, 4), [randint(5, 6), None, randint(4, 6)]), {}),
    ("index-bool", aten.index.Tensor, (randn(5, 3), [randn(5) > 0]), {}),
    ("index-empty", aten.index.Tensor, (randn(0, 3), [randint(1, 0)]), {}),
    # index_put: accumulate or not, broadcast values
    ("index_put-acc", aten.index_put.default,
     (randn(5, 4), [randint(5, 7)], randn(7, 4), True), {}),
    ("index_put-acc-bcast", aten.index_put.default,
     (randn(3, 5, 2), [None, randint(5, 6)], randn(6, 1), True), {}),
    ("index_put-set", aten.index_put.default,
     (randn(6, 4), [perm(6, 3)], randn(3, 4)), {}),
    ("index_put-set-kw", aten.index_put.default,
     (randn(3, 6), [None, perm(6, 2)], randn(1)), {"accumulate": False}),
    ("index_put-2idx", aten.index_put.default,
     (randn(4, 5, 3), [randint(4, 6), randint(5, 6)], randn(6, 3), True), {}),
    # masked_fill: Scalar (0 and not), Tensor value, broadcast mask, broadcast self
    ("masked_fill", aten.masked_fill.Scalar, (randn(5, 3), randn(5, 3) > 0, 1.5), {}),
    ("masked_fill0", aten.masked_fill.Scalar, (randn(5, 3), randn(3) > 0, 0.0), {}),
    ("masked_fill-bself", aten.masked_fill.Scalar, (randn(3), randn(4, 3) > 0, 0.0), {}),
    ("masked_fill-T", aten.masked_fill.Tensor, (randn(2, 5), randn(2, 1) > 0, randn(())), {}),
    ("masked_fill-int", aten.masked_fill.Scalar, (randint(9, 5, 3), randn(5, 3) > 0, 7), {}),
    # where is pointwise: verify
    ("where", aten.where.self, (randn(5, 3) > 0, randn(5, 3), randn(1, 3)), {}),
    # embedding and its backward
    ("embedding", aten.embedding.default, (randn(10, 6), randint(10, 5, 3)), {}),
    ("embedding-1d", aten.embedding.default, (randn(7, 3), randint(7, 5)), {}),
    ("embedding-pad", aten.embedding.default, (randn(7, 5), randint(7, 3, 1), 2), {}),
    # ids that name only their own rows on 2 and 4 ranks (what vmap over stacked tables
    # makes): the guarded local lookup is checked here (Note [guarded local functions])
    ("embedding-own-rows", aten.embedding.default,
     (randn(8, 3), torch.tensor([[0, 1], [2, 3], [4, 5], [6, 7]])), {}),
    ("emb_bwd", aten.embedding_dense_backward.default,
     (randn(5, 3, 6), randint(10, 5, 3), 10, -1, False), {}),
    ("emb_bwd-pad", aten.embedding_dense_backward.default,
     (randn(7, 3), randint(4, 7), 4, 1, False), {}),
    ("emb_bwd-freq", aten.embedding_dense_backward.default,
     (randn(5, 3), randint(4, 5), 4, -1, True), {}),
]


# indexed writes along one dim, take, put, searches
def _r(*shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=g)


def _idx(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.long)


SORTED = torch.sort(_r(6)).values
WRITE_AND_SEARCH_CASES = [
    (aten.index_copy.default, (_r(5, 4, 3), 1, _idx(3, 0), _r(5, 2, 3)), {}),
    (aten.index_copy.default, (_r(5, 3), 0, _idx(4, 1, 2), _r(3, 3)), {}),
    (aten.index_copy.default, (_r(), 0, _idx(0), _r()), {}),
    (aten.index_fill.int_Scalar, (_r(5, 4, 3), 1, _idx(0, 2), -1.5), {}),
    (aten.index_fill.int_Scalar, (_r(5, 3), 0, _idx(1, 4), 0.0), {}),
    (aten.index_fill.int_Tensor, (_r(5, 3), 1, _idx(2), _r()), {}),
    (aten.index_fill.int_Scalar, (torch.arange(15).view(5, 3), 1, _idx(0), 7), {}),
    (aten.take.default, (_r(5, 3), _idx(0, 14, 7, 3, 3)), {}),
    (aten.take.default, (_r(4, 2), torch.randint(0, 8, (5, 3), generator=g)), {}),
    (aten.put.default, (_r(5, 3), _idx(0, 14, 7), _r(3)), {}),
    (aten.put.default, (_r(5, 3), _idx(0, 14, 0), _r(3), True), {}),
    (aten.searchsorted.Tensor, (SORTED, _r(5, 3)), {}),
    (aten.searchsorted.Tensor, (SORTED, _r(5, 3)), {"right": True, "out_int32": True}),
    (aten.searchsorted.Tensor, (torch.sort(_r(5, 4)).values, _r(5, 3)), {}),
    (aten.searchsorted.Tensor, (_r(5, 4), _r(5, 2)), {"sorter": torch.argsort(_r(5, 4))}),
    (aten.bucketize.Tensor, (_r(5, 3), SORTED), {}),
    (aten.bucketize.Tensor, (_r(0, 3), SORTED), {"right": True}),
    (aten.isin.Tensor_Tensor, (torch.randint(0, 9, (5, 3), generator=g),
                               torch.randint(0, 9, (7,), generator=g)), {}),
    (aten.isin.Tensor_Tensor, (torch.randint(0, 9, (5, 3), generator=g),
                               torch.randint(0, 9, (2, 3), generator=g)), {"invert": True}),
    (aten.isin.Tensor_Scalar, (torch.randint(0, 4, (5, 3), generator=g), 2), {}),
    (aten.isin.Scalar_Tensor, (2, torch.randint(0, 4, (5, 3), generator=g)), {}),
]
for _red in ("amax", "amin", "mean", "prod"):
    for _self in (True, False):
        WRITE_AND_SEARCH_CASES.append((aten.index_reduce.default,
                                       (_r(5, 4, 3), 1, _idx(3, 0, 3), _r(5, 3, 3), _red),
                                       {"include_self": _self}))
    WRITE_AND_SEARCH_CASES.append((aten.index_reduce.default,
                                   (_r(5, 3), 0, _idx(1, 1, 4), _r(3, 3), _red), {}))
test_every_strategy_is_sound = soundness_test(CASES + WRITE_AND_SEARCH_CASES)


def test_strategies_exist_for_the_common_layouts():
    got = offered(aten.embedding.default, (randn(10, 6), randint(10, 5, 3)))
    assert {"Strategy(S(1),R->S(2))", "Strategy(R,S(0)->S(0))", "Strategy(P(sum),R->P(sum))"} <= got
    assert "Strategy(S(0),R->P(sum))" not in got  # Note [sharded data dim needs a local function]


# -- end to end on simpg --------------------------------------------------------------------


def test_embedding_forward_backward_sharded_ids_and_embedding_dim():
    torch.manual_seed(0)
    weight = torch.randn(11, 6)
    ids = torch.randint(0, 11, (5, 3))
    w_ref = weight.clone().requires_grad_()
    F.embedding(ids, w_ref).pow(2).sum().backward()

    def body(mesh):
        w = distribute_tensor(weight, mesh, [Replicate(), Shard(1)]).requires_grad_()
        i = distribute_tensor(ids, mesh, [Shard(0), Replicate()])
        with simpg.trace() as t:
            out = F.embedding(i, w)
        assert out.placements == (Shard(0), Shard(2)) and not t.records
        assert torch.equal(out.full_tensor(), F.embedding(ids, weight))
        with fallback_policy("silent"):  # new_zeros: another family's rule
            out.pow(2).sum().backward()
        assert torch.allclose(w.grad.full_tensor(), w_ref.grad, atol=1e-6)

    _world((2, 2), body)


@pytest.mark.parametrize("mesh_shape", [(2,), (2, 2)])
def test_rows_and_ids_sharded_alike_fall_back_where_ids_leave_their_rows(mesh_shape):
    # the placements vmap over stacked tables makes, but rank 1 looks up a row rank 0 holds:
    # its guard fails, so every rank takes the unguarded plan and the values equal one device
    def body() -> tuple:
        mesh = dtensor.init_device_mesh("cpu", mesh_shape)
        weight = torch.arange(40.0).reshape(8, 5)
        ids = torch.tensor([[0, 1], [2, 3], [4, 5], [6, 0]])  # 0: not in rank 1's rows 4..7
        placements = [Shard(0)] + [Replicate()] * (len(mesh_shape) - 1)
        out = F.embedding(distribute_tensor(ids, mesh, placements),
                          distribute_tensor(weight, mesh, placements))
        kept = F.embedding(distribute_tensor(ids[:, :1], mesh, placements),
                           distribute_tensor(weight, mesh, placements))
        return (torch.equal(out.full_tensor(), F.embedding(ids, weight)), out.placements[0],
                torch.equal(kept.full_tensor(), F.embedding(ids[:, :1], weight)),
                kept.placements[0])

    for same, placement, same_kept, kept in simpg.run(body, math.prod(mesh_shape)):
        assert same and same_kept
        assert isinstance(placement, Partial)  # the ids gathered: each rank its own rows
        assert kept == Shard(0)  # ids 0, 2 | 4, 6: each rank's own rows, looked up locally


def test_gather_and_index_select_backward():
    torch.manual_seed(1)
    x = torch.randn(5, 7)
    index = torch.randint(0, 7, (5, 3))
    sel = torch.tensor([6, 0, 2, 2])
    x_ref = x.clone().requires_grad_()
    (x_ref.gather(1, index).sum() + x_ref.index_select(1, sel).pow(2).sum()).backward()

    def body(mesh):
        dx = distribute_tensor(x, mesh, [Shard(0)]).requires_grad_()
        di = distribute_tensor(index, mesh, [Shard(0)])
        with simpg.trace() as t:
            a = dx.gather(1, di)
            b = dx.index_select(1, sel)  # a plain index is Replicate
        assert a.placements == (Shard(0),) and b.placements == (Shard(0),) and not t.records
        assert torch.equal(a.full_tensor(), x.gather(1, index))
        assert torch.equal(b.full_tensor(), x.index_select(1, sel))
        with fallback_policy("silent"):  # new_zeros: another family's rule
            (a.sum() + b.pow(2).sum()).backward()
        assert torch.allclose(dx.grad.full_tensor(), x_ref.grad, atol=1e-6)

    _world((3,), body)


def test_advanced_indexing_and_masked_fill_backward():
    torch.manual_seed(2)
    x = torch.randn(6, 5, 4)
    rows = torch.tensor([4, 0, 4, 1])
    x_ref = x.clone().requires_grad_()
    x_ref[:, rows].masked_fill(x_ref[:, rows] > 0, 0.0).sum().backward()

    def body(mesh):
        dx = distribute_tensor(x, mesh, [Shard(0), Shard(2)]).requires_grad_()
        with simpg.trace() as t:
            picked = dx[:, rows]
            out = picked.masked_fill(picked > 0, 0.0)
        assert out.placements == (Shard(0), Shard(2)) and not t.records
        assert torch.equal(out.full_tensor(), x[:, rows].masked_fill(x[:, rows] > 0, 0.0))
        with fallback_policy("silent"):  # new_zeros: another family's rule
            out.sum().backward()
        assert torch.allclose(dx.grad.full_tensor(), x_ref.grad)

    _world((2, 2), body)


def test_partial_survives_selection_without_communication():
    def body(mesh):
        import torch.distributed as dist

        from dtensor import DTensor

        local = torch.arange(12.0).reshape(4, 3) * (dist.get_rank() + 1)
        p = DTensor.from_local(local, mesh, [Partial()])
        with simpg.trace() as t:
            out = p.index_select(0, torch.tensor([3, 1])).masked_fill(torch.tensor(
                [True, False, True]), 0.0)
        assert out.placements == (Partial(),) and not t.records
        full = (torch.arange(12.0).reshape(4, 3) * 3)[[3, 1]]
        full[:, [0, 2]] = 0
        assert torch.equal(out.full_tensor(), full)

    _world((2,), body)


def test_bool_mask_index_on_a_dtensor():
    # the output shape depends on the data (no meta kernel): the call takes the fallback
    x = torch.arange(6.0).reshape(3, 2)
    mask = torch.tensor([True, False, True])

    def body(mesh):
        with dtensor.fallback_policy("silent"):
            out = distribute_tensor(x, mesh, [Shard(0)])[mask]
        assert torch.equal(out.full_tensor(), x[mask])

    _world((2,), body)


def test_vocab_sharded_embedding_gives_partial_sum_without_communication():
    weight = torch.randn(10, 3)  # 10 rows over 4 ranks: 3, 3, 3, 1
    ids = torch.tensor([[0, 9, 4], [3, 3, 7]])

    def body(mesh):
        w = distribute_tensor(weight, mesh, [Shard(0)])
        with simpg.trace() as t:
            out = torch.nn.functional.embedding(ids, w)
        assert out.placements == (Partial("sum"),) and not t.records
        return out.full_tensor()

    for got in _world((4,), body):
        assert torch.equal(got, torch.nn.functional.embedding(ids, weight))


def test_writes_shard_the_other_dims_and_keep_their_partials():
    s = offered(aten.index_copy.default, (_r(4, 4, 2), 1, _idx(0), _r(4, 1, 2)))
    assert {"Strategy(S(0),R,S(0)->S(0))", "Strategy(S(2),R,S(2)->S(2))",
            "Strategy(P(max),R,P(max)->P(max))"} <= s and not any("S(1)" in x for x in s)
    # a fill of 2.0 on every rank would add up to 2n under P(sum)
    s = offered(aten.index_fill.int_Scalar, (_r(4, 2), 1, _idx(0), 2.0))
    assert "Strategy(P(avg),R->P(avg))" in s and "Strategy(P(sum),R->P(sum))" not in s
    s = offered(aten.index_reduce.default, (_r(4, 2), 0, _idx(0), _r(1, 2), "amax"))
    assert "Strategy(P(max),R,P(max)->P(max))" in s and "Strategy(P(sum),R,P(sum)->P(sum))" \
        not in s
    s = offered(aten.isin.Tensor_Tensor, (_idx(1, 2, 3, 4), _idx(2, 5)))
    assert {"Strategy(S(0),R->S(0))", "Strategy(R,S(0)->P(max))"} <= s


def test_indexed_writes_and_searches_end_to_end_without_fallback():
    x, src, values = _r(5, 4, 3), _r(5, 2, 3), _r(7, 2)
    index = _idx(3, 1)

    def body(mesh):
        a = distribute_tensor(x, mesh, [Shard(0), Shard(2)]).requires_grad_()
        s = distribute_tensor(src, mesh, [Shard(0), Shard(2)]).requires_grad_()
        v = distribute_tensor(values, mesh, [Shard(0), Shard(1)])
        with fallback_policy("error"):
            y = a.index_copy(1, index, s).index_fill(1, _idx(0), 0.5)
            assert y.placements == (Shard(0), Shard(2))
            pos = torch.searchsorted(SORTED, v)
            assert pos.placements == (Shard(0), Shard(1))
            rows = distribute_tensor(values, mesh, [Shard(0), Replicate()])
            hit = torch.isin(rows, distribute_tensor(values[:3], mesh, [Replicate(), Shard(0)]))
            assert hit.placements == (Shard(0), Partial("max"))
            (y * y).sum().backward()
        return (y.full_tensor(), pos.full_tensor(), hit.full_tensor(), a.grad.full_tensor(),
                s.grad.full_tensor())

    y, pos, hit, ga, gs = _world((2, 2), body)[0]
    ra, rs = x.clone().requires_grad_(), src.clone().requires_grad_()
    ry = ra.index_copy(1, index, rs).index_fill(1, _idx(0), 0.5)
    (ry * ry).sum().backward()
    assert torch.allclose(y, ry) and torch.equal(pos, torch.searchsorted(SORTED, values))
    assert torch.equal(hit, torch.isin(values, values[:3]))
    assert torch.allclose(ga, ra.grad) and torch.allclose(gs, rs.grad)
