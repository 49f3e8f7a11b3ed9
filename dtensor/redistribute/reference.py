"""Reference executor: runs a plan over every rank's local tensor with plain tensor math.

No process groups, no threads: ``locals`` maps each mesh coordinate to its local tensor, and
each step is a short function in ``STEP_FUNCTIONS`` that reads the pieces of each group and
writes the new ones. The executor over real process groups mirrors it step by step; the
tests use it to prove plans right.

>>> import torch
>>> from dtensor.placements import Shard, Replicate
>>> from dtensor.redistribute.planner import plan
>>> full = torch.arange(5.0)
>>> steps = plan([Shard(0)], [Replicate()], (4,), (5,))
>>> out = redistribute_locals(shard_full(full, (4,), [Shard(0)]), steps, (4,), (5,))
>>> out[(3,)].tolist()
[0.0, 1.0, 2.0, 3.0, 4.0]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import torch

from dtensor.layout import (Coord, box_contains, box_intersect, box_numel, box_shape, local_box,
                            local_shape, local_slices, mesh_coordinates, mesh_groups, pieces)
from dtensor.placements import Partial, Placement, Replicate, Shard, fmt_placements, has_block
from dtensor.redistribute.planner import Step

Locals = dict[Coord, torch.Tensor]


class StepError(ValueError):
    """A step that cannot run on these placements and shapes."""


def redistribute_locals(locals_by_coordinate: Mapping[Coord, torch.Tensor],
                        steps: Sequence[Step], mesh_shape: Sequence[int],
                        global_shape: Sequence[int]) -> Locals:
    """Apply ``steps`` to all ranks' local tensors; returns the new local tensors.

    >>> from dtensor.redistribute.planner import plan
    >>> locals_ = {(0,): torch.tensor([0, 1]), (1,): torch.tensor([2])}
    >>> steps = plan([Shard(0)], [Replicate()], (2,), (3,))
    >>> redistribute_locals(locals_, steps, (2,), (3,))
    {(0,): tensor([0, 1, 2]), (1,): tensor([0, 1, 2])}
    """
    mesh_shape, global_shape = tuple(mesh_shape), tuple(global_shape)
    cur = dict(locals_by_coordinate)
    for i, step in enumerate(steps):
        shape = step.shape(global_shape)  # a refined view's (Note [block shards] in layout)
        if step.view is not None:
            cur = {c: t.reshape(local_shape(shape, mesh_shape, step.src, c))
                   for c, t in cur.items()}
        _check_locals(cur, step, mesh_shape, shape, i)
        cur = STEP_FUNCTIONS[step.kind](cur, step, mesh_shape, shape)
        if step.view is not None:
            cur = {c: t.reshape(_merged(t.shape, step.view)) for c, t in cur.items()}
    return cur


def _merged(shape: Sequence[int], groups: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    out, i = [], 0
    for g in groups:
        out.append(math.prod(shape[i:i + len(g)]))
        i += len(g)
    return tuple(out)


def local_index(global_shape: Sequence[int], mesh_shape: Sequence[int],
                placements: Sequence[Placement], coordinate: Sequence[int]) -> tuple:
    """An index of the global tensor that reads (and writes) the piece at ``coordinate``:
    slices for a box, index tensors for the strided pieces of block shards.

    >>> torch.arange(8)[local_index((8,), (2,), [Shard(0, block=4)], (1,))].tolist()
    [2, 3, 6, 7]
    """
    if not has_block(placements):
        return local_slices(global_shape, mesh_shape, placements, coordinate)
    dims = pieces(global_shape, mesh_shape, placements, coordinate)
    n = len(dims)
    return tuple(torch.cat([torch.arange(a, b) for a, b in iv] or [torch.arange(0)]).reshape(
        [-1 if j == d else 1 for j in range(n)]) for d, iv in enumerate(dims))


# ---------------------------------------------------------------------------------------------
# One function per step kind. Each gets all ranks' locals and returns the new ones.


def _all_gather(cur: Locals, step: Step, mesh: tuple[int, ...], shape: tuple[int, ...]) -> Locals:
    kinds = {step.src[m] for m in step.mesh_dims}
    (p,) = kinds if len(kinds) == 1 else (None,)
    if not isinstance(p, Shard) or any(not isinstance(step.dst[m], Replicate)
                                       for m in step.mesh_dims):
        raise StepError(f"{step}: all_gather needs one S(d) -> R on every mesh dim of the group")
    out: Locals = {}
    for group in mesh_groups(mesh, step.mesh_dims):
        target = local_box(shape, mesh, step.dst, group[0])
        at = target[p.dim][0]
        for c in group:  # the pieces must be consecutive chunks of the target, in rank order
            box = local_box(shape, mesh, step.src, c)
            if box_numel(box) and box[p.dim][0] != at:
                raise StepError(f"{step}: rank {c} holds {box} but a plain all_gather would put "
                                f"it at offset {at} of {target}: expected the group to be the "
                                f"innermost mesh dims sharding dim {p.dim}; use all_to_all")
            at += box[p.dim][1] - box[p.dim][0]
        gathered = torch.cat([cur[c] for c in group], dim=p.dim)
        for c in group:
            out[c] = gathered.clone()
    return out


def _all_to_all(cur: Locals, step: Step, mesh: tuple[int, ...], shape: tuple[int, ...]) -> Locals:
    if any(isinstance(step.src[m], Partial) or isinstance(step.dst[m], Partial)
           for m in step.mesh_dims):
        raise StepError(f"{step}: all_to_all moves S/R pieces; the group has Partial mesh dims")
    if has_block(step.src + step.dst):
        return _all_to_all_by_mask(cur, step, mesh, shape)
    out: Locals = {}
    for group in mesh_groups(mesh, step.mesh_dims):
        for c in group:
            target = local_box(shape, mesh, step.dst, c)
            new = cur[c].new_empty(box_shape(target))
            covered = torch.zeros(box_shape(target), dtype=torch.bool)
            # Own data first, then the others in group-rank order: each element arrives once.
            for j in [c] + [g for g in group if g != c]:
                have = local_box(shape, mesh, step.src, j)
                part = box_intersect(target, have)
                if box_numel(part) == 0:
                    continue
                dst_idx = tuple(slice(a - t0, b - t0) for (a, b), (t0, _) in zip(part, target))
                src_idx = tuple(slice(a - h0, b - h0) for (a, b), (h0, _) in zip(part, have))
                fresh = ~covered[dst_idx]
                new[dst_idx] = torch.where(fresh, cur[j][src_idx], new[dst_idx])
                covered[dst_idx] = True
            if not bool(covered.all()):
                raise StepError(f"{step}: rank {c} needs {target} but its group "
                                f"{group} does not hold all of it: expected a group spanning "
                                f"every mesh dim that splits those elements")
            out[c] = new
    return out


def _all_to_all_by_mask(cur: Locals, step: Step, mesh: tuple[int, ...],
                        shape: tuple[int, ...]) -> Locals:
    """``_all_to_all`` for pieces that are not boxes, by brute force: each member's piece laid
    into the global tensor with a mask of what it holds, each new piece read from the first
    holder in [the rank itself] + the others in group-rank order."""
    out: Locals = {}
    for group in mesh_groups(mesh, step.mesh_dims):
        laid = {}
        for j in group:
            full = cur[j].new_zeros(shape)
            held = torch.zeros(shape, dtype=torch.bool)
            at = local_index(shape, mesh, step.src, j)
            full[at], held[at] = cur[j], True
            laid[j] = (full, held)
        for c in group:
            at = local_index(shape, mesh, step.dst, c)
            new = laid[c][0][at]
            covered = laid[c][1][at]
            for j in group:
                full, held = laid[j]
                fresh = held[at] & ~covered
                new = torch.where(fresh, full[at], new)
                covered = covered | fresh
            if not bool(covered.all()):
                raise StepError(f"{step}: rank {c} needs elements its group {group} does not "
                                f"hold: expected a group spanning every mesh dim that splits "
                                f"them")
            out[c] = new
    return out


def _all_reduce(cur: Locals, step: Step, mesh: tuple[int, ...], shape: tuple[int, ...]) -> Locals:
    op = one_partial_op(step)
    if any(not isinstance(step.dst[m], Replicate) for m in step.mesh_dims):
        raise StepError(f"{step}: all_reduce turns P(op) into R on every mesh dim of the group")
    out: Locals = {}
    for group in mesh_groups(mesh, step.mesh_dims):
        total = _reduce([cur[c] for c in group], op, step)
        for c in group:
            out[c] = total.clone()
    return out


def _reduce_scatter(cur: Locals, step: Step, mesh: tuple[int, ...],
                    shape: tuple[int, ...]) -> Locals:
    op = one_partial_op(step)
    if any(not isinstance(step.dst[m], Shard) for m in step.mesh_dims):
        raise StepError(f"{step}: reduce_scatter turns P(op) into S(d) on every mesh dim")
    out: Locals = {}
    for group in mesh_groups(mesh, step.mesh_dims):
        total = _reduce([cur[c] for c in group], op, step)
        for c in group:
            out[c] = _crop(total, step, mesh, shape, c).clone()
    return out


def _local_slice(cur: Locals, step: Step, mesh: tuple[int, ...],
                 shape: tuple[int, ...]) -> Locals:
    if any(isinstance(step.src[m], Partial) or isinstance(step.dst[m], Partial)
           for m in step.mesh_dims):
        raise StepError(f"{step}: local_slice works on S/R mesh dims only")
    return {c: _crop(t, step, mesh, shape, c).clone() for c, t in cur.items()}


def _local_partial(cur: Locals, step: Step, mesh: tuple[int, ...],
                   shape: tuple[int, ...]) -> Locals:
    ops = {step.dst[m] for m in step.mesh_dims}
    (p,) = ops if len(ops) == 1 else (None,)
    if not isinstance(p, Partial) or any(isinstance(step.src[m], Partial)
                                         for m in step.mesh_dims):
        raise StepError(f"{step}: local_partial turns R/S(d) into one P(op)")
    out: Locals = {}
    for c, t in cur.items():
        have = local_box(shape, mesh, step.src, c)
        target = local_box(shape, mesh, step.dst, c)
        if not box_contains(target, have):
            raise StepError(f"{step}: rank {c} holds {have}, outside its new piece {target}")
        new = torch.full(box_shape(target), _identity(p.reduce_op, t.dtype), dtype=t.dtype,
                         device=t.device)
        # Note [Replicate -> Partial]: the held values must reduce back to themselves. Sum
        # and product keep them on one holder (coordinate 0 of every R mesh dim); avg scales
        # them by the number of S(d) splits so that the mean over the group is right; max/min
        # keep all.
        reps = [m for m in step.mesh_dims if isinstance(step.src[m], Replicate)]
        splits = math.prod(mesh[m] for m in step.mesh_dims if isinstance(step.src[m], Shard))
        if p.reduce_op in ("sum", "product") and any(c[m] != 0 for m in reps):
            out[c] = new
            continue
        value = t * splits if p.reduce_op == "avg" and splits > 1 else t
        if box_numel(have):
            new[tuple(slice(a - t0, b - t0) for (a, b), (t0, _) in zip(have, target))] = value
        out[c] = new
    return out


def _local_scale(cur: Locals, step: Step, mesh: tuple[int, ...],
                 shape: tuple[int, ...]) -> Locals:
    pairs = {(step.src[m], step.dst[m]) for m in step.mesh_dims}
    n = math.prod(mesh[m] for m in step.mesh_dims)
    if pairs == {(Partial("sum"), Partial("avg"))}:
        return {c: t * n for c, t in cur.items()}  # the mean of n * x_i is the sum of x_i
    if pairs == {(Partial("avg"), Partial("sum"))}:
        return {c: _divide(t, n, step) for c, t in cur.items()}
    raise StepError(f"{step}: local_scale turns P(sum) into P(avg) or back on every mesh dim")


STEP_FUNCTIONS: dict[str, Callable[[Locals, Step, tuple[int, ...], tuple[int, ...]], Locals]] = {
    "all_gather": _all_gather,
    "all_to_all": _all_to_all,
    "all_reduce": _all_reduce,
    "reduce_scatter": _reduce_scatter,
    "local_slice": _local_slice,
    "local_partial": _local_partial,
    "local_scale": _local_scale,
}


# ---------------------------------------------------------------------------------------------
# Helpers


def _check_locals(cur: Locals, step: Step, mesh: tuple[int, ...], shape: tuple[int, ...],
                  index: int) -> None:
    if set(cur) != set(mesh_coordinates(mesh)):
        raise StepError(f"step {index} {step}: locals cover {sorted(cur)}, expected every "
                        f"coordinate of mesh {mesh}")
    for c, t in cur.items():
        want = local_shape(shape, mesh, step.src, c)
        if tuple(t.shape) != want:
            raise StepError(f"step {index} {step}: rank {c} holds shape {tuple(t.shape)}, "
                            f"expected {want} for {fmt_placements(step.src)} of {shape}")


def one_partial_op(step: Step) -> str:
    ops = {step.src[m] for m in step.mesh_dims}
    (p,) = ops if len(ops) == 1 else (None,)
    if not isinstance(p, Partial):
        raise StepError(f"{step}: {step.kind} needs one P(op) on every mesh dim of the group")
    return p.reduce_op


def _reduce(tensors: list[torch.Tensor], op: str, step: Step) -> torch.Tensor:
    stacked = torch.stack(tensors)
    if op == "sum":
        return stacked.sum(0, dtype=stacked.dtype)
    if op == "avg":
        return _divide(stacked.sum(0, dtype=stacked.dtype), len(tensors), step)
    if op == "product":
        return _product(stacked)
    return stacked.amax(0) if op == "max" else stacked.amin(0)


def _product(stacked: torch.Tensor) -> torch.Tensor:
    """The product over dim 0 in the pieces' dtype (bool: all)."""
    if stacked.dtype == torch.bool:
        return stacked.all(0)
    return stacked.prod(0, dtype=stacked.dtype)


