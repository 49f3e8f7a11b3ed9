"""Note [relocating an in-place target] in dtensor/dispatch/general.py: an in-place op whose
target's placement admits no strategy moves the target first, as one device would just write it;
views, pins and from_local's shared piece keep the ShardingError."""

from __future__ import annotations

import pytest
import torch

from dtensor import DTensor, Partial, Replicate, Shard, distribute_tensor, fallback_policy
from dtensor.ops.propagate import ShardingError
from tests.support.mesh_world import run_on_mesh as _world

VALUES = torch.tensor([1.0, 2.0, 3.5])


def _partial(mesh) -> DTensor:
    # an op's output: nothing else holds its piece
    return DTensor.from_local(VALUES.clone(), mesh, [Partial()]) * 1.0


def test_digamma_in_place_on_a_partial_moves_the_target_and_equals_one_device():
    def body(mesh):
        with fallback_policy("error"):
            x = _partial(mesh)
            y = x.digamma_()
        return y is x, x.placements, x.full_tensor()

    for same, placements, value in _world((2,), body):
        assert same and placements != (Partial(),)
        torch.testing.assert_close(value, torch.digamma(VALUES * 2))


def test_mvlgamma_backward_runs_without_the_fallback():
    full = torch.tensor([[2.5, 3.0], [4.0, 5.5], [3.3, 2.2]])

    def body(mesh):
        x = distribute_tensor(full, mesh, [Shard(0)]).requires_grad_()
        with fallback_policy("error"):
            torch.mvlgamma(x, 2).sum().backward()
        return x.grad.full_tensor()

    ref = full.clone().requires_grad_()
    torch.mvlgamma(ref, 2).sum().backward()
    for grad in _world((2,), body):
        torch.testing.assert_close(grad, ref.grad)


@pytest.mark.parametrize("op", ["digamma_", "clamp_"])
def test_from_locals_piece_is_reduced_in_place_and_the_callers_tensor_sees_it(op):
    def body(mesh):
        mine = VALUES.clone()
        x = DTensor.from_local(mine, mesh, [Partial()])
        with fallback_policy("error"):
            y = x.digamma_() if op == "digamma_" else x.clamp_(max=5.0)
        return y is x, x.placements, x.full_tensor(), mine

    want = torch.digamma(VALUES * 2) if op == "digamma_" else (VALUES * 2).clamp(max=5.0)
    for same, placements, value, mine in _world((2,), body):
        assert same and placements == (Replicate(),)  # the only move that keeps the piece
        torch.testing.assert_close(value, want)
        torch.testing.assert_close(mine, want)  # the caller's tensor is the piece still


@pytest.mark.parametrize("hold", ["view", "pin", "from_local_and_a_view"])
def test_a_target_something_else_shares_is_not_moved(hold):
    def body(mesh):
        if hold == "from_local_and_a_view":  # the caller's tensor and a DTensor view of it
            x = DTensor.from_local(VALUES.clone(), mesh, [Partial()])
        else:
            x = _partial(mesh)
        keep = x.view(3) if hold != "pin" else None
        if hold == "pin":
            x.pin()
        with pytest.raises(ShardingError, match=r"moves only when it is not pinned and no view"):
            x.digamma_()
        return x.placements, keep is None or keep.placements == (Partial(),)

    assert _world((2,), body) == [((Partial(),), True)] * 2
