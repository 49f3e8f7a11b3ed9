"""Search: one option per unit minimising the cost (bytes communicated plus priced compute:
Note [graph sharding problem] in ``dtensor.graph.problem``, Note [compute in the objective] in
``dtensor.graph.compute``).

Note [graph sharding search]
- Small problems are solved exactly: depth-first branch and bound over the units, each
  input placed just before its first consumer so that every edge is priced as soon as both
  ends are chosen; the bound is the bytes so far (costs are never negative), the first upper
  bound the heuristic's answer. It gives up after ``node_budget`` search nodes and then says
  the answer is not proven exact.
- Large problems get a heuristic in four stages:
  1. greedy: topological order, each unit taking the option cheapest given its chosen
     producers; an unchosen input takes what its first consumer asks (so parameters follow
     their first use, as eager propagation would have them follow their annotation);
  2. parameter groups: inputs whose names differ only in layer numbers
     (``layers.*.attention.wq.weight``) move together; each group tries each of its layouts
     with the greedy pass redoing what the move reaches, and a move is kept when the total
     drops. This is what finds tensor parallelism: a column-sharded weight pays off only
     once the whole block follows it, which no single-unit move can see;
  3. local improvement: each unit in topological order, then in reverse, takes the option
     cheapest given all its neighbours (producers, consumers, output ties), until a sweep
     changes nothing;
  4. reshard repair: every edge (or output) that moves bytes, costliest first, tries each
     option of either end that makes that edge cheaper; the units the change reaches are
     decided again given all their neighbours, and theirs in turn (a chain, at most 48
     changed units), kept when the total drops; then stage 3 again. A chain is what a
     pass-through op needs: a weight gradient summed as Partial over every mesh dim and
     then transposed pays its reduction at the output unless the matmul and the transpose
     change together (the 1-layer Llama step of bench_graph: 58.7 of its 99.0 MB before
     this stage).
- Note [repeated units]: the layers of a model repeat their calls on the same shapes, so
  their units share one option list, and an input's reshard bytes depend only on its cost
  class and scale (Note [even dims scale]). A unit without graph outputs is therefore
  decided, and its options priced, by a pure function of that signature and its
  neighbours' placements (``Problem.signature``); ``_cheapest`` and ``local_costs`` memoise
  on it (``Problem.memo``), so identical layers in identical surroundings are priced once.
- Moves are incremental: a move decides again only the units it reaches (a worklist in
  topological order: a unit whose producers and ties did not change keeps its decision),
  and is priced by the edges and outputs touching the changed units, before and after
  (``_set_cost``: exactly the change of the whole cost, which the tests check).
"""

from __future__ import annotations

import heapq
import re
import time
from dataclasses import dataclass, field

from dtensor.graph.errors import GraphShardingError
from dtensor.graph.memory import WEIGHTS
from dtensor.graph.problem import Problem, Unit

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
    memory_weight: float = 0.0  # the price of a byte held (Note [memory in the objective])


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
        choice = repair(problem, choice, stage)
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
def greedy(problem: Problem, fixed: dict[int, int], stage: dict[int, str] | None = None
           ) -> list[int]:
    """Every unit in topological order takes its cheapest option given its producers; units
    in ``fixed`` keep theirs, unchosen inputs follow their first consumer."""
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
        srcs = []
        for vid in u.inputs:
            v = values[vid]
            pu = v.unit
            srcs.append(units[pu].options[choice[pu]].outs[v.index] if choice[pu] >= 0 else -1)
        sinks = [s for s in problem.sink_of.get(u.id, ()) if values[s.value].unit == u.id]
        best, best_key = 0, None
        partials = problem.partials(u.id)
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
            key = (c, partials[b], b)
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


def _closest(problem: Problem, unit: Unit, vid: int, want: int) -> int:
    costs = [(problem.bytes_ids(vid, o.outs[0], want) + o.penalty, i)
             for i, o in enumerate(unit.options)]
    return min(costs)[1]


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
    for _ in range(max_rounds):
        moved = False
        for members in groups(problem):
            for o in range(len(problem.units[members[0]].options)):
                if all(choice[m] == o for m in members):
                    continue
                moved |= _try_move(problem, choice, {m: o for m in members}, stage,
                                   "parameter-group search", consumers_only=True)
        if not moved:
            break
    return choice


