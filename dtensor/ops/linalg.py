"""Linear algebra over batch dims: factorizations, inverses, solves, decompositions,
determinants, matrix exponential, pseudo-inverse; and ``vdot``, ``linalg_cross``, ``cdist``.

Note [batched matrices]
These ops treat the last one or two dims of each argument as one matrix (or a vector of
pivots, of eigenvalues, a scalar determinant) and every leading dim as a batch of independent
problems (Note [independent dims] in _common). The matrix dims must be whole on every rank:
an inverse, a factorization or a solve mixes every element of its matrix. A batch dim may be
sharded: each rank solves its own problems, and each output is its piece of the batch, uneven
and empty pieces included. Batch dims broadcast like pointwise ops (``solve(A (n, n),
B (b, n, k))``): a broadcast argument (batch size 1, or the dim missing) is Replicate, and an
output that lacks the dim (the LU factors of an unbatched A) is the same on every rank, so
Replicate too. Output shapes come from the op's meta kernel, so the rule reads the broadcast
exactly as torch does; an op without one gets Replicate only.

Solves are linear in the right-hand side with the matrix fixed, A^-1 (B1 + B2) = A^-1 B1 +
A^-1 B2: P(sum)/P(avg) B with A Replicate gives that Partial solution (Note [linear in one
argument]); the factors returned next to it do not read B and stay Replicate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from dtensor.ops._common import LINEAR, R, broadcast_shards, dim_of, partials_of
from dtensor.ops.matmul import einsum_strategies
from dtensor.ops.registry import OpSpec, Strategy, TensorSpec, sharding_rule
from dtensor.placements import Partial, Placement, Shard

aten = torch.ops.aten


@dataclass(frozen=True, slots=True)
class Batched:
    """One row of ``_TABLE``: trailing core dims of each tensor input (extra inputs: 0, like
    pinv's optional tolerances) and of each output; the right-hand side, if linear in one."""

    cores_in: tuple[int, ...]
    cores_out: tuple[int, ...]
    linear_in: int | None = None
    linear_out: tuple[bool, ...] = (True,)


_TABLE: dict[object, Batched] = {
    aten.cholesky.default: Batched((2,), (2,)),
    aten.linalg_cholesky_ex.default: Batched((2,), (2, 0)),  # (L, info)
    aten.cholesky_inverse.default: Batched((2,), (2,)),
    aten.linalg_inv_ex.default: Batched((2,), (2, 0)),  # (inverse, info)
    aten.linalg_matrix_exp.default: Batched((2,), (2,)),
    aten.linalg_qr.default: Batched((2,), (2, 2)),
    aten._linalg_eigh.default: Batched((2,), (1, 2)),  # (eigenvalues, eigenvectors)
    aten.linalg_eig.default: Batched((2,), (1, 2)),
    aten._linalg_eigvals.default: Batched((2,), (1,)),
    aten._linalg_svd.default: Batched((2,), (2, 1, 2)),  # (U, S, Vh)
    aten.linalg_lu_factor_ex.default: Batched((2,), (2, 1, 0)),  # (LU, pivots, info)
    aten.linalg_lu.default: Batched((2,), (2, 2, 2)),  # (P, L, U)
    aten.lu_unpack.default: Batched((2, 1), (2, 2, 2)),
    aten.linalg_ldl_factor_ex.default: Batched((2,), (2, 1, 0)),
    aten._linalg_det.default: Batched((2,), (0, 2, 1)),  # (det, LU, pivots)
    aten._linalg_slogdet.default: Batched((2,), (0, 0, 2, 1)),  # (sign, logabsdet, LU, piv)
    aten.linalg_pinv.atol_rtol_tensor: Batched((2,), (2,)),  # atol/rtol: per batch entry
    aten.linalg_householder_product.default: Batched((2, 1), (2,)),  # (A, tau)
    # solves: linear in the right-hand side
    aten._linalg_solve_ex.default: Batched((2, 2), (2, 2, 1, 0), 1, (True, False, False, False)),
    aten.linalg_lu_solve.default: Batched((2, 1, 2), (2,), 2),  # (LU, pivots, B)
    aten.linalg_ldl_solve.default: Batched((2, 1, 2), (2,), 2),  # (LD, pivots, B)
    aten.triangular_solve.default: Batched((2, 2), (2, 2), 0, (True, False)),  # (B, A)
    aten.linalg_solve_triangular.default: Batched((2, 2), (2,), 1),  # (A, B)
    aten.cholesky_solve.default: Batched((2, 2), (2,), 0),  # (B, L)
    aten.ormqr.default: Batched((2, 1, 2), (2,), 2),  # Q(A, tau) @ C: linear in C
}


def _meta(x: Any) -> Any:
    if isinstance(x, TensorSpec):
        return torch.empty(x.shape, dtype=x.dtype, device="meta")
    if isinstance(x, tuple) and any(isinstance(v, TensorSpec) for v in x):
        return [_meta(v) for v in x]
    return x


def output_shapes(op: OpSpec) -> list[tuple[int, ...]] | None:
    """The outputs' global shapes from the op's meta kernel; None if it has none."""
    try:
        out = op.op(*(_meta(a) for a in op.args), **{k: _meta(v) for k, v in op.kwargs})
    except (NotImplementedError, RuntimeError):
        return None
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [tuple(t.shape) for t in outs]


def _solve_cores(op: OpSpec, row: Batched) -> Batched:
    """linalg.solve takes B as a vector when B is (n,) or A's batch + (n,) (left=True)."""
    a, b = op.tensors()
    vector = op.arg(2, "left", True) and (b.ndim == 1 or (b.ndim == a.ndim - 1
                                                         and b.shape == a.shape[:-1]))
    if not vector:
        return row
    return Batched((2, 1), (1,) + row.cores_out[1:], row.linear_in, row.linear_out)


def batch_strategies(op: OpSpec, row: Batched) -> list[Strategy]:
    """Note [batched matrices]: Replicate, one strategy per batch dim, the linear Partials."""
    tensors = op.tensors()
    cores = row.cores_in + (0,) * (len(tensors) - len(row.cores_in))
    n_out = len(row.cores_out)
    found = [Strategy((R,) * len(tensors), (R,) * n_out)]
    shapes = output_shapes(op)
    if shapes is None:
        return found
    batch = [t.shape[:max(t.ndim - c, 0)] for t, c in zip(tensors, cores)]
    full = tuple(torch.broadcast_shapes(*batch))
    for b, size in enumerate(full):
        ins = tuple(_aligned(s, full, b) for s in batch)
        if all(p == R for p in ins):
            continue
        outs = tuple(_aligned(shape[:max(len(shape) - c, 0)] if len(shape) >= c else (),
                              full, b) for shape, c in zip(shapes, row.cores_out))
        found.append(Strategy(ins, outs))
    if row.linear_in is not None and row.linear_in < len(tensors):
        for p in partials_of(tensors[row.linear_in], LINEAR):
            ins = tuple(p if i == row.linear_in else R for i in range(len(tensors)))
            found.append(Strategy(ins, tuple(p if f else R for f in row.linear_out)))
    return found


def _aligned(batch: tuple[int, ...], full: tuple[int, ...], b: int) -> Placement:
    """Shard of the dim of ``batch`` that lines up with batch dim ``b`` of ``full`` (batch
    dims align to the right), or Replicate where it broadcasts or is missing."""
    d = b - (len(full) - len(batch))
    return Shard(d) if d >= 0 and batch[d] == full[b] else R


@sharding_rule(*_TABLE)
def batched_linalg(op: OpSpec) -> list[Strategy]:
    row = _TABLE[op.op]
    if op.op is aten._linalg_solve_ex.default:
        row = _solve_cores(op, row)
    return batch_strategies(op, row)


@sharding_rule(aten.vdot.default)
def vdot(op: OpSpec) -> list[Strategy]:
    """``vdot(x, y) = sum(conj(x) * y)``: a dot product, "k,k->". Both sharded alike -> each
    rank's partial sum, P(sum); one operand P(sum)/P(avg), the other Replicate -> the same
    Partial (conj is additive: conj(x1 + x2) = conj(x1) + conj(x2)). No P(avg) of complex
    operands: the runtime refuses it."""
    tensors = op.tensors()
    found = einsum_strategies("k,k->", tensors)
    if not tensors[0].dtype.is_complex:
        return found
    return [s for s in found if Partial("avg") not in s.inputs + s.outputs]


@sharding_rule(aten._linalg_check_errors.default)
def check_errors(op: OpSpec) -> list[Strategy]:
    """``_linalg_check_errors(info, api_name, is_matrix)`` raises if an ``info`` entry is
    nonzero and returns nothing: each rank checks its own piece of a batch (a failing problem
    raises on the rank that holds it, which ends the world). Not a Partial: a sum of infos
    is no info."""
    info = op.tensors()[0]
    return [Strategy((R,), ())] + [Strategy((Shard(d),), ()) for d in range(info.ndim)]


@sharding_rule(aten.linalg_cross.default)
def cross(op: OpSpec) -> list[Strategy]:
    """``linalg_cross(a, b, dim)``: the 3-vectors along ``dim`` (broadcast shapes) cross one
    another, each on its own: every other dim shards like an elementwise op; ``dim`` is
    whole. Bilinear: one operand P(sum)/P(avg), the other Replicate -> that Partial,
    (a1 + a2) x b = a1 x b + a2 x b."""
    a, b = op.tensors()
    ndim = max(a.ndim, b.ndim)
    d = dim_of(op.arg(2, "dim", -1), ndim)
    found = [s for s in broadcast_shards(op) if s.outputs[0] != Shard(d)]
    for i, t in enumerate((a, b)):
        if t.shape == tuple(torch.broadcast_shapes(a.shape, b.shape)):
            for p in partials_of(t, LINEAR):
                found.append(Strategy((p, R) if i == 0 else (R, p), (p,)))
    return found


@sharding_rule(aten._cdist_forward.default)
def cdist(op: OpSpec) -> list[Strategy]:
    """``_cdist_forward(x1 (*, P, M), x2 (*, R, M), p, mode) -> (*, P, R)``: distance (p, r)
    reads row p of x1 and row r of x2 only, whole along M (a p-norm of the difference is not
    a sum of per-piece norms: M Replicate). So like a matmul without a contraction: a batch
    dim sharded on both, the rows of x1 (x2 Replicate) -> output rows, the rows of x2 ->
    output columns. Batch dims that broadcast are left Replicate. Not linear: no Partial."""
    x1, x2 = op.tensors()
    n = x1.ndim
    found = [Strategy((R, R), (R,))]
    if x1.shape[:-2] == x2.shape[:-2]:
        found += [Strategy((Shard(d), Shard(d)), (Shard(d),)) for d in range(n - 2)]
    return found + [Strategy((Shard(n - 2), R), (Shard(n - 2),)),
                    Strategy((R, Shard(n - 2)), (Shard(n - 1),))]


@sharding_rule(aten._cdist_backward.default)
def cdist_backward(op: OpSpec) -> list[Strategy]:
    """``(grad (*, P, R), x1, x2, p, cdist) -> grad_x1 (*, P, M)``: row p of grad_x1 is a sum
    over r of terms of (grad, x1, x2, cdist) at (p, r). Batch dims and the rows P shard (x2
    Replicate for P); the columns R shard into per-rank addends -> P(sum); linear in grad
    (the other inputs fixed) -> P(sum)/P(avg) grad gives that Partial."""
    grad, x1, x2, dist = op.tensors()
    n = x1.ndim
    found = [Strategy((R,) * 4, (R,))]
    if x1.shape[:-2] == x2.shape[:-2] == grad.shape[:-2]:
        found += [Strategy((Shard(d),) * 4, (Shard(d),)) for d in range(n - 2)]
    rows, cols = Shard(n - 2), Shard(n - 1)
    found += [Strategy((rows, rows, R, rows), (rows,)),
              Strategy((cols, R, rows, cols), (Partial("sum"),))]
    for p in partials_of(grad, LINEAR):
        found.append(Strategy((p, R, R, R), (p,)))
    return found
