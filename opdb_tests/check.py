"""Ask about one op: does it have a sharding rule, which strategies does it offer, do they hold.

    .venv/bin/python -m opdb_tests.check cumsum --mesh 2,2
    .venv/bin/python -m opdb_tests.check cumsum --placements 'S(0),R' --mesh 2,2
    .venv/bin/python -m opdb_tests.check aten.cumsum.default --tier sound
    .venv/bin/python -m opdb_tests.check torch.nn.functional.pad --mesh 2

OP is an OpInfo variant (``cumsum``, ``nn.functional.pad.constant``), an OpInfo name with all
its variants (``nn.functional.pad``), an aten overload (``aten.cumsum.default``,
``torch.ops.aten.cumsum.default``) or packet (``aten.cumsum``: each overload), or a Python
callable (``torch.cumsum``, ``torch.Tensor.cumsum``, ``torch.nn.functional.pad``: every
OpInfo that calls it). An aten name runs the OpInfo samples that reach that overload.

For each sample (the first usable one unless ``--sample``/``--samples``) on one mesh it runs
the op-database checks (``opdb_tests.checks``, the ones the sweep runs) for that op alone:

- ``sound``: each strategy the rule offers, checked without threads
  (``dtensor.ops.soundness``). Without placements: every strategy the rule can return. With
  placements: the strategies the dispatcher may pick for inputs laid out so, cheapest
  first (bytes moved to reach the strategy's inputs), the first being the one it picks.
- ``forward`` / ``backward``: the OpInfo's callable on DTensors in one simpg world, compared
  with one device. Without placements: the sweep's base cases (``cases.base_assignments``);
  with placements: those.

``--placements`` gives one word per tensor argument of the sample, in call order (as the
sample line prints them), each word one placement per mesh dim: ``'S(0),R' 'R,R'``. The
reproducer's form ``'S(0),R;R,R'`` (``;`` between tensors) is read too.

Each case prints its verdict: ``ok``, ``FAIL``, or ``XFAIL`` (a failure of a kind
``opdb_tests/expected_failures.py`` lists for that variant and tier). Exit status: 0 every
case holds, 1 some case fails (XFAIL included: the op does not hold there; the report tells
them apart), 2 a usage error (unknown op, placements that do not fit the sample or mesh).
With nothing to run (no OpInfo sample reaches an aten overload), the exit status says
whether each overload asked about has a rule.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import torch

from dtensor.dispatch.general import _written
from dtensor.ops.propagate import Decision, candidates, decide
from dtensor.ops.registry import REGISTRY, TensorSpec
from dtensor.ops.soundness import op_spec
from dtensor.placements import Partial, Placement, PlacementError, Shard, normalize_placements
from opdb_tests import causes, cases
from opdb_tests.cases import AtenCall, Entry, Sample, case_id, fmt_placements
from opdb_tests.checks import Failure, predicted, soundness
from opdb_tests.expectations import expected
from opdb_tests.expected_failures import SKIP
from opdb_tests.sweep import _backward_ok, run_world

TIERS = ("sound", "forward", "backward", "inference")
OK, FAIL, XFAIL = "ok", "FAIL", "XFAIL"
EXPECTED_FILE = "opdb_tests/expected_failures.py"


class CheckArgumentError(ValueError):
    """A question ``check`` cannot ask: an unknown op, placements that do not fit the sample
    or the mesh, a bad mesh or tier. ``argument`` names what was wrong, ``value`` is what was
    given, ``suggestions`` holds close names for an unknown op.

    >>> str(CheckArgumentError("mesh", "2x2", "expected sizes separated by commas"))
    "mesh '2x2': expected sizes separated by commas"
    """

    def __init__(self, argument: str, value: Any, message: str,
                 suggestions: Sequence[str] = ()) -> None:
        names = list(suggestions)
        said = ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else "".join(names)
        hint = f"; did you mean {said}?" if names else ""
        super().__init__(f"{argument} {value!r}: {message}{hint}")
        self.argument, self.value, self.suggestions = argument, value, tuple(suggestions)


# -- what the question names ------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """What a query resolved to: the OpInfo variants to run and, for an aten query, the
    overloads asked about (only samples reaching one of them are run)."""

    query: str
    entries: tuple[Entry, ...]
    overloads: tuple[Any, ...] = ()  # torch._ops.OpOverload


def _aten(name: str, query: str) -> tuple | None:
    """The overloads an ``aten.NAME[.OVERLOAD]`` string names, or None."""
    parts = name.split(".")
    if parts[0] != "aten" or len(parts) not in (2, 3):
        return None
    try:
        packet = getattr(torch.ops.aten, parts[1])
    except (AttributeError, RuntimeError):
        return None
    if len(parts) == 2:
        return tuple(getattr(packet, o) for o in packet.overloads())
    if parts[2] not in packet.overloads():
        raise CheckArgumentError("op", query, f"aten.{parts[1]} has no overload {parts[2]!r} "
                                 f"(it has {', '.join(packet.overloads())})")
    return (getattr(packet, parts[2]),)


def _callable(name: str) -> Any:
    """The object a dotted ``torch.…`` name reaches by attribute lookup (never eval)."""
    parts = name.split(".")
    if parts[0] != "torch" or len(parts) < 2:
        return None
    obj: Any = torch
    for p in parts[1:]:
        obj = getattr(obj, p, None)
        if obj is None:
            return None
    return obj if callable(obj) else None


def suggestions(query: str, n: int = 5) -> list[str]:
    """Close names (OpInfo variants, aten overloads with a rule) for a misspelt op."""
    vocab = sorted({e.key for e in cases.entries()} | {e.opinfo.name for e in cases.entries()}
                   | {str(op) for op in REGISTRY.rules})
    forms = [query]
    for prefix in ("torch.ops.", "torch."):
        if query.startswith(prefix):
            forms.append(query[len(prefix):])
    found: list[str] = []
    for f in forms:
        found += [m for m in difflib.get_close_matches(f, vocab, n=n, cutoff=0.6)
                  if m not in found]
    return found[:n]


def resolve(query: str) -> Target:
    """The OpInfo variants (and aten overloads) a query names; ``CheckArgumentError`` with
    close names when it names none."""
    q = query.strip()
    es = cases.entries()
    exact = [e for e in es if e.key == q] or [e for e in es if e.opinfo.name == q]
    if exact:
        return Target(q, tuple(exact))
    aten = _aten(q[len("torch.ops."):] if q.startswith("torch.ops.") else q, q)
    if aten is not None:
        names = {str(op).split(".")[1] for op in aten}
        return Target(q, tuple(e for e in es if e.opinfo.name in names
                               or getattr(e.opinfo, "aten_name", None) in names), aten)
    fn = _callable(q)
    if fn is not None:
        found = tuple(e for e in es if fn is e.opinfo.op
                      or fn is getattr(e.opinfo, "method_variant", None))
        if found:
            return Target(q, found)
        raise CheckArgumentError("op", q, "no OpInfo in op_db calls it", suggestions(q))
    raise CheckArgumentError("op", q, "not an OpInfo variant, an aten overload "
                             "(aten.NAME.OVERLOAD) or a torch callable", suggestions(q))


# -- arguments --------------------------------------------------------------------------------


def parse_mesh(mesh: int | str | Sequence[int]) -> tuple[int, ...]:
    """``(2, 2)`` from ``"2,2"``, ``2`` or ``(2, 2)``; every size a positive int."""
    if isinstance(mesh, str):
        try:
            sizes = tuple(int(x) for x in mesh.split(","))
        except ValueError:
            raise CheckArgumentError("mesh", mesh, "expected sizes separated by commas, "
                                     "e.g. 4 or 2,2") from None
    elif isinstance(mesh, int):
        sizes = (mesh,)
    else:
        sizes = tuple(mesh)
    if not sizes or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sizes):
        raise CheckArgumentError("mesh", mesh, "expected one or more positive sizes, e.g. 2,2")
    return sizes


def parse_placements(placements: Any) -> tuple[tuple[Placement, ...], ...] | None:
    """Per tensor argument, its placements: from ``"S(0),R;R,R"``, from words
    ``["S(0),R", "R,R"]`` or from placement objects ``[[Shard(0), Replicate()], ...]``."""
    if placements is None:
        return None
    words = [placements] if isinstance(placements, str) else list(placements)
    out: list[tuple[Placement, ...]] = []
    for w in words:
        if isinstance(w, str):
            try:
                out += cases.parse_placements(w) if w.strip() else [()]
            except ValueError as ex:
                msg = str(ex) if "expected" in str(ex) else f"{ex}: expected R, S(d) or P(op)"
                raise CheckArgumentError("placements", w, msg + " per mesh dim, comma-separated, "
                                         "e.g. 'S(0),R'") from None
        else:
            out.append(tuple(cases.parse_placements(p)[0][0] if isinstance(p, str) else p
                             for p in w))
    return tuple(out)


def _short(t: Any) -> str:
    return f"T{tuple(t.shape)}:{str(t.dtype).replace('torch.', '')}"


def fit_placements(placements: Sequence[Sequence[Placement]], tensors: Sequence[Any],
                   mesh_shape: tuple[int, ...], where: str) -> tuple[tuple[Placement, ...], ...]:
    """Check placements against a sample's tensors and the mesh (one per tensor argument,
    one per mesh dim, Shard dims in range, Partial only where the dtype splits exactly);
    return them with negative Shard dims resolved. ``where`` names the sample in errors."""
    given = fmt_placements(placements)
    m = len(mesh_shape)
    if len(placements) != len(tensors):
        example = ";".join(",".join(["S(0)" if t.dim() else "R"] + ["R"] * (m - 1))
                           for t in tensors)
        raise CheckArgumentError(
            "placements", given,
            f"{where} has {len(tensors)} tensor argument(s) "
            f"({', '.join(_short(t) for t in tensors)}) but {len(placements)} placement "
            f"list(s) were given: one per tensor argument (';' or separate words between "
            f"them), each one placement per mesh dim (mesh {mesh_shape} has {m}), e.g. "
            f"{example!r}")
    out = []
    for i, (t, p) in enumerate(zip(tensors, placements)):
        what = f"{where}, tensor argument {i} {_short(t)}"
        if t.dim() == 0 and any(isinstance(x, Shard) for x in p):
            raise CheckArgumentError("placements", given, f"{what} is 0-d: it cannot be "
                                     "sharded (use R or P(op))")
        try:
            norm = normalize_placements(p, t.dim(), m, shape=tuple(t.shape))
        except PlacementError as ex:
            raise CheckArgumentError("placements", given, f"{what}: {ex}") from None
        splits = cases.partial_ops(t)
        bad = [x for x in norm if isinstance(x, Partial) and x.reduce_op not in splits]
        if bad:
            raise CheckArgumentError("placements", given, f"{what}: {bad[0]} cannot hold it "
                                     f"(its dtype splits exactly only into "
                                     f"{list(splits) or 'no Partial'})")
        out.append(norm)
    return tuple(out)


def check_mesh_dims(placements: Sequence[Sequence[Placement]], mesh_shape: tuple[int, ...]
                    ) -> None:
    """Each tensor argument's list has one placement per mesh dim; a list of single
    placements as long as the mesh has dims is most likely one tensor's, split in words."""
    m = len(mesh_shape)
    example = ",".join(["S(0)"] + ["R"] * (m - 1))
    for p in placements:
        if len(p) == m:
            continue
        if m > 1 and len(placements) == m and all(len(q) == 1 for q in placements):
            joined = ",".join(str(q[0]) for q in placements)
            hint = (f"; for one tensor argument laid out {joined} write it as one word, "
                    f"{joined!r} (one word per tensor argument, its placements over the mesh "
                    "dims joined by commas)")
        else:
            hint = f"; e.g. {example!r}"
        raise CheckArgumentError("placements", ",".join(map(str, p)),
                                 f"{len(p)} placement(s) for a {m}-d mesh {mesh_shape}: give "
                                 f"one per mesh dim{hint}")


