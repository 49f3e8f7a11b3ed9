"""A randomized fault campaign: generated programs of collectives on random subgroups, random
faults on random ranks and calls, random schedules. Every run must end within its timeout,
with the faulty rank and call named; every fault-free run must equal a reference computed
without simpg.

    python -m simpg.campaign --programs 200 [--seed 0] [--extra MODULE:ATTR]

``--extra`` adds op kinds from another module (the tests add DTensor redistributes, which
simpg itself may not import). Note [campaign tags]: op ``k`` moves tensors of ``OP_COLS + k``
columns, so each op's shape, printed in simpg's reports, says which op a rank was at.
"""

from __future__ import annotations

import argparse
import importlib
import random
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.distributed as dist

import simpg
from simpg.errors import CollectiveMismatchError, DeadlockError

OP_COLS = 101  # Note [campaign tags]
RUN_TIMEOUT_S = 5.0
HANG_GUARD_S = 60.0
OUTCOMES = ("correct", "named", "wrong result", "wrong error", "silent", "timeout", "hang")


class CampaignFault(RuntimeError):
    """The error a ``raise`` fault throws."""


@dataclass(frozen=True)
class Op:
    kind: str
    group: tuple[int, ...]  # global ranks
    index: int
    params: tuple = ()


@dataclass(frozen=True)
class Fault:
    kind: str  # "raise" or "stall" (at a rank's call-th collective), "skip" or "shape" (an op)
    rank: int
    at: int  # a 1-based call count for raise/stall, an op index for skip/shape


@dataclass(frozen=True)
class Program:
    world_size: int
    groups: tuple[tuple[int, ...], ...]  # created with new_group by every rank, in order
    ops: tuple[Op, ...]
    schedule_seed: int | None
    fault: Fault | None = None

    def describe(self) -> str:
        ops = ", ".join(f"{o.kind}{list(o.group)}" for o in self.ops)
        return (f"world {self.world_size}, seed {self.schedule_seed}, fault {self.fault}: "
                f"[{ops}]")


@dataclass(frozen=True)
class OpKind:
    """How to run one op on a rank and what each rank must get. ``run(op, group, world_size,
    wrong_shape)`` returns the rank's result; ``reference(op, world_size)`` maps each
    member's global rank to its expected result. ``faultable``: skip/shape faults apply."""

    run: Callable[[Op, Any, int, bool], torch.Tensor]
    reference: Callable[[Op, int], dict[int, torch.Tensor]]
    faultable: bool = True
    whole_world: bool = False  # the op needs every rank (e.g. a DTensor mesh)
    params: Callable[[random.Random, int], tuple] = field(default=lambda rng, n: ())


def _input(rank: int, op: Op, rows: int) -> torch.Tensor:
    cols = OP_COLS + op.index
    return torch.arange(rows * cols, dtype=torch.float64).reshape(rows, cols) + 1000 * rank


def _rows(op: Op, wrong_shape: bool) -> int:
    n = len(op.group)
    rows = n if op.kind == "reduce_scatter_single" else 1
    return rows if wrong_shape else 2 * rows


