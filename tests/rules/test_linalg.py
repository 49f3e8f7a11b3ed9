"""Linear-algebra rules: every strategy sound over batch dims (broadcast, uneven, empty
batches, unbatched); end to end on simpg against one device."""

from __future__ import annotations

import pytest
import torch
from tests.support.cases import offered, soundness_test
from tests.support.mesh_world import run_on_mesh as _world

from dtensor import Partial, Replicate, Shard, distribute_tensor, fallback_policy

aten = torch.ops.aten
# the legacy ops warn once that they are deprecated; the warning is torch's, not ours
pytestmark = pytest.mark.filterwarnings(
    r"ignore:torch\.(cholesky|triangular_solve|lu_solve) is deprecated")
_gen = torch.Generator().manual_seed(17)


def _r(*shape: int, dtype=torch.float64) -> torch.Tensor:
    return torch.randn(shape, generator=_gen, dtype=dtype)


def _spd(*batch: int, n: int = 3) -> torch.Tensor:
    """Well-conditioned symmetric positive definite matrices: every op is stable on them."""
    a = _r(*batch, n, n)
    return a @ a.mT + n * torch.eye(n, dtype=torch.float64)


def _tri(*batch: int, n: int = 3) -> torch.Tensor:
    return torch.linalg.cholesky(_spd(*batch, n=n))


A5, A4, A0, A = _spd(5), _spd(4, 2), _spd(0), _spd()
LU5, PIV5 = aten.linalg_lu_factor_ex(A5)[:2]
LU, PIV = aten.linalg_lu_factor_ex(A)[:2]
QR5 = torch.geqrf(_r(5, 4, 3))
_X1, _X2 = _r(3, 5, 2), _r(3, 4, 2)
_CDIST_BWD = (_r(3, 5, 4), _X1, _X2, 2.0, aten._cdist_forward(_X1, _X2, 2.0, None))
CASES = [
    (aten.cholesky.default, (A5,), {}),
    (aten.cholesky.default, (A4, True), {}),
    (aten.linalg_cholesky_ex.default, (A0,), {}),
    (aten.linalg_cholesky_ex.default, (A5,), {"upper": True}),
    (aten.cholesky_inverse.default, (_tri(5),), {}),
    (aten.linalg_inv_ex.default, (A5,), {}),
    (aten.linalg_inv_ex.default, (A,), {}),
    (aten.linalg_matrix_exp.default, (_r(5, 2, 2) / 4,), {}),
    (aten.linalg_qr.default, (_r(5, 4, 3),), {}),
    (aten.linalg_qr.default, (_r(3, 2, 3, 2), "complete"), {}),
    (aten._linalg_eigh.default, (A5,), {}),
    (aten._linalg_eigh.default, (A4, "U", False), {}),
    (aten._linalg_eigvals.default, (A5,), {}),
    (aten._linalg_svd.default, (_r(5, 4, 3),), {}),
    (aten._linalg_svd.default, (_r(3, 3, 2),), {"compute_uv": False}),
    (aten.linalg_lu_factor_ex.default, (A5,), {}),
    (aten.linalg_lu.default, (_r(5, 3, 2),), {}),
    (aten.lu_unpack.default, (LU5, PIV5), {}),
    (aten._linalg_det.default, (A5,), {}),
    (aten._linalg_det.default, (A0,), {}),
    (aten._linalg_slogdet.default, (A4,), {}),
    (aten.linalg_pinv.atol_rtol_tensor, (_r(5, 4, 3),), {}),
    (aten.linalg_pinv.atol_rtol_tensor, (A5,), {"atol": _r(5).abs() / 10, "hermitian": True}),
    (aten.linalg_householder_product.default, QR5, {}),
    (aten.ormqr.default, (*QR5, _r(5, 4, 2)), {}),
    (aten._linalg_solve_ex.default, (A5, _r(5, 3, 2)), {}),
    (aten._linalg_solve_ex.default, (A, _r(5, 3, 2)), {}),  # batch broadcast from B
    (aten._linalg_solve_ex.default, (_spd(4, 1), _r(3, 3, 2)), {}),  # (4, 1) x (3,)
    (aten._linalg_solve_ex.default, (A5, _r(5, 3)), {}),  # B a batch of vectors
    (aten._linalg_solve_ex.default, (A5, _r(5, 2, 3)), {"left": False}),
    (aten.linalg_lu_solve.default, (LU5, PIV5, _r(5, 3, 2)), {}),
    (aten.linalg_lu_solve.default, (LU, PIV, _r(4, 3, 2)), {"adjoint": True}),
    (aten.triangular_solve.default, (_r(5, 3, 2), _tri(5)), {}),
    (aten.triangular_solve.default, (_r(4, 3, 2), _tri(), False), {}),
    (aten.linalg_solve_triangular.default, (_tri(5), _r(5, 3, 2)), {"upper": False}),
    (aten.cholesky_solve.default, (_r(0, 3, 2), _tri(0)), {}),
    (aten.cholesky_solve.default, (_r(5, 3, 2), _tri(5)), {}),
    (aten.vdot.default, (_r(5), _r(5)), {}),
    (aten.linalg_cross.default, (_r(5, 3), _r(5, 3)), {}),
    (aten._cdist_forward.default, (_r(5, 3), _r(4, 3), 2.0, None), {}),
    (aten._cdist_forward.default, (_r(3, 5, 2), _r(3, 4, 2), 1.0, None), {}),
    (aten._cdist_forward.default, (_r(2, 3, 2), _r(1, 5, 2), 3.0, None), {}),
    (aten._cdist_backward.default, _CDIST_BWD, {}),
    (aten.linalg_cross.default, (_r(3, 4, 2), _r(3, 1, 2)), {"dim": 0}),
    (aten.linalg_cross.default, (_r(5, 1, 3), _r(1, 2, 3)), {}),
    (aten.vdot.default, (_r(6, dtype=torch.complex128), _r(6, dtype=torch.complex128)), {}),
]