# -- the report -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One checked case. ``inputs``: per tensor argument, its placements (for ``sound``,
    the aten call's tensor arguments, for the end-to-end tiers the sample's); ``outputs``: per
    output, the placements the rule gives (None where unknown: a composite op, a failure);
    ``cost``: bytes moved to reach the strategy's inputs (``sound`` with placements only)."""

    key: str
    tier: str  # sound, forward, backward, or samples (the OpInfo's generator raised)
    sample: int
    sample_text: str
    mesh: tuple[int, ...]
    inputs: tuple[tuple[Placement, ...], ...] | None
    outputs: tuple[tuple[Placement, ...], ...] | None
    verdict: str  # OK, FAIL or XFAIL
    reason: str = ""
    cause: str = ""  # the kind of failure (opdb_tests.causes)
    rerun: str = ""  # the reproducer command of a failure
    cost: int | None = None
    picked: bool = False  # the strategy the dispatcher picks for these placements

    @property
    def label(self) -> str:
        if self.tier == "samples":
            return f"{self.key}[samples]"
        outs = fmt_placements(self.outputs) if self.outputs is not None else ""
        return case_id(self.key, self.inputs or [], self.mesh, outs)


@dataclass(frozen=True)
class CheckReport:
    """What ``check`` found. ``rules``: each aten overload reached or asked about -> the
    qualified name of its rule, or None where it has none; ``notes``: what did not apply
    and why. ``exit_status``: 0 every case holds, 1 otherwise (see the module doc)."""

    query: str
    mesh: tuple[int, ...]
    placements: tuple[tuple[Placement, ...], ...] | None
    keys: tuple[str, ...]
    rules: Mapping[str, str | None]
    cases: tuple[Case, ...]
    notes: tuple[str, ...] = ()
    text_lines: tuple[str, ...] = field(default=(), repr=False)

    def counts(self) -> dict[str, int]:
        """Cases per verdict: ``{'ok': 10, 'FAIL': 0, 'XFAIL': 2}``."""
        return {v: sum(c.verdict == v for c in self.cases) for v in (OK, FAIL, XFAIL)}

    @property
    def failures(self) -> tuple[Case, ...]:
        return tuple(c for c in self.cases if c.verdict != OK)

    @property
    def ok(self) -> bool:
        if self.cases:
            return not self.failures
        return all(r is not None for r in self.rules.values())

    @property
    def exit_status(self) -> int:
        return 0 if self.ok else 1

    def summary(self) -> str:
        line = summary_line(self.cases)
        missing = [op for op, r in self.rules.items() if r is None]
        if not self.cases and self.rules:
            line += (": nothing to run; " + (f"no sharding rule for {', '.join(missing)}"
                                             if missing else "every overload has a rule"))
        elif not self.cases:
            line += ": nothing to run (see the notes)"
        return line

    def text(self) -> str:
        return "\n".join([*self.text_lines, self.summary()])


