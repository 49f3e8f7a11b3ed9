"""Pipeline schedules over one stage per rank, with torch.distributed.pipelining's names and
``step`` (``ScheduleGPipe``, ``Schedule1F1B``).

Note [micro-batches]
``step(*args, target=..., losses=...)`` cuts every tensor argument (and the target) along
dim 0 into ``n_microbatches`` pieces with ``torch.tensor_split``, as torch does, so an uneven
batch gives pieces that differ by one row. The last stage computes ``loss_fn(output,
target piece)`` per micro-batch, appends it to ``losses`` and runs its backward; once every
micro-batch is done, each stage divides its gradients by the micro-batch count
(``scale_grads=True``, torch's default). The gradients are then those of the mean of the
micro-batch losses, which one device gets from the same pieces: with a mean-reduced loss and
equal pieces, the whole batch's loss.

Note [one reduce-scatter per step]
A stage that is fully sharded (``fully_shard``: it has ``set_requires_gradient_sync``)
reduces its gradients over dp once a step, not once a micro-batch: every forward and backward
but the last of each runs with gradient sync off, so the gradients are summed in the gathered
layout (Note [gradient accumulation] in dtensor/parallel/fsdp_hooks.py) and the last backward
reduce-scatters the sum, as torch's schedules do for FSDP2.

Note [virtual stages]
With v stages a rank (``num_stages = v * pp``), stage i lives on pp rank i % pp, so a
micro-batch loops through the ranks v times and each rank's bubble shrinks by 1/v:
``ScheduleLoopedBFS`` runs each local stage's forwards for every micro-batch, then the
backwards in reverse; ``ScheduleInterleaved1F1B`` takes torch's interleaved order
(micro-batches in rounds of pp, a longer warm-up). Two ranks then carry several channels
(stage i -> i + 1 and the gradients back), one tag each, so each keeps its order.

Note [zero bubble]
``ScheduleInterleavedZeroBubble`` and ``ScheduleZBVZeroBubble`` run each backward in two
halves (Note [input and weight backward] in split_backward.py): ``"I"``, the inputs'
gradients, sent back at once, and ``"W"``, the weights', which nothing downstream waits for,
so a schedule places them where a rank would otherwise wait. The interleaved one is torch's
ZB1P order (a warm-up one forward shorter per hop than interleaved 1F1B's; rank r holds r
weight halves back). The V puts stages r and 2 * pp - 1 - r on rank r: a micro-batch goes
down the ranks and back up, stages pp - 1 and pp share a rank (Note [stages on one rank] in
stage.py), and the first and last stages share rank 0; its order is torch's ZB-V, planned
for at least 2 * pp - 1 micro-batches and cut to the real count. A fully sharded stage's
halves never reach the end of a whole backward, where fully_shard reduce-scatters: so every
half runs with gradient sync off (the gradients summed in the gathered layout, Note
[gradient accumulation] in dtensor/parallel/fsdp_hooks.py) and the stage reduce-scatters the
sum once after the step's last half (``reduce_accumulated_gradients``), as torch's schedules
call FSDP2's post-backward by hand. Each half is its own backward, so a checkpointed region
is recomputed once per half that reads it; inside a fully sharded module the stage marks the
module as in its backward for the weight half, so that recomputation runs as fully_shard's
backward runs one (Note [a weight half inside fully_shard] in dtensor/parallel/fsdp_hooks.py).

Note [DualPipeV]
``ScheduleDualPipeV`` is torch's port of DeepSeek's DualPipeV: the V placement of the
zero-bubble V, and an order that, in its steady state, pairs the forward of one local stage
with the whole backward of the other (torch runs each pair as one overlapped action, whose
communication hides behind the other's compute; here the pair runs forward then backward,
each sending as soon as it is done, where torch's runtime sends both after the pair, so the
next rank starts sooner: ``bench_pipeline.py``'s transfer-free bubble 0.049 against torch's
0.079 on 4 ranks and 8 micro-batches). It warms up with forwards down the V, uses input
and weight halves where a rank would wait at the start and the end, and needs at least
``2 * pp`` micro-batches. Weight halves run in the order their input halves queued them, as
torch's queue gives.

Note [schedule order]
A schedule is the order of one stage's forward and backward micro-batches. GPipe: every
forward, then every backward. 1F1B: stage s runs ``min(num_stages - 1 - s, m)`` forwards
(warm-up), then alternates one forward and one backward, then the remaining backwards: at most
``num_stages - s`` micro-batches' activations are held at once, where GPipe holds all m.
Sends never wait (``isend``, waited at the end of ``step``) and each stage receives in the
order its neighbour sends, so every order here completes; a stage that runs another order
(another micro-batch count, a missing backward) is reported by simpg with every rank's
position, never a hang.
"""