def _try_move(problem: Problem, choice: list[int], move: dict[int, int], stage: dict[int, str],
              why: str, consumers_only: bool, limit: int | None = None) -> bool:
    """Apply ``move`` (unit -> option) to ``choice`` in place when it lowers the total once
    the units it reaches are decided again (Note [graph sharding search]); True if kept."""
    trial = _redecide(problem, choice, move, consumers_only, limit)
    if trial is None:
        return False
    new, changed = trial
    if _set_cost(problem, new, changed) >= _set_cost(problem, choice, changed) - EPS:
        return False
    for uid in changed:
        choice[uid] = new[uid]
        stage[uid] = why
    return True


def _redecide(problem: Problem, base: list[int], move: dict[int, int], consumers_only: bool,
              limit: int | None) -> tuple[list[int], set[int]] | None:
    """``base`` with ``move`` applied, then every unit a change reaches decided again, in
    topological order, until nothing more changes: with ``consumers_only`` as the greedy pass
    would (given its producers: the same inputs give the same decision), else given all its
    neighbours (``local_cost``), producers reached too. (new choice, units changed), or None
    past ``limit`` changed units."""
    units = problem.units
    choice = list(base)
    changed = set()
    heap: list[int] = []
    queued: set[int] = set()

    def reach(uid: int) -> None:
        for n in problem.neighbours(uid, consumers_only):
            if n not in queued and n not in move:
                queued.add(n)
                heapq.heappush(heap, n)

    for uid, o in move.items():
        if base[uid] != o:
            choice[uid] = o
            changed.add(uid)
            reach(uid)
    while heap:
        uid = heapq.heappop(heap)
        queued.discard(uid)
        u = units[uid]
        if u.kind == "input" and consumers_only:
            continue
        if consumers_only:
            b = _cheapest(problem, choice, u)
        else:
            costs = local_costs(problem, choice, u)
            b = min(range(len(u.options)), key=lambda b: (costs[b], b != choice[uid]))
        if b != choice[uid]:
            choice[uid] = b
            changed.add(uid)
            if limit is not None and len(changed) > limit:
                return None
            reach(uid)
    return choice, changed


def _cheapest(problem: Problem, choice: list[int], u: Unit) -> int:
    """The greedy pass's decision for ``u`` with every producer chosen."""
    units, values = problem.units, problem.values
    srcs = [units[values[vid].unit].options[choice[values[vid].unit]].outs[values[vid].index]
            for vid in u.inputs]
    sig = problem.signature(u.id)
    if sig is not None:  # Note [repeated units]
        key = (0, sig, tuple(srcs))
        found = problem.memo.get(key)
        if found is None:
            found = problem.memo[key] = _cheapest_of(problem, choice, u, srcs)
        return found
    return _cheapest_of(problem, choice, u, srcs)


def _cheapest_of(problem: Problem, choice: list[int], u: Unit, srcs: list[int]) -> int:
    units, values = problem.units, problem.values
    sinks = [s for s in problem.sink_of.get(u.id, ()) if values[s.value].unit == u.id]
    partials = problem.partials(u.id)
    best, best_key = 0, None
    memo: dict[tuple[int, int], float] = {}  # options share most of their input placements
    for b, opt in enumerate(u.options):
        c = opt.penalty
        for k, src in enumerate(srcs):
            dst = opt.ins[k]
            if src != dst:
                r = memo.get((k, dst))
                if r is None:
                    r = memo[(k, dst)] = problem.bytes_ids(u.inputs[k], src, dst)
                c += r
        for s in sinks:
            tie = units[s.tie].options[choice[s.tie]].outs[0] if s.tie is not None else -1
            c += problem.sink_cost(s, opt.outs[values[s.value].index], tie)
        key = (c, partials[b], b)
        if best_key is None or key < best_key:
            best, best_key = b, key
    return best


