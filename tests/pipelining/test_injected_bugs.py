"""Schedule bugs injected into a correct pipeline (a stage that runs its micro-batches in
another order, one that skips a backward, one that sends a shape the other did not expect)
are reported by simpg naming each rank's stage, micro-batch and the user's line (Note
[activity] in dtensor/comm/activity.py), never a hang or a wrong answer."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import simpg
from dtensor.pipelining import PipelineStage, PipeliningError, ScheduleGPipe


class _Swapped(ScheduleGPipe):
    """Stage 1 runs its first two forwards the other way round."""

    def _single_order(self, m):
        order = super()._single_order(m)
        if self._stages[0].stage_index == 1:
            order[0], order[1] = order[1], order[0]
        return order


class _SkipsABackward(ScheduleGPipe):
    """Stage 1 forgets micro-batch 1's backward: stage 0 waits for its gradient."""

    def _single_order(self, m):
        order = super()._single_order(m)
        return order if self._stages[0].stage_index == 0 else [a for a in order
                                                                if a != ("B", 1)]


def _program(schedule_cls, static_shapes=False, batches=((6, 4), (6, 4))):
    def rank():
        s = torch.distributed.get_rank()
        stage = PipelineStage(nn.Linear(4, 4), s, 2, static_shapes=static_shapes)
        schedule = schedule_cls(stage, 2, loss_fn=F.mse_loss)
        for shape in batches:
            schedule.step(torch.randn(shape)) if s == 0 else schedule.step(  # the user's line
                target=torch.randn(shape))
    return rank


USER_LINE = re.escape(__file__) + r":\d+"


def test_another_order_of_micro_batches_names_both_stages():
    with pytest.raises(PipeliningError, match="stage 1 runs the forward of micro-batch 1 of 2 "
                                              "but stage 0 sent micro-batch 0 of 2"):
        simpg.run(_program(_Swapped), 2, timeout=30)


def test_a_skipped_backward_is_a_deadlock_naming_stage_and_micro_batch():
    with pytest.raises(simpg.DeadlockError) as caught:
        simpg.run(_program(_SkipsABackward), 2, timeout=30)
    report = str(caught.value)
    assert re.search(rf"rank 0: waiting in recv\(.*\) on group world at {USER_LINE} via "
                     r".*stage\.py:\d+ \(pipeline stage 0: backward of micro-batch 1 of 2\)",
                     report), report
    assert "(pipeline stage 1: forward of micro-batch 0 of 2)" in report, report


def test_a_shape_that_static_shapes_did_not_expect_names_the_micro_batch():
    """static_shapes=True promises every step's shapes are the first's; a smaller batch
    breaks the promise, and the receive that does not fit says where."""
    with pytest.raises(simpg.CollectiveMismatchError) as caught:
        simpg.run(_program(ScheduleGPipe, True, ((6, 4), (4, 4))), 2, timeout=30)
    report = str(caught.value)
    assert re.search(rf"rank 0: send\(shape=\(2, 4\).* at {USER_LINE} via .*"
                     r"\(pipeline stage 0: forward of micro-batch 0 of 2\)", report), report
    assert re.search(r"rank 1: recv\(shape=\(3, 4\).*\(pipeline stage 1: forward of "
                     r"micro-batch 0 of 2\)", report), report
