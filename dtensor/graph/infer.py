"""Search: one option per unit minimising the bytes communicated (Note [graph sharding
problem] in ``dtensor.graph.problem``).

Note [graph sharding search]
- Small problems are solved exactly: depth-first branch and bound over the units, each
  input placed just before its first consumer so that every edge is priced as soon as both
  ends are chosen; the bound is the bytes so far (costs are never negative), the first upper
  bound the heuristic's answer. It gives up after ``node_budget`` search nodes and then says
  the answer is not proven exact.
- Large problems get a heuristic in three stages:
  1. greedy: topological order, each unit taking the option cheapest given its chosen
     producers; an unchosen input takes what its first consumer asks (so parameters follow
     their first use, as eager propagation would have them follow their annotation);
  2. parameter groups: inputs whose names differ only in layer numbers
     (``layers.*.attention.wq.weight``) move together; each group tries each of its layouts
     with the greedy pass redoing the rest, and a move is kept when the total drops. This is
     what finds tensor parallelism: a column-sharded weight pays off only once the whole
     block follows it, which no single-unit move can see;
  3. local improvement: each unit in topological order, then in reverse, takes the option
     cheapest given all its neighbours (producers, consumers, output ties), until a sweep
     changes nothing.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from dtensor.graph.problem import Problem, Unit
from dtensor.placements import Partial

EPS = 1e-9
AUTO_EXACT_UNITS = 16  # "auto" proves optimality up to this many units with a choice


@dataclass
class Solution:
    choice: list[int]
    cost: float
    exact: bool
    method: str
    seconds: float = 0.0
    stage: dict[int, str] = field(default_factory=dict)  # unit -> the stage that last set it


def solve(problem: Problem, *, method: str = "auto", node_budget: int = 20_000,
          max_rounds: int = 3) -> Solution:
    """``method``: "auto" (exact when small enough, else the heuristic), "exact",
    "heuristic" or "greedy" (stage 1 only: eager-like, for comparison)."""
    if method not in ("auto", "exact", "heuristic", "greedy"):
        raise ValueError(f"solve(method={method!r}): expected auto, exact, heuristic or greedy")
    start = time.perf_counter()
    stage: dict[int, str] = {}
    choice = greedy(problem, {}, stage)
    if method != "greedy":
        choice = _group_descent(problem, choice, stage, max_rounds)
        choice = improve(problem, choice, stage)
    cost = problem.cost(choice)
    sol = Solution(choice, cost, False, method if method != "auto" else "heuristic")
    free = [u for u in problem.units if len(u.options) > 1]
    if method == "exact" or (method == "auto" and len(free) <= AUTO_EXACT_UNITS):
        exact = branch_and_bound(problem, choice, cost, node_budget)
        if exact is not None:
            best, best_cost, proven = exact
            if best_cost < cost - EPS:
                for u in problem.units:
                    if best[u.id] != choice[u.id]:
                        stage[u.id] = "exact search"
                sol = Solution(best, best_cost, proven, "exact")
            else:
                sol = Solution(choice, cost, proven, "exact" if proven else sol.method)
    sol.stage = stage
    sol.seconds = time.perf_counter() - start
    return sol


# -- stage 1: greedy ------------------------------------------------------------------------------
def greedy(problem: Problem, fixed: dict[int, int], stage: dict[int, str] | None = None,
           base: list[int] | None = None) -> list[int]:
    """Every unit in topological order takes its cheapest option given its producers; units
    in ``fixed`` keep theirs, unchosen inputs follow their first consumer. With ``base`` (an
    earlier greedy answer) a unit none of whose producers or output ties changed keeps its
    ``base`` option: the same inputs give the same decision, so only what a move reaches is
    decided again."""
    units, values = problem.units, problem.values
    choice = [-1] * len(units)
    for u in units:  # inputs with one layout (annotated) are known from the start
        if u.kind == "input" and len(u.options) == 1:
            choice[u.id] = 0
    for uid, o in fixed.items():
        choice[uid] = o
    for u in units:
        if choice[u.id] >= 0 or u.kind == "input":
            continue
        if base is not None and not _touched(problem, choice, base, u):
            choice[u.id] = base[u.id]
            continue
        srcs = []
        for vid in u.inputs:
            v = values[vid]
            pu = v.unit
            srcs.append(units[pu].options[choice[pu]].outs[v.index] if choice[pu] >= 0 else -1)
        sinks = [s for s in problem.sink_of.get(u.id, ()) if values[s.value].unit == u.id]
        best, best_key = 0, None
        for b, opt in enumerate(u.options):
            c = opt.penalty
            for k, src in enumerate(srcs):
                if src >= 0 and src != opt.ins[k]:
                    c += problem.bytes_ids(u.inputs[k], src, opt.ins[k])
            for s in sinks:
                tie = -1
                if s.tie is not None:
                    if choice[s.tie] < 0:
                        continue
                    tie = units[s.tie].options[choice[s.tie]].outs[0]
                c += problem.sink_cost(s, opt.outs[values[s.value].index], tie)
            key = (c, _partials(opt.outputs), b)
            if best_key is None or key < best_key:
                best, best_key = b, key
        choice[u.id] = best
        if stage is not None:
            stage[u.id] = "greedy"
        opt = u.options[best]
        for k, vid in enumerate(u.inputs):  # unchosen inputs follow this first consumer
            pu = values[vid].unit
            if choice[pu] < 0:
                choice[pu] = _closest(problem, units[pu], vid, opt.ins[k])
                if stage is not None:
                    stage[pu] = "greedy (follows its first use)"
    for u in units:  # inputs nothing reads
        if choice[u.id] < 0:
            choice[u.id] = 0
    return choice


def _touched(problem: Problem, choice: list[int], base: list[int], u: Unit) -> bool:
    for vid in u.inputs:
        pu = problem.values[vid].unit
        if choice[pu] != base[pu]:
            return True
    return any(s.tie is not None and choice[s.tie] != base[s.tie]
               for s in problem.sink_of.get(u.id, ()))


def _closest(problem: Problem, unit: Unit, vid: int, want: int) -> int:
    costs = [(problem.bytes_ids(vid, o.outs[0], want) + o.penalty, i)
             for i, o in enumerate(unit.options)]
    return min(costs)[1]


def _partials(outputs) -> int:
    return sum(isinstance(p, Partial) for out in outputs for p in out)


# -- stage 2: parameter groups --------------------------------------------------------------------
def groups(problem: Problem) -> list[list[int]]:
    """Inputs with several layouts, grouped by name with layer numbers replaced by ``*``;
    a group's members share one shape (so one list of options)."""
    by: dict[tuple, list[int]] = {}
    for u in problem.units:
        if u.kind != "input" or len(u.options) < 2:
            continue
        name = problem.graph.name_of(u.node)
        shape = problem.values[u.outputs[0]].shape
        by.setdefault((re.sub(r"\.\d+\.", ".*.", name), shape), []).append(u.id)
    return list(by.values())


