"""Reduction rules: every strategy sound on even, uneven, tiny and empty shapes; end to end."""

from __future__ import annotations

import math

import torch

import simpg
from tests.support.cases import offered, soundness_test
from tests.support.mesh_world import run_on_mesh as _world
from dtensor import DTensor, Partial, Replicate, Shard, distribute_tensor

aten = torch.ops.aten
INF = math.inf


def _ints(*shape: int) -> torch.Tensor:
    """Small integer-valued floats: sums are exact, and ties exercise max/min."""
    return torch.randint(-4, 5, shape, generator=torch.Generator().manual_seed(7)).float()


# (op, args, kwargs): shapes even (4, 6), uneven over 3/4 ranks (5, 3), tiny (1, 2, 3) with a
# dim smaller than the mesh, and zero-size where the op has an identity
X, U, T, E = _ints(4, 6), _ints(5, 3), _ints(1, 2, 3), _ints(0, 3)
B = X > 0
CASES = [
    (aten.sum.default, (U,), {}),
    (aten.sum.default, (B,), {"dtype": torch.int64}),
    (aten.sum.dim_IntList, (X, [1]), {}),
    (aten.sum.dim_IntList, (U, [0]), {"keepdim": True}),
    (aten.sum.dim_IntList, (T, [0, -1]), {}),
    (aten.sum.dim_IntList, (T, []), {}),
    (aten.sum.dim_IntList, (E, [0]), {}),
    (aten.sum.dim_IntList, (U, [1]), {"dtype": torch.float64}),
    (aten.sum.dim_IntList, (U.long(), [0]), {}),
    (aten.nansum.default, (U, [0]), {}),
    (aten.mean.default, (X,), {}),
    (aten.mean.default, (U,), {}),
    (aten.mean.dim, (X, [0]), {}),
    (aten.mean.dim, (U, [0], True), {}),
    (aten.mean.dim, (T, [1, 2]), {"dtype": torch.float64}),
    (aten.mean.dim, (_ints(8, 3), [0]), {}),
    (aten.prod.default, (U,), {}),
    (aten.prod.dim_int, (U, 0), {}),
    (aten.prod.dim_int, (T, -1, True), {}),
    (aten.prod.dim_int, (E, 0), {}),  # an empty piece's prod is 1, the identity
    (aten.prod.dim_int, (U.long(), 1), {}),
    (aten.prod.default, (U.to(torch.int8),), {}),  # prod in int64: no P(product) through
    (aten.prod.dim_int, (U, 0), {"dtype": torch.float64}),
    (aten.amax.default, (X, [1]), {}),
    (aten.amax.default, (U, [0]), {"keepdim": True}),
    (aten.amax.default, (T,), {}),
    (aten.amax.default, (U.long(), [0, 1]), {}),
    (aten.amin.default, (U, [0]), {}),
    (aten.amin.default, (_ints(7, 2), [0]), {}),
    (aten.max.default, (X,), {}),
    (aten.max.default, (U,), {}),
    (aten.min.default, (_ints(9),), {}),
    (aten.max.dim, (U, 1), {}),
    (aten.max.dim, (U, 0, True), {}),
    (aten.min.dim, (T, 1), {}),
    (aten.argmax.default, (U,), {}),
    (aten.argmax.default, (U, 1), {}),
    (aten.argmin.default, (T, 0, True), {}),
    (aten.var.correction, (U,), {}),
    (aten.var.correction, (U, [1]), {"correction": 0}),
    (aten.std.correction, (X, [0]), {"keepdim": True}),
    (aten.std.correction, (T, [1, 2]), {"correction": 2}),
    (aten.var_mean.correction, (U, [0]), {}),
    (aten.std_mean.correction, (X, [1]), {"keepdim": True}),
    (aten.linalg_vector_norm.default, (U,), {}),
    (aten.linalg_vector_norm.default, (U, 2, [0]), {}),
    (aten.linalg_vector_norm.default, (U, 1, [0]), {}),
    (aten.linalg_vector_norm.default, (U, 0, [0, 1]), {"keepdim": True}),
    (aten.linalg_vector_norm.default, (U, INF, [0]), {}),
    (aten.linalg_vector_norm.default, (X, -INF, [1]), {}),
    (aten.linalg_vector_norm.default, (E, 1, [0]), {"dtype": torch.float64}),
    (aten.any.default, (U > 0,), {}),
    (aten.any.dim, (U > 2, 0), {}),
    (aten.any.dims, (T > 0, [0, 2]), {"keepdim": True}),
    (aten.all.default, (B,), {}),
    (aten.all.dim, (U > -3, 0, True), {}),
    (aten.all.dims, (E > 0, [0]), {}),
    (aten.logsumexp.default, (U, [1]), {}),
    (aten.logsumexp.default, (T, [0, 2], True), {}),
]


test_every_strategy_is_sound = soundness_test(CASES)