test_every_strategy_is_sound = soundness_test(CASES, rtol=1e-9, atol=1e-9)


def test_batch_dims_shard_matrix_dims_do_not_and_broadcasts_replicate():
    s = offered(aten.linalg_inv_ex.default, (A4,))
    assert {"Strategy(S(0)->S(0),S(0))", "Strategy(S(1)->S(1),S(1))"} <= s
    assert not any("S(2)" in t or "S(3)" in t for t in s)
    # solve(A (4, 1, n, n), B (3, n, k)): A's size-1 dim broadcasts, so the LU factors
    # (shaped by A alone) are Replicate where B is sharded
    s = offered(aten._linalg_solve_ex.default, (_spd(4, 1), _r(3, 3, 2)))
    assert "Strategy(R,S(0)->S(1),R,R,R)" in s and "Strategy(S(0),R->S(0),S(0),S(0),S(0))" in s
    # linear in the right-hand side only
    assert "Strategy(R,P(sum)->P(sum),R,R,R)" in s
    assert not any(t.startswith("Strategy(P(") for t in s)


def test_batched_solve_end_to_end_without_fallback():
    a, b = _spd(5), _r(5, 3, 2)

    def body(mesh):
        da = distribute_tensor(a, mesh, [Shard(0)]).requires_grad_()
        db = distribute_tensor(b, mesh, [Shard(0)])
        with fallback_policy("error"):
            x = torch.linalg.solve(da, db)
            d = torch.linalg.det(da)
            assert x.placements == (Shard(0),) and d.placements == (Shard(0),)
            (x.sum() + d.sum()).backward()
        dot = torch.vdot(db.flatten(), db.flatten())
        assert dot.placements in ((Partial(),), (Replicate(),))
        return x.full_tensor(), d.full_tensor(), da.grad.full_tensor(), dot.full_tensor()

    x, d, g, dot = _world((3,), body)[0]
    ref = a.clone().requires_grad_()
    rx, rd = torch.linalg.solve(ref, b), torch.linalg.det(ref)
    (rx.sum() + rd.sum()).backward()
    assert torch.allclose(x, rx) and torch.allclose(d, rd) and torch.allclose(g, ref.grad)
    assert torch.allclose(dot, torch.vdot(b.flatten(), b.flatten()))
