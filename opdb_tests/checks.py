"""The checks of one case, returning failures as data (never printing).

- ``soundness``: every strategy the rule can return for a sample's aten call on a mesh,
  checked with ``dtensor.ops.soundness.check_candidate`` (no process group, no threads).
- ``forward`` / ``backward``: on one rank of a simpg world, the sample's inputs laid out by
  the drawn placements (each rank's piece from ``shard_full``; Partial values split into
  addends, wrapped with ``DTensor.from_local``), the OpInfo's callable run on DTensors with
  the replicate fallback turned into an error, compared with the single-device result.

A ``Failure`` carries everything a reproducer needs (``Failure.report``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import torch
from torch.utils import _pytree as pytree

from dtensor.dispatch import fallback_policy
from dtensor.dispatch.general import _written
from simpg.errors import SimpgError
from dtensor.redistribute.reference import local_index
from dtensor.redistribute.reference import shard_full, unshard
from dtensor.ops.propagate import candidates, decide
from dtensor.ops.registry import REGISTRY, TensorSpec
from dtensor.ops.soundness import check_candidate, op_spec
from dtensor.placements import Partial, Placement
from dtensor.spec import replicate_partials
from opdb_tests import causes
from opdb_tests.cases import (AtenCall, Entry, Sample, case_id, clone_sample, kind,
                              repro_command, tolerances)
from opdb_tests.causes import reason_of

# inference: the forward under torch.inference_mode(), where composite ops reach dispatch
# whole (Note [inference mode] in dtensor.dispatch.general)
TIERS = ("sound", "forward", "backward", "inference")
GENERATION = "samples"  # the pseudo-tier of an OpInfo whose sample generator raises


@dataclass(frozen=True)
class Failure:
    tier: str
    key: str
    sample: int  # the sample's index in the OpInfo (samples are not kept: they may not pickle)
    sample_text: str
    mesh_shape: tuple[int, ...]
    placements: tuple[tuple[Placement, ...], ...] | None  # None: every candidate (soundness)
    reason: str
    kind: str = ""  # the placement kind of the case (cases.KINDS), "" for every kind
    label: str = field(default="")  # the case id
    cause: str = ""  # the kind of failure (opdb_tests.causes): what expected_failures lists

    def report(self) -> str:
        rerun = repro_command(self.tier, self.key, self.sample, self.mesh_shape, self.placements)
        return (f"{self.tier} {self.label}\n  op: {self.key}  sample #{self.sample}: "
                f"{self.sample_text}\n  mesh: {self.mesh_shape}\n  failure kind: {self.cause}\n"
                f"  reason: {self.reason}\n  rerun: {rerun}")


# -- soundness -------------------------------------------------------------------------------


def soundness(e: Entry, s: Sample, call: AtenCall, mesh_shape: tuple[int, ...]
              ) -> tuple[list[Failure], set[str], int]:
    """Failures of every candidate, the placement kinds they covered, how many there were."""
    tensors = s.tensors()

    def whole(reason: str, cause: str) -> list[Failure]:  # a failure of every candidate
        return [Failure("sound", e.key, s.index, s.describe(), mesh_shape, None, reason, "",
                        case_id(e.key, [], mesh_shape), cause)]

    if call.func not in REGISTRY:
        return whole(f"no sharding rule for {call.func}", f"no rule: {call.func}"), set(), 1
    spec = op_spec(call.func, call.args, call.kwargs, mesh_shape)
    try:
        cands = candidates(spec, dispatchable_only=False)
    except Exception as ex:  # noqa: BLE001 - a rule that raises is a failure of the rule
        return whole(f"the rule raises {reason_of(ex)}",
                     f"rule raises {type(ex).__name__}: {call.func}"), set(), 1
    rtol, atol = tolerances(e.dtype)
    failures, kinds = [], set()
    aten_tensors = [tensors[i] for i in call.tensor_index]
    for c in cands:
        k = kind(mesh_shape, aten_tensors, c.inputs)
        kinds.add(k)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                reason = check_candidate(call.func, call.args, call.kwargs, c, mesh_shape,
                                         rtol=rtol, atol=atol)
                cause = _unsound_cause(reason, call.func) if reason else ""
            except Exception as ex:  # noqa: BLE001 - the harness itself fails on this call
                reason = (f"the soundness harness (dtensor.ops.soundness) raises "
                          f"{reason_of(ex, 200)}")
                cause = f"harness raises {type(ex).__name__}: {call.func}"
        if reason:
            outs = ";".join(",".join(str(p) for p in o) for o in c.outputs)
            failures.append(Failure("sound", e.key, s.index, s.describe(), mesh_shape, None,
                                    f"{call.func} strategy {_fmt(c.inputs)} -> {outs}: {reason}",
                                    k, case_id(e.key, c.inputs, mesh_shape, outs), cause))
    return failures, kinds, len(cands)


def _unsound_cause(reason: str, func: Any) -> str:
    # replicas that differ mean a nondeterministic output (empty_like), not a wrong rule
    if "disagrees with another replica" in reason:
        return f"replicas disagree: {func}"
    return f"unsound strategy: {func}"


def _fmt(per_tensor: Sequence[Sequence[Placement]]) -> str:
    return ";".join(",".join(str(p) for p in ps) for ps in per_tensor)


# -- end to end (on one rank of a world) -----------------------------------------------------


def _dtensors(s: Sample, mesh: Any, placements: Sequence[Sequence[Placement]],
              requires_grad: bool, seed: int) -> tuple[tuple, dict, list[torch.Tensor]]:
    from dtensor import DTensor

    coord = tuple(mesh.get_coordinate())
    flat, tree = pytree.tree_flatten(clone_sample(s))
    leaves: list[torch.Tensor] = []
    for i, a, p in _placed(flat, placements):
        local = _piece(a, p, tuple(mesh.shape), seed, i, coord)
        if requires_grad and (a.is_floating_point() or a.is_complex()):
            local.requires_grad_(True)
            leaves.append(local)
        else:
            leaves.append(None)  # type: ignore[arg-type]
        flat[i] = DTensor.from_local(local, mesh, p, shape=a.shape, stride=a.stride())
    a2, k2 = pytree.tree_unflatten(flat, tree)
    return a2, k2, leaves


def _placed(flat: list, placements: Sequence[Sequence[Placement]]
            ) -> Iterator[tuple[int, torch.Tensor, tuple[Placement, ...]]]:
    """Each tensor leaf of a flattened sample, its position and its placements."""
    it = iter(placements)
    for i, a in enumerate(flat):
        if isinstance(a, torch.Tensor):
            yield i, a, tuple(next(it))


def _pieces(a: torch.Tensor, p: tuple[Placement, ...], mesh_shape: tuple[int, ...], seed: int,
            position: int) -> Any:
    """The pieces per mesh coordinate of leaf ``position``: the one split both the DTensor
    inputs and the reference (Note [reference on the held values]) are made from."""
    return shard_full(a, mesh_shape, p, seed + position)


def _piece(a: torch.Tensor, p: tuple[Placement, ...], mesh_shape: tuple[int, ...], seed: int,
           position: int, coord: tuple[int, ...]) -> torch.Tensor:
    """``_pieces(...)[coord]``, without making the other ranks' pieces where no Partial
    splits the value (shard_full's piece is then the slice of the value, copied)."""
    if any(isinstance(q, Partial) for q in p):
        return _pieces(a, p, mesh_shape, seed, position)[coord]
    return a[local_index(tuple(a.shape), mesh_shape, p, coord)].clone()


def predicted(call: AtenCall | None, placements: Sequence[Sequence[Placement]],
              mesh_shape: tuple[int, ...]) -> tuple[tuple[Placement, ...], ...] | None:
    """The output placements ``decide`` picks for a rule-level call with these inputs (None
    where a decomposition may answer instead: Note [decompositions] in dtensor.dispatch.decomposition_table)."""
    from dtensor.dispatch import DECOMPOSITIONS

    if call is None or call.func not in REGISTRY or call.func in DECOMPOSITIONS:
        return None
    spec = op_spec(call.func, call.args, call.kwargs, mesh_shape)
    by_aten = iter([tuple(placements[i]) for i in call.tensor_index])

    def place(x: Any) -> Any:
        if isinstance(x, TensorSpec):
            return TensorSpec(x.shape, x.stride, x.dtype, next(by_aten))
        if isinstance(x, tuple):
            return tuple(place(v) for v in x)
        return x

    import dataclasses

    spec = dataclasses.replace(spec, args=tuple(place(a) for a in spec.args),
                               kwargs=tuple((k, place(v)) for k, v in spec.kwargs))
    # written arguments (in-place targets, batch norm's running stats) keep their placements,
    # as the dispatcher demands
    return decide(spec, _written(spec.op, spec)).chosen.outputs


Mismatch = tuple[str, str]  # (cause, reason)


def _max_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """Largest |got - want|, NaN where both are NaN counted as equal, elsewhere as inf."""
    wide = torch.complex128 if got.is_complex() or want.is_complex() else torch.float64
    g, w = got.detach().to(wide), want.detach().to(wide)
    d = (g - w).abs()
    d = torch.where(torch.isnan(g) & torch.isnan(w), torch.zeros_like(d), d)
    d = torch.nan_to_num(d, nan=float("inf"))
    return float(d.max()) if d.numel() else 0.0


def _plainly_close(got: torch.Tensor, want: torch.Tensor, rtol: float, atol: float) -> bool:
    """The test ``assert_close`` makes of two dense tensors of one dtype, shape and device
    (``torch.isclose`` everywhere), without building its comparison pair; False sends the
    case to ``assert_close`` itself (a mismatch, or any tensor it treats otherwise)."""
    if (type(got) is not torch.Tensor or type(want) is not torch.Tensor
            or got.layout != torch.strided or want.layout != torch.strided
            or got.is_quantized or want.is_quantized or got.device != want.device
            or (got.dtype.is_floating_point and got.dtype.itemsize == 1)):
        return False
    return bool(torch.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True).all())