def _set_cost(problem: Problem, choice: list[int], members: set[int]) -> float:
    """Bytes (and hint penalties) of every edge and sink touching a unit in ``members``, each
    once: the part of ``problem.cost`` a change confined to ``members`` can alter."""
    units, values = problem.units, problem.values
    total = 0.0
    sinks = {}
    for uid in members:
        u = units[uid]
        opt = u.options[choice[uid]]
        total += problem.own_cost(choice, u, choice[uid])
        for cu, k in u.consumers:
            if cu in members:
                continue  # priced as that consumer's input
            vid = units[cu].inputs[k]
            src, dst = opt.outs[values[vid].index], units[cu].options[choice[cu]].ins[k]
            if src != dst:
                total += problem.bytes_ids(vid, src, dst)
        sinks.update((id(s), s) for s in problem.sink_of.get(uid, ()))
    for s in sinks.values():
        tie = problem.out_id(choice, units[s.tie].outputs[0]) if s.tie is not None else -1
        total += problem.sink_cost(s, problem.out_id(choice, s.value), tie)
    return total


# -- stage 3: local improvement -------------------------------------------------------------------
def local_cost(problem: Problem, choice: list[int], u: Unit, b: int) -> float:
    """Bytes on every edge touching ``u`` (and its hint penalty) if it took option ``b``."""
    units, values = problem.units, problem.values
    opt = u.options[b]
    c = problem.own_cost(choice, u, b)
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


def local_costs(problem: Problem, choice: list[int], u: Unit) -> list[float]:
    """``local_cost`` of every option of ``u`` at once: its neighbours' placements are looked
    up once, not once per option (the search's inner loop)."""
    units, values = problem.units, problem.values
    srcs = []
    for vid in u.inputs:
        v = values[vid]
        srcs.append(units[v.unit].options[choice[v.unit]].outs[v.index])
    dsts = []
    for cu, k in u.consumers:
        vid = units[cu].inputs[k]
        dsts.append((vid, values[vid].index, units[cu].options[choice[cu]].ins[k]))
    sig = problem.signature(u.id)
    if sig is None:
        return _local_costs_of(problem, choice, u, srcs, dsts)
    key = (1, sig, tuple(srcs), tuple((problem.value_key(v), i, d) for v, i, d in dsts))
    found = problem.memo.get(key)  # Note [repeated units]: callers only read the list
    if found is None:
        found = problem.memo[key] = _local_costs_of(problem, choice, u, srcs, dsts)
    return found


def _local_costs_of(problem: Problem, choice: list[int], u: Unit, srcs: list[int],
                    dsts: list[tuple[int, int, int]]) -> list[float]:
    units, values = problem.units, problem.values
    sinks = problem.sink_of.get(u.id, ())
    bytes_ids, inputs = problem.bytes_ids, u.inputs
    out = []
    memo: dict[tuple[int, int, int], float] = {}  # options share most of their placements
    for opt in u.options:
        c = opt.penalty
        for k, src in enumerate(srcs):
            dst = opt.ins[k]
            if src != dst:
                r = memo.get((0, k, dst))
                if r is None:
                    r = memo[(0, k, dst)] = bytes_ids(inputs[k], src, dst)
                c += r
        for j, (vid, index, dst) in enumerate(dsts):
            src = opt.outs[index]
            if src != dst:
                r = memo.get((1, j, src))
                if r is None:
                    r = memo[(1, j, src)] = bytes_ids(vid, src, dst)
                c += r
        for s in sinks:
            v = values[s.value]
            src = opt.outs[v.index] if v.unit == u.id else problem.out_id(choice, s.value)
            tie = -1
            if s.tie is not None:
                tie = (opt.outs[0] if s.tie == u.id else
                       units[s.tie].options[choice[s.tie]].outs[0])
            c += problem.sink_cost(s, src, tie)
        out.append(c)
    return out


def improve(problem: Problem, choice: list[int], stage: dict[int, str] | None = None,
            max_sweeps: int = 6) -> list[int]:
    """Stage 3 of Note [graph sharding search]."""
    choice = list(choice)
    order = [u for u in problem.units if len(u.options) > 1]
    for sweep in range(max_sweeps):
        changed = False
        for u in (order if sweep % 2 == 0 else order[::-1]):
            costs = local_costs(problem, choice, u)  # a unit's own option is not among them
            here = costs[choice[u.id]]
            for b, c in enumerate(costs):
                if b != choice[u.id] and c < here - EPS:
                    choice[u.id], here, changed = b, c, True
                    if stage is not None:
                        stage[u.id] = "local improvement"
        if not changed:
            break
    return choice


