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
layout (Note [gradient accumulation] in dtensor/parallel/fsdp.py) and the last backward
reduce-scatters the sum, as torch's schedules do for FSDP2.

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


class PipelineScheduleSingle:
    """A schedule of one stage per rank; subclasses give the order (``_order``)."""

    def __init__(self, stage: PipelineStage, n_microbatches: int, loss_fn: LossFn | None = None,
                 args_chunk_spec: Any = None, kwargs_chunk_spec: Any = None,
                 output_merge_spec: Any = None, scale_grads: bool = True) -> None:
        if not isinstance(stage, PipelineStage):
            raise PipeliningError(f"{type(self).__name__} takes a PipelineStage, got "
                                  f"{type(stage).__name__}")
        if n_microbatches < 1:
            raise PipeliningError(f"n_microbatches is {n_microbatches}: expected at least 1")
        if any(spec is not None for spec in (args_chunk_spec, kwargs_chunk_spec,
                                             output_merge_spec)):
            raise PipeliningError("chunk and merge specs other than dim 0 are not supported: "
                                  "micro-batches are cut and merged along dim 0")
        self._stage = stage
        self._n_microbatches = n_microbatches
        self._loss_fn = loss_fn
        self._scale_grads = scale_grads

    def step(self, *args: Any, target: torch.Tensor | None = None,
             losses: list | None = None, **kwargs: Any) -> torch.Tensor | None:
        """One training step over the micro-batches of ``args`` (given on the first stage),
        ``target`` and ``losses`` (on the last). Returns the merged output on the last stage
        (the micro-batches' outputs joined along dim 0), None on the others."""
        stage, m = self._stage, self._n_microbatches
        if stage.is_last and self._loss_fn is not None and target is None:
            raise PipeliningError("the last stage's step needs target= for its loss_fn")
        arg_pieces = _split(args, m) if stage.is_first else [()] * m
        kwarg_pieces = _split_kwargs(kwargs, m) if stage.is_first else [{}] * m
        targets = _split((target,), m) if target is not None else [(None,)] * m
        training = self._loss_fn is not None and torch.is_grad_enabled()
        outputs: list[tuple] = [()] * m
        mb_losses: dict[int, torch.Tensor] = {}
        order = self._order(m) if training else [("F", i) for i in range(m)]
        last_forward = max(i for i, (k, _) in enumerate(order) if k == "F")
        last_backward = max((i for i, (k, _) in enumerate(order) if k == "B"), default=-1)
        for at, (kind, mb) in enumerate(order):
            # Note [one reduce-scatter per step]
            stage.sync_gradients(at in (last_forward, last_backward))
            if kind == "F":
                outputs[mb] = stage.forward_one(mb, arg_pieces[mb], kwarg_pieces[mb], m)
                if stage.is_last and training:
                    mb_losses[mb] = self._loss_fn(outputs[mb][0], targets[mb][0])
                if not training:
                    stage._outputs.pop(mb, None)
                    stage._inputs.pop(mb, None)
            else:
                stage.backward_one(mb, mb_losses.get(mb))
        stage.sync_gradients(True)
        stage.wait_sends()
        if training and self._scale_grads:
            stage.scale_grads(m)
        if stage.is_last and losses is not None:
            losses.extend(mb_losses[i].detach() for i in range(m) if i in mb_losses)
        if not stage.is_last:
            return None
        outs = [o[0].detach() for o in outputs]
        return torch.cat(outs) if len(outs) > 1 else outs[0]

    def _order(self, m: int) -> list[tuple[str, int]]:
        raise NotImplementedError


class ScheduleGPipe(PipelineScheduleSingle):
    """Every micro-batch's forward, then every backward (Note [one reduce-scatter per step]
A stage that is fully sharded (``fully_shard``: it has ``set_requires_gradient_sync``)
reduces its gradients over dp once a step, not once a micro-batch: every forward and backward
but the last of each runs with gradient sync off, so the gradients are summed in the gathered
layout (Note [gradient accumulation] in dtensor/parallel/fsdp.py) and the last backward
reduce-scatters the sum, as torch's schedules do for FSDP2.

Note [schedule order])."""

    def _order(self, m: int) -> list[tuple[str, int]]:
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]


class Schedule1F1B(PipelineScheduleSingle):
    """Warm-up forwards, one forward one backward, cool-down backwards (Note [schedule
    order])."""

    def _order(self, m: int) -> list[tuple[str, int]]:
        s = self._stage
        warmup = min(s.num_stages - 1 - s.stage_index, m)
        order = [("F", i) for i in range(warmup)]
        for j in range(m - warmup):
            order += [("F", warmup + j), ("B", j)]
        return order + [("B", j) for j in range(m - warmup, m)]


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