from __future__ import annotations

from typing import Any

import torch

from dtensor.pipelining.stage import LossFn, PipelineStage, PipeliningError


# Note [receives posted ahead]
# Each action posts the receives of the next LOOKAHEAD actions, so a message can land while
# this rank computes. Each posted receive holds its buffer from then on: two actions ahead
# gives the same step as four in bench_pipeline.py (every schedule) and one never does (a
# receive posted at the action that reads it waits out the whole transfer), while four held
# buffers no step needed (GPipe's and 1F1B's first rank 0.3% above torch's peak).
LOOKAHEAD = 2


class _Schedule:
    """The stages of this rank and the order of their micro-batches (``_order``: (``"F"`` or
    ``"B"``, local stage, micro-batch) in the order this rank runs them)."""

    def __init__(self, stages: list[PipelineStage], n_microbatches: int,
                 loss_fn: LossFn | None = None, args_chunk_spec: Any = None,
                 kwargs_chunk_spec: Any = None, output_merge_spec: Any = None,
                 scale_grads: bool = True) -> None:
        name = type(self).__name__
        if not stages or not all(isinstance(st, PipelineStage) for st in stages):
            raise PipeliningError(f"{name} takes PipelineStages, got "
                                  f"{[type(st).__name__ for st in stages]}")
        if n_microbatches < 1:
            raise PipeliningError(f"n_microbatches is {n_microbatches}: expected at least 1")
        if any(spec is not None for spec in (args_chunk_spec, kwargs_chunk_spec,
                                             output_merge_spec)):
            raise PipeliningError("chunk and merge specs other than dim 0 are not supported: "
                                  "micro-batches are cut and merged along dim 0")
        self._stages = stages
        for st in stages:  # Note [stages on one rank] in stage.py
            st.local_stages = {o.stage_index: o for o in stages if o is not st}
        self._n_microbatches = n_microbatches
        self._loss_fn = loss_fn
        self._scale_grads = scale_grads

    def step(self, *args: Any, target: torch.Tensor | None = None,
             losses: list | None = None, **kwargs: Any) -> torch.Tensor | None:
        """One training step over the micro-batches of ``args`` (given on the rank of the
        first stage), ``target`` and ``losses`` (on the last stage's). Returns the merged
        output on the last stage's rank (the micro-batches' outputs joined along dim 0), None
        on the others."""
        m = self._n_microbatches
        first = next((st for st in self._stages if st.is_first), None)
        last = next((st for st in self._stages if st.is_last), None)
        if last is not None and self._loss_fn is not None and target is None:
            raise PipeliningError("the last stage's step needs target= for its loss_fn")
        arg_pieces = _split(args, m) if first is not None else [()] * m
        kwarg_pieces = _split_kwargs(kwargs, m) if first is not None else [{}] * m
        targets = _split((target,), m) if target is not None else [(None,)] * m
        training = self._loss_fn is not None and torch.is_grad_enabled()
        order = self._order(m) if training else [
            ("F", k, i) for k in range(len(self._stages)) for i in range(m)]
        final = {}  # Note [one reduce-scatter per step]: each stage's last forward / backward
        for at, (kind, k, _) in enumerate(order):
            final[(kind, k)] = at
        split = any(kind == "I" for kind, _, _ in order)  # Note [zero bubble]: sync off
        outputs: dict[int, tuple] = {}
        mb_losses: dict[int, torch.Tensor] = {}  # until its backward
        seen: dict[int, torch.Tensor] = {}
        for at, (kind, k, mb) in enumerate(order):
            stage = self._stages[k]
            stage.sync_gradients(not split and final[(kind, k)] == at)
            if kind == "F":
                outs = stage.forward_one(mb, arg_pieces[mb], kwarg_pieces[mb], m)
                if stage.is_last:
                    outputs[mb] = tuple(o.detach() for o in outs)  # not the graph
                    if training:
                        mb_losses[mb] = self._loss_fn(outs[0], targets[mb][0])
                        seen[mb] = mb_losses[mb].detach()
                if not training:
                    stage._outputs.pop(mb, None)
                    stage._inputs.pop(mb, None)
            elif kind == "B":
                stage.backward_one(mb, mb_losses.pop(mb, None) if stage.is_last else None, m)
            elif kind == "I":  # Note [input and weight backward] in split_backward.py
                stage.backward_input_one(mb, mb_losses.pop(mb, None) if stage.is_last else None,
                                         m)
            else:
                stage.backward_weight_one(mb, m)
            for next_kind, next_k, next_mb in order[at + 1:at + 1 + LOOKAHEAD]:
                self._stages[next_k].post_receives(next_kind, next_mb, m)  # early: static
        for stage in self._stages:
            if split:
                stage.reduce_accumulated_gradients()
            stage.sync_gradients(True)
            stage.wait_sends()
            if training and self._scale_grads:
                stage.scale_grads(m)
        if last is None:
            return None
        if losses is not None:
            losses.extend(seen[i] for i in range(m) if i in seen)
        outs = [outputs[i][0].detach() for i in range(m)]
        return torch.cat(outs) if len(outs) > 1 else outs[0]

    def _order(self, m: int) -> list[tuple[str, int, int]]:
        """(``"F"``, ``"B"``, or the backward's halves ``"I"`` and ``"W"``, local stage,
        micro-batch), in the order this rank runs them."""
        raise NotImplementedError