def _divide(t: torch.Tensor, n: int, step: Step) -> torch.Tensor:
    if not t.is_floating_point():
        raise StepError(f"{step}: Partial(avg) on {t.dtype} would round: expected a float dtype")
    return t / n


def _crop(t: torch.Tensor, step: Step, mesh: tuple[int, ...], shape: tuple[int, ...],
          c: Coord) -> torch.Tensor:
    have = local_box(shape, mesh, step.src, c)
    target = local_box(shape, mesh, step.dst, c)
    if not box_contains(have, target):
        raise StepError(f"{step}: rank {c} needs {target} but holds only {have}")
    if box_numel(target) == 0:
        return t.new_empty(box_shape(target))
    return t[tuple(slice(a - h0, b - h0) for (a, b), (h0, _) in zip(target, have))]


def _identity(op: str, dtype: torch.dtype) -> float | int | bool:
    if op in ("sum", "avg"):
        return 0
    if op == "product":
        return True if dtype == torch.bool else 1
    if dtype == torch.bool:
        return op == "min"
    if dtype.is_floating_point:
        return -math.inf if op == "max" else math.inf
    info = torch.iinfo(dtype)
    return info.min if op == "max" else info.max


# ---------------------------------------------------------------------------------------------
# Building and checking locals


def shard_full(full: torch.Tensor, mesh_shape: Sequence[int], placements: Sequence[Placement],
               seed: int = 0) -> Locals:
    """Every rank's local tensor for ``full`` laid out by ``placements``.

    Partial mesh dims split the value into pieces whose reduction is it: random integer
    addends (sum), values offset by integers that cancel (avg), the value on one rank and
    values not above it elsewhere (max; min mirrored), factors of +-1 that cancel (product).
    Integer offsets keep integer-valued data exact in every dtype whose integers it can hold.

    >>> shard_full(torch.arange(5), (4,), [Shard(0)])[(3,)].tolist()
    []
    """
    mesh_shape, placements = tuple(mesh_shape), tuple(placements)
    gen = torch.Generator().manual_seed(seed)
    values: dict[Coord, torch.Tensor] = {(): full}
    # Each Partial mesh dim, in mesh-dim order, splits every value the earlier ones made.
    # Values are keyed by Partial coordinates only, so replicas along R/S dims agree.
    partial_dims = [m for m, p in enumerate(placements) if isinstance(p, Partial)]
    for m in partial_dims:
        op = placements[m].reduce_op  # type: ignore[union-attr]
        values = {key + (i,): part for key, v in values.items()
                  for i, part in enumerate(_split(v, op, mesh_shape[m], gen))}
    shape = tuple(full.shape)
    return {c: values[tuple(c[m] for m in partial_dims)][
        local_index(shape, mesh_shape, placements, c)].clone()
        for c in mesh_coordinates(mesh_shape)}


