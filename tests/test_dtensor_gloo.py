"""The dtensor core on real gloo processes, bit for bit the same as on simpg."""

from __future__ import annotations


import pytest
import torch

import simpg
from tests.support.gloo_runner import assert_bit_for_bit, load_program, run_program_on_gloo
from tests.support.paths import PROGRAMS

PROGRAM = PROGRAMS / "dtensor_program.py"


def _program():
    return load_program(PROGRAM).program


@pytest.mark.gloo
def test_dtensor_core_on_gloo_matches_simpg_bit_for_bit(tmp_path):
    on_simpg = simpg.run(_program(), 4, timeout=60)
    on_gloo = run_program_on_gloo(PROGRAM, 4, tmp_path, timeout_s=180.0)
    full = torch.arange(35, dtype=torch.float64).reshape(7, 5)
    assert torch.equal(on_simpg[0]["to R,R"], full)
    assert torch.equal(on_simpg[0]["grad"], torch.full((7, 5), 6.0))  # 2 dp ranks x 3
    assert_bit_for_bit(on_simpg, on_gloo)