# -- stage 4: reshard repair ---------------------------------------------------------------------
def repair(problem: Problem, choice: list[int], stage: dict[int, str] | None = None,
           max_rounds: int = 2, limit: int = 48, max_tries: int | None = None) -> list[int]:
    """Stage 4 of Note [graph sharding search]: each reshard, costliest first, tries the
    options of its ends that make it cheaper, with the chain of re-decisions it starts."""
    choice = list(choice)
    stage = {} if stage is None else stage
    for _ in range(max_rounds):
        moved = False
        for vid, ends in _reshards(problem, choice):
            for uid, price in ends:
                here = price(choice[uid])
                tries = sorted((c, b) for b in range(len(problem.units[uid].options))
                               if b != choice[uid] and (c := price(b)) < here - EPS)
                if any(_try_move(problem, choice, {uid: b}, stage, "reshard repair",
                                 consumers_only=False, limit=limit)
                       for _, b in tries[:max_tries]):
                    moved = True
                    break
        if not moved:
            break
    return choice


def _reshards(problem: Problem, choice: list[int]):
    """(value, [(an end's unit, its option -> the bytes of this edge)]) for every edge and
    sink that moves bytes, costliest first."""
    units, values = problem.units, problem.values
    found = []
    for u in units:
        opt = u.options[choice[u.id]]
        for k, vid in enumerate(u.inputs):
            v = values[vid]
            src = units[v.unit].options[choice[v.unit]].outs[v.index]
            if src == opt.ins[k] or not (c := problem.bytes_ids(vid, src, opt.ins[k])):
                continue

            def consumer(b, u=u, k=k, vid=vid, v=v):
                src = units[v.unit].options[choice[v.unit]].outs[v.index]
                return problem.bytes_ids(vid, src, u.options[b].ins[k])

            def producer(b, u=u, k=k, vid=vid, v=v):
                return problem.bytes_ids(vid, units[v.unit].options[b].outs[v.index],
                                         u.options[choice[u.id]].ins[k])

            found.append((c, vid, [(u.id, consumer), (v.unit, producer)]))
    for s in problem.sinks:
        v = values[s.value]
        tie = problem.out_id(choice, units[s.tie].outputs[0]) if s.tie is not None else -1
        if not (c := problem.sink_cost(s, problem.out_id(choice, s.value), tie)):
            continue

        def sink(b, s=s, v=v, tie=tie):
            return problem.sink_cost(s, units[v.unit].options[b].outs[v.index], tie)

        found.append((c, s.value, [(v.unit, sink)]))
    found.sort(key=lambda f: -f[0])
    return [(vid, ends) for _, vid, ends in found]


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


def solve_within(problem: Problem, budget: int, optimizer_states: int, method: str):
    """The search of ``solve`` with the memory price raised until the plan
    holds at most ``budget`` bytes per rank (Note [memory in the objective])."""
    if not budget > 0:
        raise ValueError(f"memory_budget={budget!r}: expected bytes per rank > 0")
    least = None
    for weight in WEIGHTS:
        problem.set_memory_weight(weight, optimizer_states)
        solution = solve(problem, method=method)
        held = problem.memory(solution.choice)
        if least is None or held.total < least[1].total:
            least = (weight, held)
        if held.total <= budget:
            solution.memory_weight = weight
            return solution
    problem.set_memory_weight(0.0)
    weight, held = least
    raise GraphShardingError(
        f"no plan found within memory_budget={budget:,} bytes per rank: the least found "
        f"holds {held.total:,} ({held.parameters:,} parameter state with {optimizer_states} "
        f"optimizer states, {held.inputs:,} inputs, {held.activations:,} activations), at "
        f"memory weight {weight:g}; a larger mesh, fewer optimizer states or a smaller "
        "batch would lower it")