def _group_descent(problem: Problem, choice: list[int], stage: dict[int, str],
                   max_rounds: int) -> list[int]:
    inputs = [u.id for u in problem.units if u.kind == "input"]
    cost = problem.cost(choice)
    for _ in range(max_rounds):
        moved = False
        for members in groups(problem):
            for o in range(len(problem.units[members[0]].options)):
                if all(choice[m] == o for m in members):
                    continue
                fixed = {i: choice[i] for i in inputs} | {m: o for m in members}
                trial_stage: dict[int, str] = {}
                trial = greedy(problem, fixed, trial_stage, base=choice)
                c = problem.cost(trial)
                if c < cost - EPS:
                    choice, cost, moved = trial, c, True
                    stage.update(trial_stage)
                    for m in members:
                        stage[m] = "parameter-group search"
        if not moved:
            break
    return choice


# -- stage 3: local improvement -------------------------------------------------------------------
def local_cost(problem: Problem, choice: list[int], u: Unit, b: int) -> float:
    """Bytes on every edge touching ``u`` (and its hint penalty) if it took option ``b``."""
    units, values = problem.units, problem.values
    opt = u.options[b]
    c = opt.penalty
    for k, vid in enumerate(u.inputs):
        v = values[vid]
        src = units[v.unit].options[choice[v.unit]].outs[v.index]
        if src != opt.ins[k]:
            c += problem.bytes_ids(vid, src, opt.ins[k])
    for cu, k in u.consumers:
        consumer = units[cu]
        vid = consumer.inputs[k]
        src, dst = opt.outs[values[vid].index], consumer.options[choice[cu]].ins[k]
        if src != dst:
            c += problem.bytes_ids(vid, src, dst)
    for s in problem.sink_of.get(u.id, ()):
        v = values[s.value]
        src = opt.outs[v.index] if v.unit == u.id else problem.out_id(choice, s.value)
        tie = -1
        if s.tie is not None:
            tie = opt.outs[0] if s.tie == u.id else units[s.tie].options[choice[s.tie]].outs[0]
        c += problem.sink_cost(s, src, tie)
    return c