def _split(v: torch.Tensor, op: str, n: int, gen: torch.Generator) -> list[torch.Tensor]:
    def noise(lo: int, hi: int) -> torch.Tensor:
        return torch.randint(lo, hi, tuple(v.shape), generator=gen).to(v.dtype)

    if op == "sum":
        parts = [noise(-3, 4) for _ in range(n - 1)]
        return parts + [v - sum(parts, torch.zeros_like(v))] if parts else [v]
    if op == "avg":
        offsets = [noise(-3, 4) for _ in range(n - 1)]
        last = -sum(offsets, torch.zeros_like(v))
        return [v + d for d in offsets + [last]]
    keep = int(torch.randint(0, n, (), generator=gen))
    if op == "product":  # random signs that cancel, where the dtype has them; else ones
        if v.dtype == torch.bool or not (v.is_floating_point() or v.is_signed()):
            return [v if i == keep else torch.ones_like(v) for i in range(n)]
        signs = [noise(0, 2) * 2 - 1 for _ in range(n - 1)]
        return signs + [v * math.prod(signs, start=torch.ones_like(v))]
    sign = -1 if op == "max" else 1
    return [v if i == keep else v + sign * noise(0, 4) for i in range(n)]


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal, counting NaN equal to NaN (replicas of a NaN agree)."""
    if torch.equal(a, b):
        return True
    if not (a.is_floating_point() or a.is_complex()):
        return False
    return torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())


def unshard(locals_by_coordinate: Mapping[Coord, torch.Tensor], mesh_shape: Sequence[int],
            placements: Sequence[Placement], global_shape: Sequence[int]) -> torch.Tensor:
    """The global tensor that ranks' locals describe; raises if replicas disagree or an
    element is held by no rank.

    >>> unshard({(0,): torch.tensor([1, 2]), (1,): torch.tensor([3])}, (2,), [Shard(0)], (3,))
    tensor([1, 2, 3])
    >>> unshard({(0,): torch.tensor([1, 2]), (1,): torch.tensor([3, 4])}, (2,), [Partial()], (2,))
    tensor([4, 6])
    """
    mesh_shape, placements, shape = tuple(mesh_shape), tuple(placements), tuple(global_shape)
    partial_dims = [m for m, p in enumerate(placements) if isinstance(p, Partial)]
    some = next(iter(locals_by_coordinate.values()))
    values: dict[Coord, torch.Tensor] = {}
    for c in mesh_coordinates(mesh_shape):
        key = tuple(c[m] for m in partial_dims)
        if key not in values:
            values[key] = some.new_empty(shape)
            values[key + ("seen",)] = torch.zeros(shape, dtype=torch.bool)  # type: ignore
        idx = local_index(shape, mesh_shape, placements, c)
        seen = values[key + ("seen",)]  # type: ignore
        t = locals_by_coordinate[c]
        if bool(seen[idx].any()) and not _bitwise_equal(
                torch.where(seen[idx], values[key][idx], t), t):
            raise ValueError(f"rank {c} disagrees with another replica of {idx} under "
                             f"{fmt_placements(placements)}")
        values[key][idx] = t
        seen[idx] = True
    for key, seen in values.items():
        if key[-1:] == ("seen",) and not bool(seen.all()):
            raise ValueError(f"no rank holds some elements under {fmt_placements(placements)}")
    pieces = [v for k, v in values.items() if k[-1:] != ("seen",)]
    ops = {placements[m].reduce_op for m in partial_dims}  # type: ignore[union-attr]
    if not ops:
        return pieces[0]
    if ops <= {"sum", "avg"}:
        total = torch.stack(pieces).sum(0, dtype=some.dtype)
        n_avg = math.prod(mesh_shape[m] for m in partial_dims
                          if placements[m] == Partial("avg"))
        return total if n_avg == 1 else _divide(total, n_avg, Step(
            "local_scale", tuple(partial_dims), placements, placements))
    if ops == {"product"}:
        return _product(torch.stack(pieces))
    return torch.stack(pieces).amax(0) if ops == {"max"} else torch.stack(pieces).amin(0)
