"""What the op-database tests run: entries (one per OpInfo variant), samples, aten mapping,
meshes, placements, tolerances, and the text of a case (ids and reproducer commands).

An *entry* is one OpInfo variant tested at one dtype (float32 where the op supports it,
else float64, else its first supported dtype). Its samples are the OpInfo's own, at their
native sizes: uneven shards are the normal case. ``aten_call`` runs a sample once under a
``TorchDispatchMode``; a sample whose call reaches exactly one aten op, taking the sample's
own tensors, is testable at the rule level (soundness tier); every entry is testable end to
end.

>>> e = entry("add")                                           # doctest: +SKIP
>>> s = samples(e)[0]; aten_call(e, s).func                    # doctest: +SKIP
<OpOverload(op='aten.add', overload='Tensor')>
"""

from __future__ import annotations

import functools
import itertools
import shlex
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence, TypeVar

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from dtensor.placements import Partial, Placement, Replicate, Shard

T = TypeVar("T")

# -- entries ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One OpInfo variant at one dtype. ``key`` is what ids, the expected-failure list and the
    coverage matrix use: ``name`` or ``name.variant``."""

    key: str
    index: int  # position in op_db
    dtype: torch.dtype

    @property
    def opinfo(self) -> Any:
        return op_db()[self.index]

    @property
    def family(self) -> str:
        """The OpInfo's own class (UnaryUfuncInfo, ReductionOpInfo, ...) as a family name."""
        name = type(self.opinfo).__name__
        return name[:-4] if name.endswith("Info") and name != "OpInfo" else "Op"


@functools.lru_cache(maxsize=1)
def op_db() -> list:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.testing._internal.common_methods_invocations import op_db as db
    return list(db)


def _key(op: Any) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def _dtype(op: Any) -> torch.dtype | None:
    dtypes = op.supported_dtypes("cpu")
    for d in (torch.float32, torch.float64):
        if d in dtypes:
            return d
    return sorted(dtypes, key=str)[0] if dtypes else None


@functools.lru_cache(maxsize=1)
def entries() -> tuple[Entry, ...]:
    """Every OpInfo variant with a CPU dtype, in op_db order (keys are unique)."""
    out, seen = [], set()
    for i, op in enumerate(op_db()):
        dtype, key = _dtype(op), _key(op)
        if dtype is None or key in seen:
            continue
        seen.add(key)
        out.append(Entry(key, i, dtype))
    return tuple(out)


def entry(key: str) -> Entry:
    for e in entries():
        if e.key == key:
            return e
    raise KeyError(f"no OpInfo variant {key!r} in op_db (keys look like 'add' or "
                   f"'nn.functional.pad.constant')")


# -- samples ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One OpInfo sample: ``op.op(*args, **kwargs)``; ``index`` is its position among the
    OpInfo's samples (what a reproducer names)."""

    index: int
    args: tuple
    kwargs: dict

    def tensors(self) -> list[torch.Tensor]:
        return [t for t in pytree.tree_leaves((self.args, self.kwargs))
                if isinstance(t, torch.Tensor)]

    def describe(self) -> str:
        def short(x: Any) -> str:
            if isinstance(x, torch.Tensor):
                return f"T{tuple(x.shape)}:{str(x.dtype).replace('torch.', '')}"
            if isinstance(x, (list, tuple)):
                return "[" + ", ".join(short(v) for v in x) + "]"
            return repr(x)

        parts = [short(a) for a in self.args]
        parts += [f"{k}={short(v)}" for k, v in self.kwargs.items()]
        return "(" + ", ".join(parts) + ")"


def _plain(t: torch.Tensor) -> bool:
    return (type(t) is torch.Tensor and t.layout == torch.strided and t.device.type == "cpu"
            and not t.is_quantized and not t.is_nested)


class SampleGenerationError(RuntimeError):
    """An OpInfo's ``sample_inputs`` raised: a failure of the entry (not "no samples");
    ``traceback`` is the generator's whole traceback."""

    def __init__(self, key: str, traceback: str) -> None:
        super().__init__(f"{key}: sample generation raises\n{traceback}")
        self.key, self.traceback = key, traceback