class PipelineScheduleSingle(_Schedule):
    """A schedule of one stage per rank; subclasses give the order (``_single_order``)."""

    def __init__(self, stage: PipelineStage, n_microbatches: int, loss_fn: LossFn | None = None,
                 args_chunk_spec: Any = None, kwargs_chunk_spec: Any = None,
                 output_merge_spec: Any = None, scale_grads: bool = True) -> None:
        if not isinstance(stage, PipelineStage):
            raise PipeliningError(f"{type(self).__name__} takes a PipelineStage, got "
                                  f"{type(stage).__name__}")
        if stage.num_stages != stage.pp_size:
            raise PipeliningError(
                f"{type(self).__name__} runs one stage per rank: {stage.num_stages} stages on "
                f"{stage.pp_size} ranks need a multi-stage schedule (ScheduleInterleaved1F1B, "
                f"ScheduleLoopedBFS)")
        super().__init__([stage], n_microbatches, loss_fn, args_chunk_spec,
                         kwargs_chunk_spec, output_merge_spec, scale_grads)
        self._stage = stage

    def _order(self, m: int) -> list[tuple[str, int, int]]:
        return [(kind, 0, mb) for kind, mb in self._single_order(m)]

    def _single_order(self, m: int) -> list[tuple[str, int]]:
        raise NotImplementedError


class ScheduleGPipe(PipelineScheduleSingle):
    """Every micro-batch's forward, then every backward (Note [schedule order])."""

    def _single_order(self, m: int) -> list[tuple[str, int]]:
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]


class Schedule1F1B(PipelineScheduleSingle):
    """Warm-up forwards, one forward one backward, cool-down backwards (Note [schedule
    order])."""

    def _single_order(self, m: int) -> list[tuple[str, int]]:
        s = self._stage
        warmup = min(s.num_stages - 1 - s.stage_index, m)
        order = [("F", i) for i in range(warmup)]
        for j in range(m - warmup):
            order += [("F", warmup + j), ("B", j)]
        return order + [("B", j) for j in range(m - warmup, m)]


class PipelineScheduleMulti(_Schedule):
    """A schedule of several stages per rank (Note [virtual stages]): ``stages`` are this
    rank's, stage i of ``num_stages`` on pp rank i % pp, in increasing index."""

    def __init__(self, stages: list[PipelineStage], n_microbatches: int,
                 loss_fn: LossFn | None = None, args_chunk_spec: Any = None,
                 kwargs_chunk_spec: Any = None, output_merge_spec: Any = None,
                 scale_grads: bool = True) -> None:
        super().__init__(list(stages), n_microbatches, loss_fn, args_chunk_spec,
                         kwargs_chunk_spec, output_merge_spec, scale_grads)
        indices = [st.stage_index for st in self._stages]
        pp, n = self._stages[0].pp_size, self._stages[0].num_stages
        rank = indices[0] % pp
        expected, how = self._placement(rank, pp, n)
        if indices != expected:
            raise PipeliningError(
                f"{type(self).__name__} on pp rank {rank} takes stages {expected} ({how}), "
                f"got {indices}")
        self.pp_size, self.rank, self.n_local = pp, rank, len(indices)

    def _placement(self, rank: int, pp: int, n: int) -> tuple[list[int], str]:
        """The stages rank ``rank`` holds, in order, and the rule in words."""
        return list(range(rank, n, pp)), f"stage i on rank i % {pp}, in order"


class ScheduleLoopedBFS(PipelineScheduleMulti):
    """Each local stage's forwards for every micro-batch, stage after stage, then the
    backwards, stages in reverse (Note [virtual stages])."""

    def _order(self, m: int) -> list[tuple[str, int, int]]:
        forwards = [("F", k, i) for k in range(self.n_local) for i in range(m)]
        backwards = [("B", k, i) for k in reversed(range(self.n_local)) for i in range(m)]
        return forwards + backwards