def _run_raw(op: Op, group: Any, world_size: int, wrong_shape: bool) -> torch.Tensor:
    me = dist.get_rank()
    x = _input(me, op, _rows(op, wrong_shape))
    n = len(op.group)
    if op.kind == "all_reduce":
        dist.all_reduce(x, group=group)
        return x
    if op.kind == "broadcast":
        dist.broadcast(x, src=op.group[op.params[0]], group=group)
        return x
    if op.kind == "all_gather_single":
        out = torch.empty(n * x.shape[0], x.shape[1], dtype=x.dtype)
        dist.all_gather_single(out, x, group=group)
        return out
    out = torch.empty(x.shape[0] // n, x.shape[1], dtype=x.dtype)
    dist.reduce_scatter_single(out, x, group=group)
    return out


def _reference_raw(op: Op, world_size: int) -> dict[int, torch.Tensor]:
    inputs = {r: _input(r, op, _rows(op, False)) for r in op.group}
    if op.kind == "all_reduce":
        total = sum(inputs.values())
        return {r: total for r in op.group}  # type: ignore[misc]
    if op.kind == "broadcast":
        return {r: inputs[op.group[op.params[0]]] for r in op.group}
    if op.kind == "all_gather_single":
        cat = torch.cat([inputs[r] for r in op.group])
        return {r: cat for r in op.group}
    pieces = sum(inputs.values()).chunk(len(op.group))  # type: ignore[union-attr]
    return {r: pieces[i] for i, r in enumerate(op.group)}


KINDS: dict[str, OpKind] = {
    "all_reduce": OpKind(_run_raw, _reference_raw),
    "broadcast": OpKind(_run_raw, _reference_raw, params=lambda rng, n: (rng.randrange(n),)),
    "all_gather_single": OpKind(_run_raw, _reference_raw),
    "reduce_scatter_single": OpKind(_run_raw, _reference_raw),
}


def generate(rng: random.Random, kinds: dict[str, OpKind], with_fault: bool) -> Program:
    n = rng.randint(2, 4)
    world = tuple(range(n))
    groups = [world] + [tuple(sorted(rng.sample(world, rng.randint(2, n))))
                        for _ in range(rng.randint(0, 2))]
    ops = []
    for k in range(rng.randint(2, 7)):
        kind = rng.choice(sorted(kinds))
        spec = kinds[kind]
        group = world if spec.whole_world else rng.choice(groups)
        ops.append(Op(kind, group, k, spec.params(rng, len(group))))
    seed = rng.choice([None, rng.randrange(1 << 20)])
    program = Program(n, tuple(groups), tuple(ops), seed)
    if not with_fault:
        return program
    return Program(n, program.groups, program.ops, seed, _fault(rng, program, kinds))


def _fault(rng: random.Random, program: Program, kinds: dict[str, OpKind]) -> Fault:
    faultable = [o for o in program.ops if kinds[o.kind].faultable]
    kind = rng.choice(["raise", "stall"] + (["skip", "shape"] if faultable else []))
    if kind in ("skip", "shape"):
        op = rng.choice(faultable)
        return Fault(kind, rng.choice(op.group), op.index)
    return Fault(kind, rng.randrange(program.world_size), 0)  # call chosen once counted


def _body(program: Program, kinds: dict[str, OpKind]) -> Callable[[], list]:
    def body() -> list:
        me = dist.get_rank()
        handles = {g: (None if len(g) == program.world_size else dist.new_group(list(g)))
                   for g in program.groups}  # every rank creates every group, in one order
        fault = program.fault
        results = []
        for op in program.ops:
            if me not in op.group:
                results.append(None)
                continue
            hit = fault is not None and fault.rank == me and fault.at == op.index
            if hit and fault.kind == "skip":  # type: ignore[union-attr]
                results.append(None)
                continue
            wrong = hit and fault.kind == "shape"  # type: ignore[union-attr]
            results.append(kinds[op.kind].run(op, handles[op.group], program.world_size, wrong))
        return results

    return body


def run_program(program: Program, kinds: dict[str, OpKind],
                calls: dict[int, int] | None = None) -> tuple[str, str]:
    """Run one program; returns (outcome, detail). A fault-free run fills ``calls`` (each
    rank's number of collectives) for choosing a raise/stall fault's call."""
    faults = _simpg_faults(program.fault)
    box: dict[str, Any] = {}

    def call() -> None:
        try:
            with simpg.trace() as trace:
                box["results"] = simpg.run(_body(program, kinds), program.world_size,
                                           timeout=RUN_TIMEOUT_S,
                                           schedule_seed=program.schedule_seed, faults=faults)
            box["trace"] = trace
        except BaseException as e:  # noqa: BLE001 - judged below
            box["error"] = e

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(HANG_GUARD_S)
    if t.is_alive():
        return "hang", "simpg.run did not return"
    error = box.get("error")
    if program.fault is None:
        if error is not None:
            return "wrong error", f"fault-free run raised {type(error).__name__}: {error}"
        if calls is not None:
            for r in range(program.world_size):
                calls[r] = sum(r in rec.ranks for rec in box["trace"].records)
        return _compare(program, kinds, box["results"])
    if error is None:
        return "silent", "the fault went unreported"
    if isinstance(error, DeadlockError) and "timeout (" in str(error):
        return "timeout", str(error)
    return _judge(program.fault, program, error)


def _simpg_faults(fault: Fault | None) -> list:
    if fault is None or fault.kind in ("skip", "shape"):
        return []
    if fault.kind == "raise":
        return [simpg.RaiseAt(fault.rank, fault.at, CampaignFault(f"campaign fault on rank "
                                                                   f"{fault.rank}"))]
    return [simpg.StallAt(fault.rank, fault.at)]


def _compare(program: Program, kinds: dict[str, OpKind], results: list) -> tuple[str, str]:
    for op in program.ops:
        expected = kinds[op.kind].reference(op, program.world_size)
        for r in op.group:
            got = results[r][op.index]
            if not torch.equal(got, expected[r]):
                return "wrong result", f"op {op.index} ({op.kind}) on rank {r}"
    return "correct", ""


def _rank_lines(message: str) -> dict[int, str]:
    lines = {}
    for line in message.splitlines():
        head, _, rest = line.strip().partition(": ")
        if head.startswith("rank ") and head[5:].isdigit():
            lines[int(head[5:])] = rest
    return lines


def _judge(fault: Fault, program: Program, error: BaseException) -> tuple[str, str]:
    """Whether ``error`` names the faulty rank and its call (Note [campaign tags])."""
    msg, notes = str(error), "\n".join(getattr(error, "__notes__", ()))
    detail = f"{type(error).__name__}: {msg}\n{notes}"
    if fault.kind == "raise":
        ok = (isinstance(error, CampaignFault)
              and f"[simpg] raised on rank {fault.rank} of" in notes
              and f"fault injected at call #{fault.at} of rank {fault.rank}" in notes)
        return ("named" if ok else "wrong error"), detail
    lines = _rank_lines(msg)
    mine = lines.get(fault.rank, "")
    if fault.kind == "stall":
        ok = (isinstance(error, DeadlockError)
              and f"stalled by fault injection (call #{fault.at})" in mine)
        return ("named" if ok else "wrong error"), detail
    tag = f", {OP_COLS + fault.at})"
    op = program.ops[fault.at]
    others = [lines.get(r, "") for r in op.group if r != fault.rank and r in lines]
    if fault.kind == "skip":  # the others wait in op k; the faulty rank is elsewhere
        ok = (isinstance(error, (CollectiveMismatchError, DeadlockError))
              and tag not in mine and any(tag in o for o in others))
    else:  # wrong shape: the faulty rank's call is the odd one out in op k's mismatch
        ok = (isinstance(error, CollectiveMismatchError) and tag in mine
              and bool(others) and all(o != mine and o == others[0] for o in others))
    return ("named" if ok else "wrong error"), detail


def campaign(programs: int, seed: int = 0, kinds: dict[str, OpKind] | None = None,
             report: Callable[[str], None] | None = None) -> Counter[str]:
    """Run ``programs`` generated programs, each fault-free then with one fault; returns the
    tally of outcomes. ``report`` receives a line for each run that is not as it should be."""
    kinds = kinds or KINDS
    rng = random.Random(seed)
    tally: Counter[str] = Counter()
    for i in range(programs):
        clean = generate(rng, kinds, with_fault=False)
        calls: dict[int, int] = {}
        outcome, detail = run_program(clean, kinds, calls)
        tally[outcome] += 1
        if outcome != "correct" and report:
            report(f"program {i} ({clean.describe()}): {outcome}: {detail}")
        fault = _fault(rng, clean, kinds)
        if fault.kind in ("raise", "stall"):
            if not calls.get(fault.rank):
                continue  # this rank issues no collective: nothing to fault
            fault = Fault(fault.kind, fault.rank, rng.randint(1, calls[fault.rank]))
        faulty = Program(clean.world_size, clean.groups, clean.ops, clean.schedule_seed, fault)
        outcome, detail = run_program(faulty, kinds)
        tally[outcome] += 1
        if outcome != "named" and report:
            report(f"program {i} ({faulty.describe()}): {outcome}: {detail}")
    return tally


def format_tally(tally: Counter[str]) -> str:
    return ", ".join(f"{k} {tally.get(k, 0)}" for k in OUTCOMES)


def _load(spec: str) -> dict[str, OpKind]:
    module, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module), attr or "EXTRA_KINDS")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simpg.campaign", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--programs", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--extra", action="append", default=[],
                        help="MODULE:ATTR, a dict of more op kinds")
    args = parser.parse_args(argv)
    kinds = dict(KINDS)
    for spec in args.extra:
        kinds.update(_load(spec))
    tally = campaign(args.programs, args.seed, kinds, report=print)
    runs = sum(tally.values())
    print(f"{args.programs} programs, {runs} runs ({', '.join(sorted(kinds))}): "
          f"{format_tally(tally)}")
    bad = runs - tally["correct"] - tally["named"]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