def _generate(e: Entry) -> Iterator[tuple[int, Any]]:
    try:
        gen = e.opinfo.sample_inputs("cpu", e.dtype, requires_grad=False)
        yield from enumerate(gen)
    except Exception as ex:  # noqa: BLE001 - reported whole, as the entry's failure
        from opdb_tests.causes import with_traceback

        raise SampleGenerationError(e.key, with_traceback(ex)) from ex


# Note [samples on a shallow stack]
# torch's sample_inputs looks for the unittest method running it with ``inspect.stack()``
# (twice per call: extract_test_fn), and every sample it yields reseeds through
# ``torch.manual_seed``, which stores ``traceback.format_stack()`` for the lazy CUDA, XPU and
# MTIA seeds. Both cost in proportion to the caller's stack, and under pytest and hypothesis
# that stack is deep: a sixth of a test_op run went to them. A fresh thread has a stack of a
# few frames, so samples are generated on one, the caller waiting: no test method is found in
# either case (the samples are the same), the RNG is the process's one generator, and grad
# mode starts enabled in a new thread as it is here.
def _on_shallow_stack(fn: Callable[[], T]) -> T:
    box: dict[str, Any] = {}

    def body() -> None:
        try:
            box["value"] = fn()
        except BaseException as ex:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = ex

    t = threading.Thread(target=body, name="opdb-samples")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _unusable(leaves: list) -> str | None:
    """Why a sample cannot be a case, or None if it can."""
    tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
    if not tensors:
        return "no tensor argument (a factory: nothing to shard)"
    odd = sorted({str(t.layout).replace("torch.", "") if t.layout != torch.strided
                  else type(t).__name__ for t in tensors if not _plain(t)})
    return f"non-dense tensors ({', '.join(odd)}): only plain strided ones are sharded" if odd \
        else None


@functools.lru_cache(maxsize=2048)
def samples(e: Entry, limit: int | None = None) -> tuple[Sample, ...]:
    """The entry's samples (the first ``limit``) whose tensors are plain dense CPU tensors
    with at least one tensor in the call. Raises ``SampleGenerationError`` if the OpInfo's
    generator raises before ``limit`` usable samples."""
    def generate() -> tuple[Sample, ...]:
        out: list[Sample] = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.manual_seed(0)
            for i, s in _generate(e):
                args = (s.input, *s.args)
                if _unusable(pytree.tree_leaves((args, s.kwargs))) is None:
                    out.append(Sample(i, args, dict(s.kwargs)))
                if limit is not None and len(out) >= limit:
                    break
        return tuple(out)

    return _on_shallow_stack(generate)  # Note [samples on a shallow stack]


def no_case_reason(e: Entry) -> str:
    """Why an entry has no usable sample: the distinct reasons over all its samples."""
    def generate() -> dict[str, None]:
        why: dict[str, None] = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.manual_seed(0)
            for _, s in _generate(e):
                r = _unusable(pytree.tree_leaves(((s.input, *s.args), s.kwargs)))
                why[r or "usable"] = None
        return why

    why = _on_shallow_stack(generate)  # Note [samples on a shallow stack]
    return "; ".join(why) if why else "the OpInfo yields no sample on CPU"


def sample(e: Entry, index: int) -> Sample:
    for s in samples(e):
        if s.index == index:
            return s
    raise KeyError(f"{e.key} has no usable sample #{index}")


def clone_sample(s: Sample) -> tuple[tuple, dict]:
    """Fresh copies of the sample's tensors (an op may write its inputs)."""
    return pytree.tree_map_only(torch.Tensor, lambda t: t.detach().clone(), (s.args, s.kwargs))


# -- aten mapping ----------------------------------------------------------------------------


@dataclass(frozen=True)
class AtenCall:
    func: Any  # OpOverload
    args: tuple
    kwargs: dict
    tensor_index: tuple[int, ...]  # for each aten tensor argument: its index in Sample.tensors()