class ScheduleInterleaved1F1B(PipelineScheduleMulti):
    """1F1B over virtual stages, micro-batches in rounds of the pp size (Note [virtual
    stages]): torch's order, so the warm-up is (v - 1) * pp + 2 * (pp - 1 - rank) forwards."""

    def _order(self, m: int) -> list[tuple[str, int, int]]:
        return _interleaved(self, m, zero_bubble=False)


class ScheduleInterleavedZeroBubble(PipelineScheduleMulti):
    """Interleaved 1F1B with each backward in two halves (Note [zero bubble]): torch's ZB1P
    order, a warm-up of (v - 1) * pp + (pp - 1 - rank) forwards, then a forward and an input
    backward per step, each rank's weight backwards held back by its rank and run in the
    cool-down's waits."""

    def _order(self, m: int) -> list[tuple[str, int, int]]:
        return _interleaved(self, m, zero_bubble=True)


def _interleaved(schedule: PipelineScheduleMulti, m: int, zero_bubble: bool
                 ) -> list[tuple[str, int, int]]:
    """The interleaved 1F1B order on this rank, zero-bubble or not (torch's, action by
    action)."""
    pp, v, r = schedule.pp_size, schedule.n_local, schedule.rank
    rounds = max(1, m // pp)
    if m % rounds:
        raise PipeliningError(f"{type(schedule).__name__}: {m} micro-batches do not make "
                              f"whole rounds of {m // rounds}: use a multiple of the pp "
                              f"size {pp}")
    per_round = m // rounds
    total = v * m
    hops = (1 if zero_bubble else 2) * (pp - 1 - r)
    warmup = min((v - 1) * per_round + hops, total)
    backward_kind = "I" if zero_bubble else "B"
    fwd_mb, bwd_mb, weight_mb = [0] * v, [0] * v, [0] * v
    backward_steps: list[int] = []
    order: list[tuple[str, int, int]] = []

    def backward_stage(step: int) -> int:
        return v - 1 - ((step - warmup) // per_round) % v

    def forward(step: int) -> None:
        k = (step // per_round) % v
        order.append(("F", k, fwd_mb[k]))
        fwd_mb[k] += 1

    def weight() -> None:
        k = backward_stage(backward_steps[sum(weight_mb)])
        order.append(("W", k, weight_mb[k]))
        weight_mb[k] += 1

    def backward(step: int) -> None:
        k = backward_stage(step)
        order.append((backward_kind, k, bwd_mb[k]))
        bwd_mb[k] += 1
        backward_steps.append(step)
        if zero_bubble and step - warmup >= r:  # rank r holds r weight halves back
            weight()

    for step in range(total + warmup):
        if step < warmup:
            forward(step)
        elif step < total:
            forward(step)
            backward(step)
        else:
            backward(step)
    while zero_bubble and sum(weight_mb) < len(backward_steps):
        weight()
    return order


class ScheduleZBVZeroBubble(PipelineScheduleMulti):
    """The zero-bubble V (Note [zero bubble]): two stages a rank, rank r holding stages r and
    2 * pp - 1 - r, so a micro-batch goes down the ranks and back up and the first and last
    stages share rank 0; torch's order, each backward in two halves."""

    def __init__(self, stages: list[PipelineStage], n_microbatches: int,
                 loss_fn: LossFn | None = None, args_chunk_spec: Any = None,
                 kwargs_chunk_spec: Any = None, output_merge_spec: Any = None,
                 scale_grads: bool = True) -> None:
        stages = list(stages)
        if len(stages) != 2:
            raise PipeliningError(f"ScheduleZBVZeroBubble runs exactly 2 stages a rank, got "
                                  f"{len(stages)}")
        pp = stages[0].pp_size
        for st in stages:  # Note [stages on one rank] in stage.py
            st.stage_to_rank = lambda i, pp=pp: i if i < pp else 2 * pp - 1 - i
        super().__init__(stages, n_microbatches, loss_fn, args_chunk_spec, kwargs_chunk_spec,
                         output_merge_spec, scale_grads)

    def _placement(self, rank: int, pp: int, n: int) -> tuple[list[int], str]:
        return [rank, n - 1 - rank], f"the V: stages r and {n - 1} - r on rank r, of {n}"

    def _order(self, m: int) -> list[tuple[str, int, int]]:
        pp, r = self.pp_size, self.rank
        n = max(2 * pp - 1, m)  # torch plans at least a full V, then drops the extra ones
        f, b, w = [0, 0], [0, 0], [0, 0]
        order: list[tuple[str, int, int]] = []

        def run(kind: str, k: int, count: list[int]) -> None:
            order.append((kind, k, count[k]))
            count[k] += 1

        for _ in range(2 * (pp - r) - 1):
            run("F", 0, f)
        for _ in range(r):
            run("F", 1, f)
            run("F", 0, f)
        for _ in range(pp - r):
            run("F", 1, f)
            run("I", 1, b)
            run("W", 1, w)
        while f[1] < f[0] or f[0] < n:
            if f[0] < n:
                run("F", 0, f)
            run("I", 0, b)
            run("W", 0, w)
            run("F", 1, f)
            run("I", 1, b)
            run("W", 1, w)
        for _ in range(r):
            run("I", 0, b)
            run("I", 1, b)
        for _ in range(pp - r):
            run("I", 0, b)
            run("W", 0, w)
        while w[1] < b[1]:
            run("W", 1, w)
        while w[0] < b[0]:
            run("W", 0, w)
        return [a for a in order if a[2] < m]


class ScheduleDualPipeV(ScheduleZBVZeroBubble):
    """DeepSeek's DualPipe folded into a V (torch's ``ScheduleDualPipeV``; Note [DualPipeV]):
    the V placement of ``ScheduleZBVZeroBubble``, at least ``2 * pp`` micro-batches, and
    torch's order, action by action."""

    def __init__(self, stages: list[PipelineStage], n_microbatches: int,
                 loss_fn: LossFn | None = None, args_chunk_spec: Any = None,
                 kwargs_chunk_spec: Any = None, output_merge_spec: Any = None,
                 scale_grads: bool = True) -> None:
        stages = list(stages)
        n = stages[0].num_stages if stages else 0
        if stages and n_microbatches < n:
            raise PipeliningError(f"ScheduleDualPipeV needs at least as many micro-batches as "
                                  f"stages: {n_microbatches} micro-batches, {n} stages")
        super().__init__(stages, n_microbatches, loss_fn, args_chunk_spec, kwargs_chunk_spec,
                         output_merge_spec, scale_grads)

    def _order(self, m: int) -> list[tuple[str, int, int]]:
        pp, r = self.pp_size, self.rank
        # micro-batches begun per stage: forwards, and backwards (whole or input halves)
        done = {"F": [0, 0], "B": [0, 0]}
        weights: list[tuple[int, int]] = []  # input halves whose weight half is pending
        order: list[tuple[str, int, int]] = []

        def run(kind: str, k: int) -> None:
            count = done["F" if kind == "F" else "B"]
            order.append((kind, k, count[k]))
            if kind == "I":
                weights.append((k, count[k]))
            count[k] += 1

        def weight() -> None:
            if weights:
                order.append(("W", *weights.pop(0)))

        for _ in range(2 * (pp - r - 1)):
            run("F", 0)
        for _ in range(r + 1):
            run("F", 0)
            run("F", 1)
        for _ in range(pp - r - 1):
            run("I", 1)
            weight()
            run("F", 1)
        for _ in range(m - 2 * pp + r + 1):  # forward of one stage beside the other's backward
            run("F", 0)
            run("B", 1)
            run("F", 1)
            run("B", 0)
        for _ in range(pp - r - 1):
            run("B", 1)
            run("F", 1)
            run("B", 0)
        split = False
        for i in range(r + 1):  # the last backwards: the second half in two halves
            split = split or (i == (r + 1) // 2 and r % 2 == 1)
            run("I" if split else "B", 1)
            split = split or (i == (r + 1) // 2 and r % 2 == 0)
            run("I" if split else "B", 0)
        for _ in range(pp - r - 1):
            weight()
            run("I" if split else "B", 0)
        for _ in range(r + 1):
            weight()
        return order


def _split(values: tuple, m: int) -> list[tuple]:
    """Each tensor of ``values`` cut into ``m`` pieces along dim 0 (Note [micro-batches]);
    other values go to every micro-batch as they are."""
    cols = []
    for v in values:
        if isinstance(v, torch.Tensor):
            if v.dim() == 0 or v.shape[0] < m:
                raise PipeliningError(f"a batch of shape {tuple(v.shape)} cannot be cut into "
                                      f"{m} micro-batches along dim 0")
            cols.append(torch.tensor_split(v, m))
        else:
            cols.append([v] * m)
    return [tuple(c[i] for c in cols) for i in range(m)]


def _split_kwargs(kwargs: dict, m: int) -> list[dict]:
    keys = list(kwargs)
    rows = _split(tuple(kwargs[k] for k in keys), m)
    return [dict(zip(keys, row)) for row in rows]
