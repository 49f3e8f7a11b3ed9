"""simpg behaving as gloo or as a portable backend (Note [behaving as gloo]): the groups
declare the profile's set, and each rank refuses what the profile lacks."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import simpg
from simpg.capabilities import PROFILES


def _declared() -> dict[str, bool]:
    return dict(dist.group.WORLD.collective_capabilities)


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_groups_declare_the_profile(profile: str) -> None:
    expected = PROFILES[profile].declared()
    assert simpg.run(_declared, 2, capabilities=profile) == [expected] * 2
    with simpg.behave_as(profile):
        assert simpg.run(_declared, 2) == [expected] * 2

        def subgroup() -> dict[str, bool]:
            return dict(dist.new_group([0, 1]).collective_capabilities)

        assert simpg.run(subgroup, 2) == [expected] * 2


def test_default_is_full_and_an_argument_beats_the_block() -> None:
    assert simpg.run(_declared, 2) == [PROFILES["full"].declared()] * 2
    with simpg.behave_as("portable"):
        assert simpg.run(_declared, 2, capabilities="gloo") == [PROFILES["gloo"].declared()] * 2
    assert simpg.run(_declared, 2)[0]["avg"] is True  # the block ended


def test_an_unknown_profile_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"capabilities='nccl': expected one of 'full', 'gloo'"):
        simpg.run(_declared, 2, capabilities="nccl")
    with pytest.raises(ValueError, match="capabilities='mpi'"), simpg.behave_as("mpi"):
        pass


def _uneven_all_gather() -> None:
    r = dist.get_rank()
    dist.all_gather([torch.empty(k + 1) for k in range(2)], torch.ones(r + 1))


def _even_all_gather() -> list[float]:
    outs = [torch.empty(2) for _ in range(2)]
    dist.all_gather(outs, torch.full((2,), float(dist.get_rank())))
    return [o[0].item() for o in outs]


def _uneven_all_to_all() -> None:
    r = dist.get_rank()
    dist.all_to_all([torch.empty(r + k + 1) for k in range(2)],
                    [torch.ones(r + k + 1) for k in range(2)])


def _stacked_all_gather_into_tensor() -> None:
    dist.all_gather_single(torch.empty(2, 2, 4), torch.ones(2, 4))  # NCCL takes it


def _reduce_scatter() -> None:
    dist.reduce_scatter(torch.empty(2), [torch.ones(2), torch.ones(2)])


def _reduce_scatter_tensor() -> None:
    dist.reduce_scatter_single(torch.empty(2), torch.ones(4))


def _avg() -> None:
    dist.all_reduce(torch.ones(2), op=dist.ReduceOp.AVG)


CASES = [  # (body, what the error names, profiles that refuse it)
    (_uneven_all_gather, "all_gather with tensors of different shapes", ("gloo", "portable")),
    (_uneven_all_to_all, "all_to_all with tensors of different shapes", ("gloo", "portable")),
    (_stacked_all_gather_into_tensor, r"all_gather_into_tensor: .*\(4, 4\), got \(2, 2, 4\)",
     ("gloo", "portable")),
    (_reduce_scatter, "reduce_scatter: ", ("portable",)),
    (_reduce_scatter_tensor, "reduce_scatter_tensor: ", ("portable",)),
    (_avg, "ReduceOp.AVG: ", ("portable",)),
]


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("body,what,refused_by", CASES, ids=[c[0].__name__ for c in CASES])
def test_a_profile_refuses_exactly_what_it_lacks(body, what, refused_by, profile) -> None:
    if profile in refused_by:
        with pytest.raises(simpg.UnsupportedCollectiveError,
                           match=rf"(?s)(?=.*{what})(?=.*simpg behaves as '{profile}')"):
            simpg.run(body, 2, capabilities=profile)
    else:
        simpg.run(body, 2, capabilities=profile)


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_what_every_backend_has_still_runs(profile: str) -> None:
    assert simpg.run(_even_all_gather, 2, capabilities=profile) == [[0.0, 1.0]] * 2

    def gather_along_dim0() -> list[float]:
        out = torch.empty(4, 3)
        dist.all_gather_single(out, torch.full((2, 3), float(dist.get_rank())))
        return out[:, 0].tolist()

    assert simpg.run(gather_along_dim0, 2, capabilities=profile) == [[0.0, 0.0, 1.0, 1.0]] * 2