class _Record(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[Any, tuple, dict]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        self.calls.append((func, args, kwargs or {}))
        return func(*args, **(kwargs or {}))


def record_aten(e: Entry, s: Sample) -> list[Any]:
    """The aten overloads one run of the sample dispatches to, in call order."""
    return [c[0] for c in _record(e, s)[0]]


def _record(e: Entry, s: Sample) -> tuple[list, tuple, dict]:
    args, kwargs = clone_sample(s)
    mode = _Record()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with mode:
                e.opinfo.op(*args, **kwargs)
        except Exception:  # noqa: BLE001 - a sample that fails on one device is no rule-level case
            return [], args, kwargs
    return mode.calls, args, kwargs


def aten_call(e: Entry, s: Sample) -> AtenCall | None:
    """The single aten call the sample makes on its own tensors, or None (composite)."""
    calls, args, kwargs = _record(e, s)
    if len(calls) != 1:
        return None
    func, fargs, fkwargs = calls[0]
    ids = {id(t): i for i, t in enumerate(pytree.tree_leaves((args, kwargs)))
           if isinstance(t, torch.Tensor)}
    order = {id(t): k for k, t in enumerate(t for t in pytree.tree_leaves((args, kwargs))
                                            if isinstance(t, torch.Tensor))}
    used = [t for t in pytree.tree_leaves((fargs, fkwargs)) if isinstance(t, torch.Tensor)]
    if not used or any(id(t) not in ids for t in used):
        return None  # the aten op sees tensors the Python wrapper made
    if not isinstance(func, torch._ops.OpOverload):
        return None
    # swap the recorded tensors for the sample's originals, by position
    originals = {id(t): o for t, o in zip(
        [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)],
        s.tensors())}
    fargs, fkwargs = pytree.tree_map_only(torch.Tensor, lambda t: originals[id(t)],
                                          (tuple(fargs), dict(fkwargs)))
    return AtenCall(func, fargs, fkwargs, tuple(order[id(t)] for t in used))


# -- meshes and placements -------------------------------------------------------------------

MESHES_1D: tuple[tuple[int, ...], ...] = tuple((n,) for n in range(1, 9))
MESHES_2D: tuple[tuple[int, ...], ...] = tuple(
    (a, b) for a in range(1, 5) for b in range(1, 5) if a * b <= 8)
MESHES = MESHES_1D + MESHES_2D


def size(mesh_shape: Sequence[int]) -> int:
    n = 1
    for s in mesh_shape:
        n *= s
    return n


def partial_ops(t: torch.Tensor) -> tuple[str, ...]:
    """Partial reductions a tensor's value can be split into exactly (see shard_full)."""
    if t.dtype == torch.bool:
        return ()
    if t.is_complex():
        return ("sum",)
    return ("sum", "max")


def placement_options(t: torch.Tensor) -> list[Placement]:
    """What one tensor argument may hold on one mesh dim: Replicate, Shard on each dim,
    Partial where its dtype allows it."""
    return ([Replicate()] + [Shard(d) for d in range(t.dim())]
            + [Partial(k) for k in partial_ops(t)])


def one_partial_family(ps: tuple[Placement, ...]) -> tuple[Placement, ...]:
    """A tensor's Partials over several mesh dims must reduce alike (Note [Mixing Partial
    ops] in dtensor.placements): later ones take the first one's reduce op."""
    first = next((p for p in ps if isinstance(p, Partial)), None)
    return tuple(first if isinstance(p, Partial) else p for p in ps)


def kind(mesh_shape: Sequence[int], tensors: Sequence[torch.Tensor],
         placements: Sequence[Sequence[Placement]]) -> str:
    """The coverage column of a case: ``2-D`` for a 2-D mesh; else ``P`` if any input is
    Partial, ``S~`` if some shard is uneven, ``S`` if sharded evenly, ``R`` otherwise."""
    if len(mesh_shape) > 1:
        return "2-D"
    n = mesh_shape[0]
    flat = [(t, p[0]) for t, p in zip(tensors, placements)]
    if any(isinstance(p, Partial) for _, p in flat):
        return "P"
    shards = [(t, p) for t, p in flat if isinstance(p, Shard)]
    if not shards:
        return "R"
    return "S~" if any(t.shape[p.dim] % n for t, p in shards) else "S"


KINDS = ("R", "S", "S~", "P", "2-D")


