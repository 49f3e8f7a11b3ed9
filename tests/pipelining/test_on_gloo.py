"""Every pipeline schedule on real gloo processes gives what it gives on simpg, bit for bit,
and what one device gives (tests/programs/pipeline_program.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import simpg
from tests.support.gloo_runner import assert_bit_for_bit, load_program, run_program_on_gloo
from tests.support.paths import PROGRAMS

PROGRAM = PROGRAMS / "pipeline_program.py"


def _one_device(prog, n_layers: int) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
    whole = prog.model(n_layers)
    opt = torch.optim.SGD(whole.parameters(), lr=0.1)
    losses = []
    for x, y in prog.data():
        parts = [F.mse_loss(whole(a), b) for a, b in zip(torch.tensor_split(x, prog.M),
                                                         torch.tensor_split(y, prog.M))]
        (sum(parts) / prog.M).backward()
        opt.step()
        opt.zero_grad()
        losses.append(torch.stack([p.detach() for p in parts]))
    return {k: v.detach() for k, v in whole.state_dict().items()}, losses


def test_every_schedule_on_gloo_matches_simpg_and_one_device(tmp_path):
    prog = load_program(PROGRAM)
    on_simpg = simpg.run(prog.program, prog.PP)
    for name, v in prog.SCHEDULES.items():
        weights, losses = _one_device(prog, prog.PP * v)
        seen = set()
        for result in on_simpg:
            for key, value in result.items():
                if not key.startswith(name + "/"):
                    continue
                what = key[len(name) + 1:]
                if what.startswith("losses"):
                    torch.testing.assert_close(value, losses[int(what.split()[1])])
                else:
                    torch.testing.assert_close(value, weights[what], msg=key)
                    seen.add(what)
        assert seen == set(weights), name
    on_gloo = run_program_on_gloo(PROGRAM, prog.PP, tmp_path, timeout_s=240.0)
    assert_bit_for_bit(on_simpg, on_gloo)


pytestmark = pytest.mark.gloo