def summary_line(cases: Sequence[Case]) -> str:
    """``12 case(s): 10 ok, 0 FAIL, 2 XFAIL (expected: ...)``."""
    n = {v: sum(c.verdict == v for c in cases) for v in (OK, FAIL, XFAIL)}
    return (f"{len(cases)} case(s): {n[OK]} ok, {n[FAIL]} FAIL, {n[XFAIL]} XFAIL "
            f"(expected: listed in {EXPECTED_FILE})")


# -- running ----------------------------------------------------------------------------------


def _rule_name(op: Any) -> str | None:
    rule = REGISTRY.get(op)
    return None if rule is None else f"{rule.__module__}.{rule.__qualname__}"


def _verdict(key: str, tier: str, cause: str) -> str:
    listed = expected(key, tier)
    return XFAIL if listed is not None and cause in listed else FAIL


def _from_failure(f: Failure, inputs: tuple[tuple[Placement, ...], ...] | None,
                  outputs: tuple[tuple[Placement, ...], ...] | None,
                  cost: int | None = None) -> Case:
    rerun = cases.repro_command(f.tier, f.key, f.sample, f.mesh_shape, f.placements)
    return Case(f.key, f.tier, f.sample, f.sample_text, f.mesh_shape, inputs, outputs,
                _verdict(f.key, f.tier, f.cause), f.reason, f.cause, rerun, cost)