def _close(got: Any, want: Any, rtol: float, atol: float) -> Mismatch | None:
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return causes.WRONG_STRUCTURE, f"got {type(got).__name__}, expected a tensor"
        if tuple(got.shape) != tuple(want.shape) or got.dtype != want.dtype:
            return causes.WRONG_META, (f"got {tuple(got.shape)}:{got.dtype}, expected "
                                       f"{tuple(want.shape)}:{want.dtype}")
        if _plainly_close(got, want, rtol, atol):
            return None
        try:
            torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True,
                                       check_stride=False)
        except AssertionError as ex:
            detail = " ".join(str(ex).split("\n")[1:2]).strip()
            return causes.WRONG_VALUES, (f"values differ: max abs error "
                                         f"{_max_error(got, want):.3g} (rtol {rtol}, atol "
                                         f"{atol}); {detail}")
        return None
    return None if got == want else (causes.WRONG_VALUES, f"got {got!r}, expected {want!r}")


def end_to_end(e: Entry, s: Sample, call: AtenCall | None, mesh: Any,
               placements: tuple[tuple[Placement, ...], ...], tier: str,
               seed: int = 0, on_error: Any = None,
               references: dict | None = None) -> Failure | None:
    """Run one case on this rank; its Failure or None. ``on_error(exc)`` is told of an
    exception first (the world aborts the case on every rank, see ``sweep.run_world``).
    ``references``: the world's shared table, by ``seed`` (Note [one reference per case])."""
    mesh_shape = tuple(mesh.shape)
    try:
        found = _end_to_end(e, s, call, mesh, placements, tier, seed, references)
    except SimpgError:
        raise  # the world is ending (mismatch, deadlock): sweep.run_world resumes after it
    except Exception as ex:  # noqa: BLE001 - any error of the runtime is this case's failure
        if on_error is not None:
            on_error(ex)
        found = causes.of_exception(ex), reason_of(ex)
    if found is None:
        return None
    cause, reason = found
    return Failure(tier, e.key, s.index, s.describe(), mesh_shape, placements, reason,
                   kind(mesh_shape, s.tensors(), placements),
                   case_id(e.key, placements, mesh_shape), cause)