def base_assignments(tensors: Sequence[torch.Tensor], mesh_shape: Sequence[int]
                     ) -> list[tuple[tuple[Placement, ...], ...]]:
    """The fixed end-to-end cases of a sample on a mesh: all Replicate; every tensor sharded
    on its d-th dim (d over the largest rank); the first tensor Partial (sum), then all; on
    a 2-D mesh the first and last dims sharded over the two mesh dims."""
    m = len(mesh_shape)
    out: list[tuple[tuple[Placement, ...], ...]] = []

    def add(per_tensor: Sequence[Sequence[Placement]]) -> None:
        a = tuple(tuple(p) for p in per_tensor)
        if a not in out:
            out.append(a)

    add([[Replicate()] * m for _ in tensors])
    rank = max(t.dim() for t in tensors)
    if m == 1:
        for d in range(rank):
            add([[Shard(t.dim() - rank + d) if t.dim() - rank + d >= 0 else Replicate()]
                 for t in tensors])
        if partial_ops(tensors[0]):
            add([[Partial("sum")]] + [[Replicate()] for _ in tensors[1:]])
        if all(partial_ops(t) for t in tensors):
            add([[Partial("sum")] for _ in tensors])
    else:
        add([[Shard(0) if t.dim() else Replicate(), Shard(t.dim() - 1) if t.dim() else
              Replicate()] + [Replicate()] * (m - 2) for t in tensors])
        add([[Replicate(), Shard(0) if t.dim() else Replicate()] + [Replicate()] * (m - 2)
             for t in tensors])
        if partial_ops(tensors[0]):
            add([[Partial("sum"), Shard(0) if tensors[0].dim() else Replicate()]]
                + [[Replicate(), Replicate()] for _ in tensors[1:]])
    return out


# -- tolerances ------------------------------------------------------------------------------

# Sharded reductions sum in another order, and Partial inputs are split into integer addends
# that cancel (x + k - k): looser than torch.testing's defaults, scaled per dtype.
_TOL = {torch.float16: (1e-2, 1e-2), torch.bfloat16: (5e-2, 5e-2), torch.float32: (1e-4, 1e-4),
        torch.complex64: (1e-4, 1e-4), torch.float64: (1e-7, 1e-7),
        torch.complex128: (1e-7, 1e-7)}


def tolerances(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) for comparing results of this dtype; integers and bool are exact."""
    return _TOL.get(dtype, (0.0, 0.0))


# -- text ------------------------------------------------------------------------------------


def fmt_placements(per_tensor: Sequence[Sequence[Placement]]) -> str:
    return ";".join(",".join(str(p) for p in ps) for ps in per_tensor)


def parse_placements(text: str) -> tuple[tuple[Placement, ...], ...]:
    """Inverse of ``fmt_placements``: ``"S(0),R;P(sum),R"``."""
    def one(tok: str) -> Placement:
        tok = tok.strip()
        if tok == "R":
            return Replicate()
        if tok.startswith("S(") and tok.endswith(")"):
            return Shard(int(tok[2:-1]))
        if tok.startswith("P(") and tok.endswith(")"):
            return Partial(tok[2:-1])
        raise ValueError(f"placement {tok!r}: expected R, S(d) or P(op)")

    if not text:
        return ()
    return tuple(tuple(one(t) for t in part.split(",")) for part in text.split(";"))


def case_id(key: str, per_tensor: Sequence[Sequence[Placement]], mesh_shape: Sequence[int],
            out: str = "") -> str:
    """``mm[S(0),R;R,R->S(0),R]@mesh(2,2)``."""
    arrow = f"->{out}" if out else ""
    return f"{key}[{fmt_placements(per_tensor)}{arrow}]@mesh{tuple(mesh_shape)}".replace(
        ",)", ")").replace(" ", "")


def repro_command(tier: str, key: str, sample_index: int, mesh_shape: Sequence[int],
                  per_tensor: Sequence[Sequence[Placement]] | None = None) -> str:
    cmd = [".venv/bin/python", "-m", "opdb_tests.repro", tier, key]
    if tier == "samples":  # sample generation: no sample, no mesh
        return " ".join(shlex.quote(c) for c in cmd)
    cmd += ["--sample", str(sample_index), "--mesh", ",".join(map(str, mesh_shape))]
    if per_tensor is not None:
        cmd += ["--placements", fmt_placements(per_tensor)]
    return " ".join(shlex.quote(c) for c in cmd)


def product_assignments(tensors: Sequence[torch.Tensor], mesh_shape: Sequence[int]
                        ) -> Iterator[tuple[tuple[Placement, ...], ...]]:
    """Every placement assignment (exhaustive; only for small cases)."""
    per_tensor = [list(itertools.product(placement_options(t), repeat=len(mesh_shape)))
                  for t in tensors]
    return itertools.product(*per_tensor)
