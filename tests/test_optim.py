"""Foreach rules and optimizers on DTensor parameters.

Every strategy the foreach rule offers is checked with the soundness harness (tensor lists
included), from several current placements per call; in-place and ``out=`` overloads, which
return nothing for the harness to assemble, by assembling the tensors they write. Then
torch.optim (SGD, Adam, AdamW, foreach and not) and gradient clipping on simpg against a
single-device run, with no gathering fallback and the optimizer state sharded like its
parameter.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import pytest
import torch

import dtensor.decompositions.foreach_norm  # noqa: F401  (registers its decomposition)
import simpg
from tests.support.cases import mesh_id
from tests.support.mesh_world import run_on_mesh
from dtensor import (DTensor, Partial, Replicate, Shard, distribute_tensor, fallback_policy,
                     mesh_coordinates)
from dtensor.redistribute import shard_full, unshard
from dtensor.ops.foreach import foreach_overloads
from dtensor.ops.propagate import Candidate, candidates, decide
from dtensor.ops.registry import REGISTRY, OpSpec, TensorSpec
from dtensor.ops.soundness import check_candidate
from dtensor.placements import Placement, fmt_placements

aten = torch.ops.aten
R, S0, S1 = Replicate(), Shard(0), Shard(1)
PS, PA, PMAX = Partial("sum"), Partial("avg"), Partial("max")
SHAPES = [(7, 5), (5,), (1, 3)]  # uneven on 4 ranks; (5,) leaves rank 3 an empty piece


# -- soundness of every strategy ----------------------------------------------------------------
def _values(shape: Sequence[int], seed: int) -> torch.Tensor:
    # positive and away from 0 and 1 (log, sqrt, reciprocal, pow stay finite; acos is NaN
    # outside [-1, 1], and the harness counts NaN equal to NaN)
    g = torch.Generator().manual_seed(seed)
    return torch.rand(tuple(shape), generator=g, dtype=torch.float64) + 0.5


def _build_args(op: Any) -> tuple[tuple, dict]:
    """Arguments for any foreach overload from its schema: lists over SHAPES."""
    args: list = []
    kwargs: dict = {}
    seed = 0
    for a in op._schema.arguments:
        t = str(a.type)
        if t == "List[Tensor]" and a.name == "out" and _reduces(op):
            v: Any = [torch.zeros((), dtype=torch.float64) for _ in SHAPES]
        elif t == "List[Tensor]":
            v = [_values(s, seed + i) for i, s in enumerate(SHAPES)]
            seed += 10
        elif t == "Tensor":  # .Tensor overloads: a 0-d factor, or addc*'s per-position scalars
            v = torch.tensor([0.7, -1.3, 2.0], dtype=torch.float64) if a.name == "scalars" \
                else torch.tensor(0.7, dtype=torch.float64)
        elif t == "List[number]":
            v = [0.5, -1.5, 2.0]
        elif t == "number":
            v = 2 if a.name in ("ord", "exponent") else 0.7
        elif a.has_default_value():
            continue
        else:
            raise TypeError(f"{op}: no test value for argument {a.name}: {t}")
        if a.kwarg_only:
            kwargs[a.name] = v
        else:
            args.append(v)
    return tuple(args), kwargs


def _reduces(op: Any) -> bool:
    return any(f"_foreach_{n}." in str(op) for n in ("norm", "max", "powsum"))


def _spec(op: Any, args: tuple, kwargs: dict, placements: Sequence[tuple[Placement, ...]],
          mesh_shape: tuple[int, ...]) -> OpSpec:
    """The OpSpec of a call whose tensors (flattening order) hold ``placements``."""
    it = iter(placements)

    def describe(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return TensorSpec(tuple(x.shape), tuple(x.stride()), x.dtype, next(it))
        if isinstance(x, (list, tuple)):
            return tuple(describe(v) for v in x)
        return x

    spec = OpSpec(op, describe(args), tuple((k, describe(v)) for k, v in kwargs.items()),
                  mesh_shape)
    assert next(it, None) is None, "more placements than tensors"
    return spec


def _flat_tensors(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    out = []
    for a in list(args) + list(kwargs.values()):
        items = a if isinstance(a, (list, tuple)) else [a]
        out += [x for x in items if isinstance(x, torch.Tensor)]
    return out


def _written_unsound(op: Any, args: tuple, kwargs: dict, cand: Candidate,
                     mesh_shape: tuple[int, ...]) -> str | None:
    """The harness assembles returned tensors only: assemble the written ones here."""
    flat = _flat_tensors(args, kwargs)
    written = _written_indices(op, args, kwargs)
    if not written:
        return None
    locals_in = [shard_full(t, mesh_shape, p, seed=k)
                 for k, (t, p) in enumerate(zip(flat, cand.inputs))]
    full = [t.clone() for t in flat]
    _call(op, args, kwargs, full)
    per_rank: dict[int, dict] = {k: {} for k in written}
    for c in mesh_coordinates(mesh_shape):
        mine = [locals_in[k][c].clone() for k in range(len(flat))]
        _call(op, args, kwargs, mine)
        for k in written:
            per_rank[k][c] = mine[k]
    for k in written:
        got = unshard(per_rank[k], mesh_shape, cand.inputs[k], tuple(flat[k].shape))
        if not torch.allclose(got, full[k], rtol=1e-6, atol=1e-6, equal_nan=True):
            return f"written tensor {k} under {fmt_placements(cand.inputs[k])} differs"
    return None


def _refill(args: tuple, kwargs: dict, it: Any) -> tuple[tuple, dict]:
    def put(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return next(it)
        if isinstance(x, (list, tuple)):
            return type(x)(put(v) for v in x)
        return x

    return tuple(put(a) for a in args), {k: put(v) for k, v in kwargs.items()}


def _call(op: Any, args: tuple, kwargs: dict, tensors: list[torch.Tensor]) -> Any:
    a, k = _refill(args, kwargs, iter(tensors))
    return op(*a, **k)


def _written_indices(op: Any, args: tuple, kwargs: dict) -> list[int]:
    names = [a.name for a in op._schema.arguments]
    written = {a.name for a in op._schema.arguments
               if a.alias_info is not None and a.alias_info.is_write}
    out, k = [], 0
    for name, a in list(zip(names, args)) + list(kwargs.items()):
        items = a if isinstance(a, (list, tuple)) else [a]
        for x in items:
            if isinstance(x, torch.Tensor):
                if name in written:
                    out.append(k)
                k += 1
    return out


def _layouts(mesh_shape: tuple[int, ...]) -> dict[str, list[tuple[Placement, ...]]]:
    """Per list position (SHAPES), current placements on the mesh."""
    if len(mesh_shape) == 1:
        return {"S": [(S0,), (S0,), (S1,)], "R": [(R,)] * 3, "P": [(PS,)] * 3,
                "Pavg": [(PA,)] * 3, "Pmax": [(PMAX,)] * 3}
    return {"S": [(S0, S1), (R, S0), (S1, S0)], "R": [(R, R)] * 3,
            "P": [(PS, S0), (S0, PS), (PS, PS)], "Pavg": [(PA, S1), (PA, R), (R, PA)],
            "Pmax": [(PMAX, R), (R, PMAX), (PMAX, PMAX)]}


# (lead list's layout, the other lists' layout): the lead is the first tensor list
SCENARIOS = [("S", "S"), ("P", "R"), ("P", "P"), ("Pavg", "R"), ("Pmax", "R"), ("Pmax", "Pmax"),
             ("R", "S"), ("S", "R")]


def _placements(op: Any, args: tuple, kwargs: dict, lead: list, rest: list,
                mesh_shape: tuple[int, ...]) -> list[tuple[Placement, ...]]:
    out: list[tuple[Placement, ...]] = []
    first = True
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor):
            out.append((R,) * len(mesh_shape))
        elif isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor):
            out += lead if first else rest
            first = False
    return out


def unsound(op: Any, args: tuple, kwargs: dict, mesh_shape: tuple[int, ...]) -> list[str]:
    """Every candidate the rule offers from every scenario, checked; the problems found."""
    problems, seen = [], set()
    layouts = _layouts(mesh_shape)
    for lead, rest in SCENARIOS:
        ps = _placements(op, args, kwargs, layouts[lead], layouts[rest], mesh_shape)
        spec = _spec(op, args, kwargs, ps, mesh_shape)
        for cand in candidates(spec, dispatchable_only=False):
            if (cand.inputs, cand.outputs) in seen:
                continue
            seen.add((cand.inputs, cand.outputs))
            reason = (check_candidate(op, args, kwargs, cand, mesh_shape)
                      or _written_unsound(op, args, kwargs, cand, mesh_shape))
            if reason:
                problems.append(f"{lead}/{rest} {' '.join(map(fmt_placements, cand.inputs))}: "
                                f"{reason}")
    return problems


OVERLOADS = foreach_overloads()
MESHES = [(4,), (2, 2)]


def test_every_foreach_overload_has_a_rule_but_mm():
    assert len(OVERLOADS) > 150
    assert all(op in REGISTRY for op in OVERLOADS)
    assert aten._foreach_mm.default not in REGISTRY  # N matmuls: not elementwise


@pytest.mark.parametrize("mesh_shape", MESHES, ids=mesh_id)
@pytest.mark.parametrize("op", OVERLOADS, ids=str)
def test_every_strategy_is_sound(op, mesh_shape):
    args, kwargs = _build_args(op)
    assert unsound(op, args, kwargs, mesh_shape) == []


@pytest.mark.parametrize("ord_", [1, 0, 2, 3, math.inf, -math.inf, 0.5])
@pytest.mark.parametrize("op", [aten._foreach_norm.Scalar, aten._foreach_powsum.Scalar],
                         ids=str)
def test_norm_orders_are_sound(op, ord_):
    args = ([_values(s, i) - 1.0 for i, s in enumerate(SHAPES)], ord_)  # signs matter for |x|
    for mesh_shape in MESHES:
        assert unsound(op, args, {}, mesh_shape) == []


# -- end to end on simpg ------------------------------------------------------------------------
# (shape, placements on mesh (4,), placements on mesh (2, 2)): uneven, some pieces empty
PARAMS = [((7, 5), (S0,), (S0, S1)), ((7, 5), (S1,), (R, S0)), ((5,), (S0,), (S0, S0)),
          ((1, 3), (R,), (R, S1))]
OPTIMIZERS = {
    "sgd": (torch.optim.SGD, dict(lr=0.1)),
    "sgd-nesterov-wd": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True,
                                              weight_decay=0.1)),
    "sgd-dampening": (torch.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.2,
                                            weight_decay=0.05)),
    "adam": (torch.optim.Adam, dict(lr=0.01)),
    "adam-amsgrad-wd": (torch.optim.Adam, dict(lr=0.01, amsgrad=True, weight_decay=0.1)),
    "adamw": (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1)),
    "adamw-amsgrad": (torch.optim.AdamW, dict(lr=0.01, amsgrad=True)),
}
STEPS = 3


def _full_params() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(s, generator=g) for s, _, _ in PARAMS]


def _grads(step: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    return [torch.randn(s, generator=g) for s, _, _ in PARAMS]


def _dparams(mesh: Any) -> list[torch.nn.Parameter]:
    col = 1 if mesh.ndim == 1 else 2
    return [torch.nn.Parameter(distribute_tensor(t, mesh, spec[col]))
            for t, spec in zip(_full_params(), PARAMS)]


def _set_grads(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], mesh: Any) -> None:
    for p, g in zip(params, grads):
        p.grad = distribute_tensor(g, mesh, p.placements) if mesh is not None else g.clone()


def _reference(cls: Any, kwargs: dict, foreach: bool) -> tuple[list, torch.optim.Optimizer]:
    params = [torch.nn.Parameter(t) for t in _full_params()]
    opt = cls(params, foreach=foreach, **kwargs)
    for step in range(STEPS):
        _set_grads(params, _grads(step), None)
        opt.step()
    return params, opt


@pytest.mark.parametrize("mesh_shape", MESHES, ids=mesh_id)
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_matches_single_device(name, mesh_shape):
    cls, kwargs = OPTIMIZERS[name]
    refs = {fe: _reference(cls, kwargs, fe) for fe in (False, True)}

    def body(mesh):
        for foreach in (False, True):
            params = _dparams(mesh)
            opt = cls(params, foreach=foreach, **kwargs)
            for step in range(STEPS):
                _set_grads(params, _grads(step), mesh)  # distribute_tensor broadcasts
                with fallback_policy("error"), simpg.trace() as tr:
                    opt.step()
                # every tensor of the update lies like its parameter: nothing moves
                assert tr.records == [], f"foreach={foreach}, step {step}:\n{tr}"
            ref_params, ref_opt = refs[foreach]
            for p, ref in zip(params, ref_params):
                torch.testing.assert_close(p.full_tensor(), ref.detach())
                for key, value in opt.state[p].items():
                    if key == "step":  # Adam's step count: a plain 0-d tensor
                        assert not isinstance(value, DTensor)
                        continue
                    # the state is sharded like its parameter: each rank holds its piece only
                    assert value.placements == p.placements, key
                    assert value.to_local().shape == p.to_local().shape, key
                    torch.testing.assert_close(value.full_tensor(), ref_opt.state[ref][key])

    run_on_mesh(mesh_shape, body)


def _clip_reference(norm_type: float, foreach: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
    params = [torch.nn.Parameter(t) for t in _full_params()]
    _set_grads(params, _grads(0), None)
    total = torch.nn.utils.clip_grad_norm_(params, 0.5, norm_type, foreach=foreach)
    return total, [p.grad for p in params]


@pytest.mark.parametrize("mesh_shape", MESHES, ids=mesh_id)
@pytest.mark.parametrize("norm_type", [2.0, 1.0, math.inf], ids=lambda n: f"norm{n}")
def test_clip_grad_norm_matches_single_device(norm_type, mesh_shape):
    refs = {fe: _clip_reference(norm_type, fe) for fe in (False, True)}

    def body(mesh):
        moved = {}
        for foreach in (False, True):
            params = _dparams(mesh)
            _set_grads(params, _grads(0), mesh)
            with fallback_policy("error"), simpg.trace() as tr:
                total = torch.nn.utils.clip_grad_norm_(params, 0.5, norm_type, foreach=foreach)
            ref_total, ref_grads = refs[foreach]
            # (the 1-norm may come back P(sum): a sum of the pieces' norms is exact)
            torch.testing.assert_close(total.full_tensor(), ref_total)
            for p, ref in zip(params, ref_grads):
                assert p.grad.placements == p.placements  # scaled in place, where it lies
                torch.testing.assert_close(p.grad.full_tensor(), ref)
            moved[foreach] = max(tr.bytes_received().values(), default=0)
        return moved

    moved = run_on_mesh(mesh_shape, body)[0]
    # 1- and inf-norms of pieces reduce as P(sum) / P(max), the 2-norm's squares are summed
    # (Note [sharded foreach norms]): a few floats per gradient move, never a gradient
    assert moved[True] <= 4 * 8 * len(PARAMS), moved


@pytest.mark.parametrize("mesh_shape", MESHES, ids=mesh_id)
def test_clip_grad_value_matches_single_device(mesh_shape):
    refs = {}
    for foreach in (False, True):
        params = [torch.nn.Parameter(t) for t in _full_params()]
        _set_grads(params, _grads(0), None)
        torch.nn.utils.clip_grad_value_(params, 0.3, foreach=foreach)
        refs[foreach] = [p.grad for p in params]

    def body(mesh):
        for foreach in (False, True):
            params = _dparams(mesh)
            _set_grads(params, _grads(0), mesh)
            with fallback_policy("error"), simpg.trace() as tr:
                torch.nn.utils.clip_grad_value_(params, 0.3, foreach=foreach)
            assert tr.records == []
            for p, ref in zip(params, refs[foreach]):
                assert p.grad.placements == p.placements
                torch.testing.assert_close(p.grad.full_tensor(), ref)

    run_on_mesh(mesh_shape, body)


def test_partial_survives_linear_foreach_ops_only():
    torch.manual_seed(3)
    xs = [torch.randn(7, 5), torch.randn(5)]

    def body(mesh):
        # P(sum) addends of xs: rank r holds xs / 4 (from_local of a full-size piece)
        ps = [DTensor.from_local(x / 4, mesh, [PS]) for x in xs]
        with fallback_policy("error"), simpg.trace() as tr:
            torch._foreach_mul_(ps, 3.0)  # 3 (a1 + ... + a4) = 3 a1 + ... + 3 a4
            torch._foreach_lerp_(ps, [DTensor.from_local(x / 4, mesh, [PS]) for x in xs], 0.5)
            doubled = torch._foreach_add(ps, ps)
        assert tr.records == []
        assert all(p.placements == (PS,) for p in ps + list(doubled))
        for p, d, x in zip(ps, doubled, xs):
            torch.testing.assert_close(p.full_tensor(), 2 * x)  # lerp(3x, x, 0.5)
            torch.testing.assert_close(d.full_tensor(), 4 * x)
        shifted = torch._foreach_add(ps, 1.0)  # out of place: reduced first, then shifted
        assert shifted[0].placements == (R,)
        torch.testing.assert_close(shifted[0].full_tensor(), 2 * xs[0] + 1)
        # P(sum) + 1 would add 1 on every rank: written in place, the Partial is reduced in its
        # own storage first (Note [relocating an in-place target]), then shifted
        torch._foreach_add_(ps, 1.0)
        assert all(p.placements == (R,) for p in ps)
        torch.testing.assert_close(ps[0].full_tensor(), 2 * xs[0] + 1)

    run_on_mesh((4,), body)


def test_plain_tensors_and_mixed_lists():
    torch.manual_seed(4)
    xs = [torch.randn(7, 5), torch.randn(1, 3)]

    def body(mesh):
        ds = [distribute_tensor(x, mesh, [S0, S1]) for x in xs]
        rs = [distribute_tensor(x, mesh, [R, R]) for x in xs]
        with fallback_policy("error"), simpg.trace() as tr:
            # a plain 0-d factor (the .Tensor overload), then a list of plain 0-d tensors (as
            # capturable optimizers divide by), then plain full tensors: all taken as Replicate
            torch._foreach_mul_(ds, torch.tensor(2.0))
            torch._foreach_div_(ds, [torch.tensor(4.0), torch.tensor(0.5)])
            torch._foreach_add_(ds, [x.clone() for x in xs], alpha=-1.0)
            # out of place on mixed lists: the Replicate operand is sliced, not the Shard gathered
            mixed = torch._foreach_add(rs, ds)
        assert tr.records == []
        assert [d.placements for d in ds] == [(S0, S1)] * 2
        assert [m.placements for m in mixed] == [(S0, S1)] * 2
        for d, m, x, c in zip(ds, mixed, xs, (2.0 / 4.0, 2.0 / 0.5)):
            torch.testing.assert_close(d.full_tensor(), x * c - x)
            torch.testing.assert_close(m.full_tensor(), x * c)

    run_on_mesh((2, 2), body)


def test_strategies_stay_few_for_long_lists():
    # the propagator prices the product over mesh dims: keep / follow / Replicate per dim
    params = [torch.randn(7, 5) for _ in range(50)]
    ps = [(S0, S1)] * 50
    spec = _spec(aten._foreach_add.List, (params, params), {}, ps + ps, (2, 2))
    assert len(candidates(spec)) <= 4
    chosen = decide(spec).chosen
    assert chosen.cost == 0 and chosen.inputs == tuple(ps + ps)


@pytest.mark.parametrize("mesh_shape", MESHES, ids=mesh_id)
def test_foreach_norm_of_shards_sums_powers_once_per_group(mesh_shape):
    xs = [torch.randn(s, generator=torch.Generator().manual_seed(i))
          for i, (s, _, _) in enumerate(PARAMS)]
    ords = [2, 3, 0.5, -1.5, 1, math.inf, -math.inf, 0]

    def body(mesh):
        col = 1 if mesh.ndim == 1 else 2
        ds = [distribute_tensor(x, mesh, spec[col]) for x, spec in zip(xs, PARAMS)]
        for ord_ in ords:
            with fallback_policy("error"), simpg.trace() as tr:
                norms = torch._foreach_norm(ds, ord_)
            want = torch._foreach_norm(xs, ord_)
            for got, ref in zip(norms, want):
                torch.testing.assert_close(got.full_tensor(), ref)
            # one all-reduce per set of mesh dims the tensors are sharded over
            groups = {tuple(m for m, p in enumerate(s[col]) if p != R) for s in PARAMS} - {()}
            if ord_ not in (1, 0, math.inf, -math.inf):  # those stay Partial: nothing moves yet
                assert len(tr.records) == len(groups), str(tr)
                # an all-reduce of k floats receives 2 (n - 1) / n * 4k bytes per rank
                assert all(max(r.bytes_received) <= 8 * len(PARAMS) for r in tr.records), str(tr)
            else:
                assert tr.records == []

    run_on_mesh(mesh_shape, body)