def _decision(call: AtenCall, aten_placements: Sequence[tuple[Placement, ...]],
              mesh_shape: tuple[int, ...]) -> Decision:
    """The dispatcher's decision for the call with its tensors laid out so (as
    ``checks.predicted`` builds it; written arguments keep their placements)."""
    spec = op_spec(call.func, call.args, call.kwargs, mesh_shape)
    by_aten = iter(aten_placements)

    def place(x: Any) -> Any:
        if isinstance(x, TensorSpec):
            return dataclasses.replace(x, placements=next(by_aten))
        return tuple(place(v) for v in x) if isinstance(x, tuple) else x

    spec = dataclasses.replace(spec, args=tuple(place(a) for a in spec.args),
                               kwargs=tuple((k, place(v)) for k, v in spec.kwargs))
    return decide(spec, _written(spec.op, spec))


def strategy_cases(e: Entry, s: Sample, call: AtenCall, mesh: tuple[int, ...],
                   placements: tuple | None) -> list[Case]:
    """Each strategy offered (every one, or those for ``placements``), with its verdict from
    ``checks.soundness`` (which checks every strategy the rule can return)."""
    failures = soundness(e, s, call, mesh)[0]
    whole = [f for f in failures if f.label == case_id(e.key, [], mesh)]
    if whole:  # no rule, or the rule raises: a failure of every strategy
        return [_from_failure(whole[0], None, None)]
    if placements is None:
        offered = [(c, None) for c in candidates(op_spec(call.func, call.args, call.kwargs,
                                                         mesh), dispatchable_only=False)]
    else:
        aten_pl = [placements[i] for i in call.tensor_index]
        try:
            offered = [(c, c.cost) for c in _decision(call, aten_pl, mesh).candidates]
        except Exception as ex:  # noqa: BLE001 - no strategy fits: the sound tier's answer
            f = Failure("sound", e.key, s.index, s.describe(), mesh, placements,
                        causes.reason_of(ex), "", case_id(e.key, aten_pl, mesh),
                        causes.of_exception(ex))
            return [_from_failure(f, tuple(aten_pl), None)]
    by_label = {f.label: f for f in failures}
    out = []
    for c, cost in offered:
        label = case_id(e.key, c.inputs, mesh, fmt_placements(c.outputs))
        f = by_label.get(label)
        case = (_from_failure(f, c.inputs, c.outputs, cost) if f is not None else
                Case(e.key, "sound", s.index, s.describe(), mesh, c.inputs, c.outputs, OK,
                     cost=cost))
        out.append(dataclasses.replace(case, picked=placements is not None and not out))
    return out


