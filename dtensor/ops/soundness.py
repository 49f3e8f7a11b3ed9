"""The soundness harness: does a strategy really produce the placements it claims?

For a claimed candidate, build each rank's local inputs by slicing the full inputs
(``shard_full``; Partial inputs are split into random addends per rank), run the op once per
mesh coordinate in this thread with no process group, and check that the local outputs form
exactly the claimed output placements: each local output has the layout's shape, replicas
agree, and the assembled (for Partial: reduced) tensor equals the op on the full inputs.

>>> import torch
>>> problems = check_op(torch.ops.aten.mm.default, (torch.ones(3, 2), torch.ones(2, 5)), {},
...                     mesh_shape=(2,))   # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch
from torch.utils import _pytree as pytree

from dtensor.layout import check_layout, local_box, local_shape, mesh_coordinates
from dtensor.redistribute.reference import shard_full, unshard
from dtensor.ops.local_args import localize_shape_args, shape_arg_positions
from dtensor.ops.propagate import Candidate, candidates
from dtensor.ops.registry import GUARDS, LOCAL_FUNCTIONS, REGISTRY, OpSpec, Registry, TensorSpec
from dtensor.placements import Placement, PlacementError, Replicate, fmt_placements, has_block


@dataclass(frozen=True)
class Unsound:
    op: str
    candidate: str
    mesh_shape: tuple[int, ...]
    reason: str

    def __str__(self) -> str:
        return f"{self.op} {self.candidate} on mesh {self.mesh_shape}: {self.reason}"


def op_spec(op: Any, args: tuple, kwargs: dict, mesh_shape: Sequence[int]) -> OpSpec:
    """The OpSpec of a call on plain tensors, every tensor taken as Replicate."""
    n = len(mesh_shape)

    def describe(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return TensorSpec(tuple(x.shape), tuple(x.stride()), x.dtype, (Replicate(),) * n)
        if isinstance(x, (list, tuple)):
            return tuple(describe(v) for v in x)
        return x

    return OpSpec(op, describe(args), tuple((k, describe(v)) for k, v in kwargs.items()),
                  tuple(mesh_shape))


def check_candidate(op: Any, args: tuple, kwargs: dict, cand: Candidate,
                    mesh_shape: Sequence[int], *, rtol: float = 1.3e-6, atol: float = 1e-5,
                    seed: int = 0) -> str | None:
    """None if ``cand`` is sound for this call, else the reason it is not."""
    mesh_shape = tuple(mesh_shape)
    flat, tree = pytree.tree_flatten((args, kwargs))
    positions = [i for i, a in enumerate(flat) if isinstance(a, torch.Tensor)]
    locals_in = [shard_full(flat[i].detach(), mesh_shape, p, seed + k)
                 for k, (i, p) in enumerate(zip(positions, cand.inputs))]
    fa, fk = pytree.tree_unflatten([a.clone() if isinstance(a, torch.Tensor) else a
                                    for a in flat], tree)
    expected = _as_declared(op, fa, fk, [t for t in pytree.tree_leaves(op(*fa, **fk))
                                         if isinstance(t, torch.Tensor)])
    if len(expected) != len(cand.outputs):
        return f"the op returns {len(expected)} tensors but the strategy places {len(cand.outputs)}"
    for j, (full_out, placements) in enumerate(zip(expected, cand.outputs)):
        try:  # explicit split sizes must cut the output (Note [split rules] in layout.py)
            check_layout(tuple(full_out.shape), mesh_shape, placements)
        except PlacementError as e:
            return f"output {j} of shape {tuple(full_out.shape)} cannot be laid out: {e}"
    per_rank: dict[tuple[int, ...], list[torch.Tensor]] = {}
    guard = GUARDS.get(cand.local)
    for c in mesh_coordinates(mesh_shape):
        local_flat = list(flat)
        for k, i in enumerate(positions):
            local_flat[i] = locals_in[k][c]
        la, lk = pytree.tree_unflatten(local_flat, tree)
        if expected and shape_arg_positions(op):  # Note [global size arguments]
            local_out = local_shape(tuple(expected[0].shape), mesh_shape, cand.outputs[0], c)
            la, lk = localize_shape_args(op, la, lk, local_out)
        try:
            if cand.local:
                boxes = [None if has_block(p) else local_box(flat[i].shape, mesh_shape, p, c)
                         for i, p in zip(positions, cand.inputs)]
                if guard is not None and not guard(op, la, lk, boxes):
                    return None  # never runs on these pieces (Note [guarded local functions])
                out = LOCAL_FUNCTIONS[cand.local](op, la, lk, boxes)
            else:
                out = op(*la, **lk)
        except Exception as e:  # noqa: BLE001 - a strategy whose local op cannot run is unsound
            return f"the op fails on rank {c}'s pieces: {type(e).__name__}: {e}"
        per_rank[c] = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
    for j, (full_out, placements) in enumerate(zip(expected, cand.outputs)):
        reason = _check_output(j, full_out, placements, per_rank, mesh_shape, rtol, atol)
        if reason:
            return reason
    return None


def _as_declared(op: Any, args: Any, kwargs: Any,
                 outs: list[torch.Tensor]) -> list[torch.Tensor]:
    """The op's outputs with each empty one in the (empty) shape the meta kernel gives, the
    shape the runtime declares (Note [empty pieces take the output's shape] in ops/_common)."""
    if all(t.numel() for t in outs):
        return outs
    try:
        metas = [t for t in pytree.tree_leaves(op(*pytree.tree_map(_to_meta, args),
                                                  **pytree.tree_map(_to_meta, kwargs)))
                 if isinstance(t, torch.Tensor)]
    except Exception:  # noqa: BLE001 - no meta kernel, or one that fails on empty inputs
        return outs
    # only an empty output in another empty shape (batch_norm's eval statistics are (0,)
    # where the meta kernel says (C,): a different matter, left as the kernel gives it)
    return [t.new_empty(m.shape) if not t.numel() and not m.numel() and t.shape != m.shape
            else t for t, m in zip(outs, metas)]


def _to_meta(x: Any) -> Any:
    return x.to("meta") if isinstance(x, torch.Tensor) else x


def _check_output(j: int, full_out: torch.Tensor, placements: tuple[Placement, ...],
                  per_rank: dict, mesh_shape: tuple[int, ...], rtol: float, atol: float
                  ) -> str | None:
    shape = tuple(full_out.shape)
    locals_out = {c: outs[j] for c, outs in per_rank.items()}
    for c, t in locals_out.items():
        want = local_shape(shape, mesh_shape, placements, c)
        if tuple(t.shape) != want:
            return (f"output {j} on rank {c} has shape {tuple(t.shape)}, but "
                    f"{fmt_placements(placements)} of {shape} gives {want}")
    try:
        got = unshard(locals_out, mesh_shape, placements, shape)
    except ValueError as e:
        if any(getattr(p, "reduce_op", None) for p in placements):
            raise
        return f"output {j}: {e}"
    exact = not (full_out.is_floating_point() or full_out.is_complex())
    if exact:
        ok = torch.equal(got, full_out)
    else:
        ok = torch.allclose(got.double() if not got.is_complex() else got,
                            full_out.double() if not full_out.is_complex() else full_out,
                            rtol=rtol, atol=atol, equal_nan=True)
    if not ok:
        return (f"output {j} assembled under {fmt_placements(placements)} differs from the "
                "op's result")
    return None


def check_op(op: Any, args: tuple, kwargs: dict, mesh_shape: Sequence[int],
             registry: Registry = REGISTRY, **tol: Any) -> list[Unsound]:
    """Check every candidate the op's rule can produce for this call on this mesh."""
    spec = op_spec(op, args, kwargs, mesh_shape)
    problems = []
    for cand in candidates(spec, registry, dispatchable_only=False):
        reason = check_candidate(op, args, kwargs, cand, mesh_shape, **tol)
        if reason:
            label = (" ".join(fmt_placements(p) for p in cand.inputs) + " -> "
                     + " ".join(fmt_placements(p) for p in cand.outputs))
            problems.append(Unsound(str(op), label, tuple(mesh_shape), reason))
    return problems