def improve(problem: Problem, choice: list[int], stage: dict[int, str] | None = None,
            max_sweeps: int = 6) -> list[int]:
    """Stage 3 of Note [graph sharding search]."""
    choice = list(choice)
    order = [u for u in problem.units if len(u.options) > 1]
    for sweep in range(max_sweeps):
        changed = False
        for u in (order if sweep % 2 == 0 else order[::-1]):
            here = local_cost(problem, choice, u, choice[u.id])
            for b in range(len(u.options)):
                if b != choice[u.id] and (c := local_cost(problem, choice, u, b)) < here - EPS:
                    choice[u.id], here, changed = b, c, True
                    if stage is not None:
                        stage[u.id] = "local improvement"
        if not changed:
            break
    return choice


# -- exact ----------------------------------------------------------------------------------------
def branch_and_bound(problem: Problem, start: list[int], start_cost: float, node_budget: int
                     ) -> tuple[list[int], float, bool] | None:
    """(best choice, its cost, proven optimal) by depth-first search from ``start``."""
    units, values = problem.units, problem.values
    order: list[int] = []
    placed: set[int] = set()
    for u in units:
        if u.kind == "input":
            continue
        for vid in u.inputs:
            pu = values[vid].unit
            if pu not in placed:
                placed.add(pu)
                order.append(pu)
        placed.add(u.id)
        order.append(u.id)
    order += [u.id for u in units if u.id not in placed]
    if len(order) > 2000:
        return None  # the recursion below goes one level per unit
    position = {uid: i for i, uid in enumerate(order)}
    choice = list(start)
    best, best_cost = list(start), start_cost
    visited = 0

    def added(uid: int, b: int) -> float:
        """Cost of the edges between ``uid`` and units before it in ``order``."""
        u = units[uid]
        opt = u.options[b]
        c = opt.penalty
        for k, vid in enumerate(u.inputs):
            c += problem.bytes_ids(vid, problem.out_id(choice, vid), opt.ins[k])
        for s in problem.sink_of.get(uid, ()):
            ends = [values[s.value].unit] + ([s.tie] if s.tie is not None else [])
            if max(position[e] for e in ends) != position[uid]:
                continue  # priced when its last end is chosen
            tie = problem.out_id(choice, units[s.tie].outputs[0]) if s.tie is not None else -1
            c += problem.sink_cost(s, problem.out_id(choice, s.value), tie)
        return c

    def dfs(i: int, so_far: float) -> bool:
        nonlocal best, best_cost, visited
        if i == len(order):
            if so_far < best_cost - EPS:
                best, best_cost = list(choice), so_far
            return True
        uid = order[i]
        scored = []
        for b in range(len(units[uid].options)):
            choice[uid] = b
            scored.append((added(uid, b), b))
        scored.sort()
        for c, b in scored:
            if so_far + c >= best_cost - EPS:
                break
            visited += 1
            if visited > node_budget:
                return False
            choice[uid] = b
            if not dfs(i + 1, so_far + c):
                return False
        return True

    proven = dfs(0, 0.0)
    return best, best_cost, proven