_DRAW_SEED = 20261201


def _seed_draws() -> None:
    # the CPU generator alone, which every case's tensors draw from: torch.manual_seed also
    # queues lazy CUDA/XPU/MTIA seeds, each with a traceback.format_stack() of this deep
    # stack (about 0.5 ms a call, twice a case on every rank)
    torch.default_generator.manual_seed(_DRAW_SEED)


# Note [reference on the held values]
# A Partial input is split into float addends (shard_full: v - k and k for P(sum)), and
# (v - k) + k is v only up to rounding: the DTensor holds a value one ulp from the sample's.
# An ill-conditioned op turns that ulp into a large error (tan at -1.5706383, a pole, scales
# it by 1 + tan^2 = 4e7: 4.77 off), which says nothing about the rule. So the reference runs on
# the value the DTensor inputs hold, their addends reduced, as every Partial means.
def _held(ref: tuple[tuple, dict], placements: Sequence[Sequence[Placement]],
          mesh_shape: tuple[int, ...], seed: int) -> tuple[tuple, dict]:
    flat, tree = pytree.tree_flatten(ref)
    for i, a, p in _placed(flat, placements):
        if any(isinstance(q, Partial) for q in p) and (a.is_floating_point() or a.is_complex()):
            with torch.no_grad():
                a.copy_(unshard(_pieces(a, p, mesh_shape, seed, i), mesh_shape, p, a.shape))
    return pytree.tree_unflatten(flat, tree)


