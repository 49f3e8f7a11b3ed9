"""Rules for the elementwise prims (erfcx, ndtri, the bessel functions...: torch._prims builds
them elementwise, few carry the pointwise tag), prims.view_of, and linalg__powsum: every
strategy sound; end to end they keep their placements with no collective, as torch's DTensor
does for them (ours gathered them to Replicate)."""

from __future__ import annotations

import math

import torch
from tests.support.cases import soundness_test
from tests.support.mesh_world import run_on_mesh

from dtensor import Partial, Shard, distribute_tensor, fallback_policy
from dtensor.comm.debug_mode import CommDebugMode

P, aten = torch.ops.prims, torch.ops.aten
_g = torch.Generator().manual_seed(5)
X = torch.rand(5, 3, generator=_g) * 0.8 + 0.1  # in (0, 1): ndtri's domain
Y = torch.rand(5, 3, generator=_g) + 0.5
CASES = [
    (P.erfcx.default, (X,)), (P.ndtri.default, (X,)), (P.bessel_j0.default, (X,)),
    (P.bessel_i1e.default, (X,)), (P.view_of.default, (X,)), (P.hypot.default, (X, Y)),
    (P.fmax.default, (X, Y)), (P.convert_element_type.default, (X, torch.float64)),
    (aten.linalg__powsum.default, (X, 2.0)), (aten.linalg__powsum.default, (X, 3.5, [0])),
    (aten.linalg__powsum.default, (torch.randn(7, 2, 3, generator=_g), 1.0, [0, 2], True)),
    (aten.linalg__powsum.default, (X, 0.0)), (aten.linalg__powsum.default, (X, math.inf, [1])),
]


test_every_strategy_is_sound = soundness_test(CASES, meshes=[(2,), (4,), (2, 2)],
                                              rtol=1e-5, atol=1e-5)


def test_end_to_end_no_collective_and_powsum_is_a_partial_sum():
    def body(mesh):
        x = distribute_tensor(X, mesh, [Shard(0)])
        out = {}
        with fallback_policy("error"), CommDebugMode() as comm:
            out["erfcx"] = P.erfcx.default(x)
            out["view_of"] = P.view_of.default(x)
            out["powsum"] = aten.linalg__powsum.default(x, 2.0)
        assert comm.get_total_counts() == 0
        assert out["erfcx"].placements == out["view_of"].placements == (Shard(0),)
        assert out["powsum"].placements == (Partial(),)
        return {k: v.full_tensor() for k, v in out.items()}

    got = run_on_mesh((2,), body)[0]
    torch.testing.assert_close(got["erfcx"], P.erfcx.default(X))
    torch.testing.assert_close(got["view_of"], X)
    torch.testing.assert_close(got["powsum"], aten.linalg__powsum.default(X, 2.0))