def test_partials_claimed_where_sound_and_only_there():
    # sum over a sharded dim is P(sum); Partial(sum) passes through sum
    assert {"Strategy(S(1)->P(sum))", "Strategy(P(sum)->P(sum))", "Strategy(S(0)->S(0))"} <= \
        offered(aten.sum.dim_IntList, (X, [1]), {}, (2,))
    # mean: P(avg) only when the pieces are equal (6 = 3 + 3 but 5 = 2 + 2 + 1)
    assert "Strategy(S(1)->P(avg))" in offered(aten.mean.dim, (X, [1]), {}, (3,))
    assert "Strategy(S(0)->P(avg))" not in offered(aten.mean.dim, (U, [0]), {}, (3,))
    # nested: 4 splits evenly over 2 but not over 2 x 4 (2 -> 1, 1, 0, 0)
    s = offered(aten.mean.dim, (X, [0]), {}, (2, 4), mesh_dim=1)
    assert "Strategy(S(0)->P(avg))" not in s
    # amax: P(max) unless a piece is empty (5 over 4: 2, 2, 1, 0)
    assert "Strategy(S(0)->P(max))" in offered(aten.amax.default, (U, [0]), {}, (3,))
    assert "Strategy(S(0)->P(max))" not in offered(aten.amax.default, (U, [0]), {}, (4,))
    # prod over a sharded dim is P(product), and P(product) passes through when prod keeps
    # the dtype (int8 is multiplied in int64, where the pieces' int8 product would wrap)
    assert {"Strategy(S(0)->P(product))", "Strategy(P(product)->P(product))"} <= \
        offered(aten.prod.dim_int, (U, 0), {}, (4,))
    assert "Strategy(P(product)->P(product))" not in offered(
        aten.prod.default, (U.to(torch.int8),), {}, (2,))
    # indices are local: no Shard of the reduced dim at all
    assert not any("S(1)->" in x for x in offered(aten.max.dim, (U, 1), {}, (2,)))




def test_sum_and_amax_end_to_end_leave_partials_and_communicate_nothing():
    x = _ints(6, 5)

    def body(mesh):
        a = distribute_tensor(x, mesh, [Shard(0), Shard(1)])
        with simpg.trace() as t:
            s = a.sum(0)
            m = a.amax(dim=(0, 1))
            k = a.sum(1, keepdim=True)
        assert not t.records
        assert s.placements == (Partial("sum"), Shard(0))
        assert m.placements == (Partial("max"), Partial("max"))
        assert k.placements == (Shard(0), Partial("sum"))
        return s.full_tensor(), m.full_tensor(), k.full_tensor()

    s, m, k = _world((2, 2), body)[0]
    assert torch.equal(s, x.sum(0)) and torch.equal(m, x.amax()) and torch.equal(k, x.sum(1, True))


def test_mean_over_uneven_shards_gathers_and_is_right():
    x = _ints(5, 4)

    def body(mesh):
        a = distribute_tensor(x, mesh, [Shard(0)])
        with simpg.trace() as t:
            m = a.mean(0)  # 5 rows over 2 ranks: 3 + 2, local means do not average
        # rows must be moved first (gathered, or columns swapped in by all_to_all)
        assert t.records and m.placements in ((Replicate(),), (Shard(0),))
        even = distribute_tensor(x, mesh, [Shard(1)]).mean(1)
        assert even.placements == (Partial("avg"),)
        return m.full_tensor(), even.full_tensor()

    m, even = _world((2,), body)[0]
    assert torch.allclose(m, x.mean(0)) and torch.allclose(even, x.mean(1))


def test_partial_sum_stays_partial_through_sum():
    def body(mesh):
        p = DTensor.from_local(torch.full((3, 4), float(mesh.get_rank() + 1)), mesh, [Partial()])
        with simpg.trace() as t:
            s = p.sum(1)
        assert not t.records and s.placements == (Partial(),)
        return s.full_tensor()

    assert torch.equal(_world((2,), body)[0], torch.full((3,), 12.0))


def test_backward_of_reductions_matches_single_device():
    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(1))

    def body(mesh):
        a = distribute_tensor(x, mesh, [Shard(0), Shard(1)]).requires_grad_()
        loss = a.sum(0).sum() + (a * a).mean() + a.amax(1).sum()
        loss.backward()
        return loss.full_tensor(), a.grad.full_tensor()

    loss, grad = _world((2, 2), body)[0]
    ref = x.clone().requires_grad_()
    ref_loss = ref.sum(0).sum() + (ref * ref).mean() + ref.amax(1).sum()
    ref_loss.backward()
    assert torch.allclose(loss, ref_loss) and torch.allclose(grad, ref.grad)


def test_any_all_over_shards_are_bool_partials_and_reduce_right():
    x = torch.tensor([[True, False], [False, False], [False, True]])

    def body(mesh):
        a = distribute_tensor(x, mesh, [Shard(0)])  # 3 rows over 2 ranks: 2 + 1
        y, z = a.any(0), a.all(0)
        assert y.placements == (Partial("max"),) and z.placements == (Partial("min"),)
        return y.full_tensor(), z.full_tensor()

    y, z = _world((2,), body)[0]
    assert torch.equal(y, x.any(0)) and torch.equal(z, x.all(0))