def end_to_end_cases(e: Entry, s: Sample, call: AtenCall | None, mesh: tuple[int, ...],
                     placements: tuple | None, tiers: Sequence[str]) -> list[Case]:
    """The end-to-end cases of a sample (its base assignments, or ``placements``) in one
    simpg world (``sweep.run_world``), with the output placements the rule predicts."""
    assignments = [placements] if placements is not None else cases.base_assignments(s.tensors(),
                                                                                mesh)
    todo = [(e, s, call, a, t) for a in assignments for t in tiers]
    out = []
    for (_, _, _, a, t), f in zip(todo, run_world(mesh, todo)):
        try:
            outs = predicted(call, a, mesh)
        except Exception:  # noqa: BLE001 - no prediction (no strategy): the case says why
            outs = None
        out.append(_from_failure(f, a, outs) if f is not None else
                   Case(e.key, t, s.index, s.describe(), mesh, a, outs, OK))
    return out


@dataclass
class _Run:
    """What ``check`` accumulates: cases, rules met, notes, and the printed lines."""

    cases: list[Case] = field(default_factory=list)
    rules: dict[str, str | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        self.notes.append(text)
        self.lines.append(f"  note: {text}")

    def show(self, cases: Iterable[Case]) -> None:
        for c in cases:
            self.cases.append(c)
            self.lines.append(format_case(c))


def format_case(c: Case) -> str:
    """One line per case; a failure adds its reason, kind and reproducer."""
    extra = ""
    if c.cost is not None:
        extra = f"  ({'picked, ' if c.picked else ''}{c.cost} bytes moved)"
    line = f"  {c.tier:<9} {c.label:<60} {c.verdict}{extra}"
    if c.verdict == OK:
        return line
    # a generator's traceback is long: its last line names the error
    reason = c.reason.strip().splitlines()[-1] if c.tier == "samples" else c.reason
    return f"{line}\n      reason: {reason}\n      kind: {c.cause}\n      rerun: {c.rerun}"


def samples_of(e: Entry, sample: int | None, n_samples: int | None) -> list[Sample]:
    if sample is None:
        return list(cases.samples(e, n_samples))
    try:
        return [cases.sample(e, sample)]
    except KeyError:
        usable = [s.index for s in cases.samples(e, 20)]
        raise CheckArgumentError("sample", sample, f"{e.key} has no usable sample #{sample} "
                                 f"(usable: {usable}{'...' if len(usable) == 20 else ''})"
                                 ) from None


def _plan_entry(run: _Run, e: Entry, overloads: tuple[Any, ...], mesh: tuple[int, ...],
                placements: tuple | None, sample: int | None, n_samples: int | None
                ) -> list[tuple[Sample, tuple | None]]:
    """The samples to run and their placements, checked before any case runs (so that an
    argument error is raised before any output); a generator that raises is a case."""
    try:
        ss = samples_of(e, sample, n_samples)
    except cases.SampleGenerationError as ex:
        first = ex.traceback.strip().rsplit("\n", 1)[-1]
        f = Failure("samples", e.key, -1, "(none)", (), None, ex.traceback, "",
                    f"{e.key}[samples]", f"sample generation raises {first.split(':', 1)[0]}")
        run.lines.append(f"{e.key}: its OpInfo's sample generator raises")
        run.show([_from_failure(f, None, None)])
        return []
    if not ss:
        run.note(f"{e.key} has no usable sample: {cases.no_case_reason(e)}")
    if e.key in SKIP:
        run.note(f"{e.key} is skipped by the sweep: {SKIP[e.key]}")
    out = []
    for s in ss:
        if overloads and not any(op in overloads for op in cases.record_aten(e, s)):
            run.note(f"{e.key} sample #{s.index} does not reach "
                     f"{', '.join(map(str, overloads))}: skipped")
            continue
        where = f"{e.key} sample #{s.index} {s.describe()}"
        out.append((s, None if placements is None
                    else fit_placements(placements, s.tensors(), mesh, where)))
    return out


def _run_sample(run: _Run, e: Entry, s: Sample, mesh: tuple[int, ...], pl: tuple | None,
                tiers: Sequence[str]) -> None:
    reached = list(dict.fromkeys(cases.record_aten(e, s)))
    call = cases.aten_call(e, s)
    run.lines.append(f"{e.key} (OpInfo variant, {str(e.dtype).replace('torch.', '')}) "
                     f"sample #{s.index} {s.describe()} on mesh {mesh}")
    for op in reached:
        run.rules[str(op)] = _rule_name(op)
        run.lines.append(f"  aten: {op}: " + (f"rule {run.rules[str(op)]}"
                                              if run.rules[str(op)] else "NO RULE"))
    random = any(torch.Tag.nondeterministic_seeded in getattr(op, "tags", ()) for op in reached)
    if "sound" in tiers:
        if call is None:
            run.note("sound: does not apply (the sample is not one aten call on its own "
                     "tensors: a composite op, checked end to end only)")
        elif random:
            run.note("sound: does not apply to a random op (Note [random variants] in "
                     "opdb_tests/sweep.py); checked end to end")
        else:
            run.show(strategy_cases(e, s, call, mesh, pl))
    e2e = [t for t in ("forward", "backward", "inference") if t in tiers]
    if "backward" in e2e and not _backward_ok(e):
        e2e.remove("backward")
        run.note(f"backward: {e.key} has no autograd at a float dtype")
    if e2e:
        run.show(end_to_end_cases(e, s, call, mesh, pl, e2e))


def check(op: str, placements: Any = None, mesh: int | str | Sequence[int] = (2, 2), *,
          sample: int | None = None, samples: int | None = 1,
          tiers: Sequence[str] = TIERS) -> CheckReport:
    """Check one op's sharding on one mesh: its rule, the strategies offered for its OpInfo
    samples (or for ``placements``, one list per tensor argument of the sample), soundness
    and end to end forward/backward on simpg. ``sample`` picks one sample by index, else the
    first ``samples`` usable ones (None: all). Raises ``CheckArgumentError`` for a question
    it cannot ask.

    >>> r = check("cumsum", placements=["S(0),S(2)"], mesh=(2, 2))
    >>> r.exit_status, r.counts()["FAIL"], sorted({c.tier for c in r.cases})
    (0, 0, ['backward', 'forward', 'inference', 'sound'])
    >>> r.rules
    {'aten.cumsum.default': 'dtensor.ops...cumsum'}
    >>> first = r.cases[0]     # the strategy the dispatcher picks for these inputs
    >>> first.picked, first.inputs, first.verdict
    (True, ((Shard(dim=1), Shard(dim=2)),), 'ok')
    >>> print(r.text())                                               # doctest: +SKIP
    """
    target = resolve(op)
    mesh_shape = parse_mesh(mesh)
    bad = [t for t in tiers if t not in TIERS]
    if bad or not tiers:
        raise CheckArgumentError("tier", bad[0] if bad else tiers, f"expected some of {TIERS}")
    pl = parse_placements(placements)
    if pl is not None:  # against the mesh now; against each sample's tensors when it runs
        check_mesh_dims(pl, mesh_shape)
    run = _Run()
    for o in target.overloads:
        run.rules[str(o)] = _rule_name(o)
    if target.overloads:
        run.lines.append("asked: " + "; ".join(
            f"{o}: " + (f"rule {run.rules[str(o)]}" if run.rules[str(o)] else "NO RULE")
            for o in target.overloads))
        if not target.entries:
            run.note(f"no OpInfo is named after {target.query}: nothing to run")
    plan = [(e, s, p) for e in target.entries
            for s, p in _plan_entry(run, e, target.overloads, mesh_shape, pl, sample, samples)]
    for e, s, p in plan:
        _run_sample(run, e, s, mesh_shape, p, tiers)
    return CheckReport(target.query, mesh_shape, pl, tuple(e.key for e in target.entries),
                       dict(run.rules), tuple(run.cases), tuple(run.notes), tuple(run.lines))


# -- the command line -------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m opdb_tests.check", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("op", help="cumsum, nn.functional.pad.constant, aten.cumsum.default, "
                    "torch.cumsum, ...")
    ap.add_argument("--placements", nargs="+", default=None, metavar="P",
                    help="per tensor argument, one placement per mesh dim: 'S(0),R' 'R,R'")
    ap.add_argument("--mesh", default="2,2", help="mesh shape, e.g. 4 or 2,2 (default 2,2)")
    pick = ap.add_mutually_exclusive_group()
    pick.add_argument("--sample", type=int, default=None, help="one sample, by its index")
    pick.add_argument("--samples", type=int, default=1,
                      help="the first N usable samples (default 1; 0: all)")
    ap.add_argument("--tier", action="append", choices=TIERS, default=None,
                    help="only this tier (repeatable; default all)")
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # op_db samples warn (degrees of freedom...)
            report = check(args.op, args.placements, args.mesh, sample=args.sample,
                           samples=args.samples or None, tiers=tuple(args.tier or TIERS))
    except CheckArgumentError as ex:
        print(f"{ap.prog}: error: {ex}", file=sys.stderr)
        return 2
    print(report.text())
    return report.exit_status


if __name__ == "__main__":
    sys.exit(main())