@dataclass
class Reference:
    """One device's answer to a case, the same on every rank of its world (Note [one
    reference per case])."""

    want_flat: list
    want_tree: Any
    # backward: the differentiable outputs' positions, their cotangents, the gradients of the
    # inputs that require one, and those inputs (the shapes of gradients that are None)
    outs: list[int] = field(default_factory=list)
    cots: list[torch.Tensor] = field(default_factory=list)
    want_g: tuple = ()
    inputs: list[torch.Tensor] = field(default_factory=list)


# Note [one reference per case]
# Every rank of a world runs the same case on its own piece, but the reference (the sample on
# one device, its Partial inputs held as Note [reference on the held values] says, and its
# gradients) depends only on the case: entry, sample, placements, mesh shape, tier and seed.
# A world's ranks share one table of references keyed by the case's index (its seed), so it
# is computed once per case instead of once per rank. Ranks only read it: they take views and
# compare, nothing writes to it.
def reference(e: Entry, s: Sample, placements: tuple[tuple[Placement, ...], ...],
              mesh_shape: tuple[int, ...], backward: bool, seed: int
              ) -> Reference | Mismatch:
    ref_args, ref_kwargs = _held(clone_sample(s), placements, mesh_shape, seed)
    ref_leaves = [t for t in pytree.tree_leaves((ref_args, ref_kwargs))
                  if isinstance(t, torch.Tensor)]
    if backward:
        for t in ref_leaves:
            if t.is_floating_point() or t.is_complex():
                t.requires_grad_(True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            _seed_draws()  # Note [random variants] in opdb_tests/sweep.py
            want = e.opinfo.op(*ref_args, **ref_kwargs)
        except Exception as ex:  # noqa: BLE001 - not the runtime's failure: the sample's
            return f"reference run raises {type(ex).__name__}", reason_of(ex)
    want_flat, want_tree = pytree.tree_flatten(want)
    ref = Reference(want_flat, want_tree)
    if backward:
        gen = torch.Generator().manual_seed(seed)
        ref.outs = [j for j, w in enumerate(want_flat) if isinstance(w, torch.Tensor)
                    and w.requires_grad and w.is_floating_point()]
        ref.cots = [torch.randn(want_flat[j].shape, generator=gen, dtype=want_flat[j].dtype)
                    for j in ref.outs]
        ref.inputs = [t for t in ref_leaves if t.requires_grad]
        if ref.outs:
            ref.want_g = torch.autograd.grad([want_flat[j] for j in ref.outs], ref.inputs,
                                             ref.cots, allow_unused=True)
    ref.want_flat = [w.detach() if isinstance(w, torch.Tensor) else w for w in want_flat]
    ref.inputs = [t.detach() for t in ref.inputs]
    return ref


def _end_to_end(e: Entry, s: Sample, call: AtenCall | None, mesh: Any,
                placements: tuple[tuple[Placement, ...], ...], tier: str,
                seed: int, references: dict | None = None) -> Mismatch | None:
    from dtensor import DTensor

    rtol, atol = tolerances(e.dtype)
    backward = tier == "backward"
    mesh_shape = tuple(mesh.shape)
    ref = references.get(seed) if references is not None else None
    if ref is None:
        ref = reference(e, s, placements, mesh_shape, backward, seed)
        if references is not None:
            references[seed] = ref
    if not isinstance(ref, Reference):
        return ref
    dargs, dkwargs, leaves = _dtensors(s, mesh, placements, backward, seed)
    _seed_draws()  # every rank alike: a sharded draw is one device's
    with fallback_policy("error"), torch.inference_mode(tier == "inference"):
        got = e.opinfo.op(*dargs, **dkwargs)
    got_flat, got_tree = pytree.tree_flatten(got)
    if len(got_flat) != len(ref.want_flat):
        return causes.WRONG_STRUCTURE, f"returned {got_tree}, expected {ref.want_tree}"
    expect_out = predicted(call, placements, mesh_shape)
    d_outs = [g for g in got_flat if isinstance(g, DTensor)]
    if expect_out is not None and len(d_outs) == len(expect_out):
        for j, (g, p) in enumerate(zip(d_outs, expect_out)):
            if tuple(g.placements) != tuple(p):
                return causes.WRONG_PLACEMENT, (f"output {j} is {_fmt([g.placements])}, the "
                                                f"rule predicted {_fmt([p])}")
    fulls = [g.full_tensor() if isinstance(g, DTensor) else g for g in got_flat]
    for j, (g, w) in enumerate(zip(fulls, ref.want_flat)):
        r = _close(g.detach() if isinstance(g, torch.Tensor) else g, w, rtol, atol)
        if r:
            return r[0], f"output {j}: {r[1]}"
    if not backward:
        return None
    return _backward(fulls, ref, leaves, placements, mesh, rtol, atol)


def _backward(fulls: list, ref: Reference, leaves: list,
              placements: Sequence[Sequence[Placement]], mesh: Any, rtol: float,
              atol: float) -> Mismatch | None:
    if not ref.outs:
        return None
    mine = [x for x in leaves if x is not None]
    with fallback_policy("error"):
        got_g = torch.autograd.grad([fulls[j] for j in ref.outs], mine, ref.cots,
                                    allow_unused=True)
    coord = tuple(mesh.get_coordinate())
    grad_placements = [p for p, x in zip(placements, leaves) if x is not None]
    for j, (g, w, x, p) in enumerate(zip(got_g, ref.want_g, ref.inputs, grad_placements)):
        if w is None:
            w = torch.zeros_like(x)
        w = w[local_index(tuple(w.shape), tuple(mesh.shape), replicate_partials(p), coord)]
        if g is None:
            g = torch.zeros_like(w)
        r = _close(g, w, rtol, atol)
        if r:
            return causes.WRONG_GRADIENT, (f"gradient of input {j} ({_fmt([p])}) on rank "
                                           f"{coord}: {r[1]}")
    return None
