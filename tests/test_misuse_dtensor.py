"""The misuse catalogue, dtensor side: each bad input, run on simulated ranks within a time
limit, raises its specific error type with a message that says what was wrong and what was
expected. One row per misuse: (id, world size, program, error type, message pattern).

The simpg side is tests/simpg/test_misuse.py.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
import torch.distributed as dist
from torch import nn

import dtensor
import simpg
from dtensor import (DeviceMesh, DTensor, MeshDimError, MeshError, MixedDTensorError,
                     NoShardingRuleError, Partial, PlacementError, Replicate, Shard,
                     distribute_tensor, fallback_policy, init_device_mesh)
from dtensor.redistribute.reference import StepError
from dtensor.ops.propagate import ShardingError
from dtensor.parallel import ColwiseParallel, fully_shard, parallelize_module
from dtensor.parallel.errors import ParallelPlanError, ParallelStyleError

TIMEOUT = 20.0  # seconds: every case must end well within it


def _mesh(*shape: int) -> DeviceMesh:
    return init_device_mesh("cpu", shape or (2,))


def _rank() -> int:
    return dist.get_rank()


def _two_meshes() -> tuple[DeviceMesh, DeviceMesh]:
    return DeviceMesh("cpu", [0, 1]), DeviceMesh("cpu", [2, 3])


def _torch_dtensor() -> torch.Tensor:
    import torch.distributed.tensor as tdt
    from torch.distributed.device_mesh import init_device_mesh as torch_init_device_mesh

    return tdt.distribute_tensor(torch.ones(2), torch_init_device_mesh("cpu", (2,)),
                                 [tdt.Shard(0)])


def _torch_mesh() -> Any:
    from torch.distributed.device_mesh import init_device_mesh as torch_init_device_mesh

    return torch_init_device_mesh("cpu", (2,))


def _sharded(*shape: int, placement: Any = Shard(0)) -> DTensor:
    return distribute_tensor(torch.ones(*shape), _mesh(), [placement])


def _check_replicated_plain() -> None:
    x = distribute_tensor(torch.ones(2), _mesh(), [Replicate()])
    with dtensor.dispatch.check_replicated():
        x + torch.full((2,), float(_rank()))


def _no_rule() -> None:
    x = _sharded(4, 3)
    with fallback_policy("error"):
        torch.nonzero(x)  # data-dependent output shape: no rule


def _unknown_policy() -> None:
    with fallback_policy("ignore"):
        pass


def _pinned() -> None:
    m = _mesh()
    x = distribute_tensor(torch.ones(4, 4), m, [Shard(0)]).pin()
    y = distribute_tensor(torch.ones(4, 4), m, [Shard(1)]).pin()
    torch.mm(x, y)


def _different_meshes() -> None:
    a, b = _two_meshes()
    distribute_tensor(torch.ones(2), a, [Replicate()]) + distribute_tensor(
        torch.ones(2), b, [Replicate()])


Case = tuple[str, int, Callable[[], Any], type, str]
CASES: list[Case] = [
    # meshes
    ("mesh-larger-than-world", 2, lambda: init_device_mesh("cpu", (4,)), MeshError,
     r"init_device_mesh\(\(4,\)\) needs 4 ranks, but the default group has 2"),
    ("mesh-names-count", 2, lambda: init_device_mesh("cpu", (2,), mesh_dim_names=("dp", "tp")),
     MeshError, r"has 2 names for a 1-d mesh of shape \(2,\): expected one name per mesh dim"),
    ("mesh-names-repeat", 4,
     lambda: init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "dp")), MeshError,
     r"repeats \['dp'\]: expected distinct names"),
    ("mesh-rank-outside-world", 2, lambda: DeviceMesh("cpu", [0, 5]), MeshError,
     r"holds ranks \[5\] outside the default group: expected ranks in \[0, 1\]"),
    ("mesh-rank-repeated", 2, lambda: DeviceMesh("cpu", [0, 0]), MeshError,
     r"expected distinct ranks"),
    ("mesh-dim-name-missing", 2,
     lambda: init_device_mesh("cpu", (2,), mesh_dim_names=("tp",))["dp"], MeshDimError,
     r"mesh dim 'dp' is not on mesh\(tp=2\): expected one of \['tp'\]"),
    ("mesh-unnamed-by-name", 2, lambda: _mesh()["tp"], MeshError,
     r"has no mesh_dim_names: name the dims to slice by name"),
    ("no-mesh-and-none-current", 2, lambda: distribute_tensor(torch.ones(2), placements=[
        Shard(0)]), MeshError, r"no device_mesh given and no mesh is current"),
    ("torch-mesh-given", 2, lambda: distribute_tensor(torch.ones(2), _torch_mesh(), [Shard(0)]),
     TypeError, r"got torch.distributed's DeviceMesh .* build it with dtensor.init_device_mesh"),
    # placements
    ("shard-dim-not-int", 1, lambda: Shard("0"), PlacementError,
     r"Shard\(dim='0'\): dim must be an int"),
    ("shard-dim-out-of-range", 2,
     lambda: distribute_tensor(torch.ones(2, 2), _mesh(), [Shard(5)]), PlacementError,
     r"Shard\(5\) is out of range for a 2-d tensor of shape \(2, 2\): expected a dim in "
     r"\[-2, 1\]"),
    ("shard-of-0d", 2, lambda: distribute_tensor(torch.tensor(1.0), _mesh(), [Shard(0)]),
     PlacementError, r"out of range for a 0-d tensor"),
    ("placements-count", 2,
     lambda: distribute_tensor(torch.ones(2, 2), _mesh(), [Shard(0), Replicate()]),
     PlacementError, r"2 placements \[S\(0\),R\] for a 1-d mesh: expected one placement per "
     r"mesh dim \(1\)"),
    ("not-a-placement", 2, lambda: distribute_tensor(torch.ones(2), _mesh(), ["shard"]),
     PlacementError, r"'shard' in \[shard\] is not a placement: expected Shard\(dim\)"),
    ("partial-unknown-op", 1, lambda: Partial("mul"), PlacementError,
     r"Partial\(reduce_op='mul'\): expected one of sum, avg, max, min, product"),
    ("partial-families-mixed", 4, lambda: distribute_tensor(
        torch.ones(2), _mesh(2, 2), [Partial("sum"), Partial("max")]), PlacementError,
     r"mixes Partial ops from different families"),
    # distribute_tensor / from_local
    ("distribute-a-list", 2, lambda: distribute_tensor([1.0, 2.0], _mesh(), [Shard(0)]),
     TypeError, r"distribute_tensor: tensor must be a torch.Tensor, got list"),
    ("distribute-src-rank-outside", 2, lambda: distribute_tensor(
        torch.ones(2), _mesh(), [Shard(0)], src_data_rank=3), ValueError,
     r"src_data_rank=3 is not a group rank on every dim .* expected an int in \[0, 1\] or None"),
    ("distribute-shapes-differ", 2, lambda: distribute_tensor(
        torch.ones(2 + _rank()), _mesh(), [Shard(0)]), simpg.CollectiveMismatchError,
     r"does not match across ranks"),
    ("distribute-torch-dtensor", 2, lambda: distribute_tensor(
        _torch_dtensor(), _mesh(), [Shard(0)]), TypeError,
     r"distribute_tensor: got a torch.distributed.tensor DTensor"),
    ("from-local-of-a-dtensor", 2, lambda: DTensor.from_local(_sharded(2), _mesh()), TypeError,
     r"takes this rank's piece as a plain tensor, got a DTensor"),
    ("from-local-replicas-differ", 2, lambda: DTensor.from_local(
        torch.full((2,), float(_rank())), _mesh(), [Replicate()], run_check=True), ValueError,
     r"must be equal replicas .* \[\(1,\)\] differ from \(0,\)"),
    ("from-local-dtypes-differ", 2, lambda: DTensor.from_local(
        torch.ones(2, dtype=torch.float32 if _rank() else torch.float64), _mesh(), [Shard(0)],
        run_check=True), ValueError, r"ranks hold different dtypes: \(0,\): torch.float64"),
    ("from-local-requires-grad-differs", 2, lambda: DTensor.from_local(
        torch.ones(2, requires_grad=bool(_rank())), _mesh(), [Shard(0)], run_check=True),
     ValueError, r"different requires_grad"),
    ("from-local-shape-contradicts", 2, lambda: DTensor.from_local(
        torch.ones(2 + 2 * _rank(), 3), _mesh(), [Shard(0)], run_check=True, shape=(4, 3)),
     ValueError, r"do not form a global tensor of shape \(4, 3\) under \[S\(0\)\]"),
    ("factory-negative-size", 2, lambda: dtensor.zeros(-1, 2, device_mesh=_mesh(),
                                                       placements=[Shard(0)]),
     ValueError, r"size \(-1, 2\): expected sizes >= 0"),
    # redistribute and friends
    ("redistribute-no-placements", 2, lambda: _sharded(2).redistribute(), ValueError,
     r"redistribute needs placements, one per mesh dim"),
    ("redistribute-placements-count", 2, lambda: _sharded(2).redistribute(
        placements=[Replicate(), Replicate()]), PlacementError, r"2 placements \[R,R\]"),
    ("redistribute-avg-of-ints", 2, lambda: DTensor.from_local(
        torch.ones(2, dtype=torch.int64), _mesh(), [Partial("sum")]).redistribute(
        placements=[Partial("avg")]).full_tensor(), StepError,
     r"Partial\(avg\) on torch.int64 would round: expected a float dtype"),
    ("redistribute-dtype-string", 2, lambda: _sharded(4).redistribute(
        placements=[Replicate()], forward_dtype="bf16"), TypeError,
     r"forward_dtype must be a torch.dtype \(e.g. torch.bfloat16\), got 'bf16'"),
    ("to-local-grad-placements-count", 2, lambda: _sharded(2).to_local(
        grad_placements=[Shard(0), Replicate()]), PlacementError, r"2 placements"),
    ("full-tensor-grad-placements-count", 2, lambda: _sharded(2).full_tensor(
        grad_placements=[Shard(0), Shard(0)]), PlacementError, r"2 placements"),
    # ops
    ("ops-on-different-meshes", 4, _different_meshes, ValueError,
     r"DTensors on different meshes in one op: .* move one onto the other's mesh first with "
     r"x.redistribute\(device_mesh=mesh, placements=...\)"),
    ("mm-shapes-mismatch", 2, lambda: torch.mm(_sharded(4, 3), _sharded(4, 3, placement=
                                                                        Replicate())),
     RuntimeError, r"a and b must have same reduction dim, but got \[4, 3\] X \[4, 3\]"),
    ("view-bad-size", 2, lambda: _sharded(4, 3).view(5, -1), RuntimeError,
     r"shape '\[5, -1\]' is invalid for input of size 12"),
    ("no-rule-under-error-policy", 2, _no_rule, NoShardingRuleError,
     r"aten.nonzero.default has no sharding rule \(fallback policy 'error'\)"),
    ("unknown-fallback-policy", 1, _unknown_policy, ValueError,
     r"fallback policy 'ignore': expected one of"),
    ("pinned-inputs-would-move", 2, _pinned, ShardingError,
     r"no strategy keeps input 0 \[S\(0\)\], input 1 \[S\(1\)\] in place"),
    ("plain-tensor-not-replicated", 2, _check_replicated_plain, ValueError,
     r"plain tensor argument 1 \(shape \(2,\)\) differs across ranks"),
    ("mixed-with-torch-dtensor", 2, lambda: _sharded(2) * _torch_dtensor(), MixedDTensorError,
     r"tensor 0: dtensor.DTensor \(2,\), tensor 1: torch.distributed.tensor.DTensor"),
    # parallel styles
    ("plan-key-matches-nothing", 2, lambda: parallelize_module(
        nn.Sequential(nn.Linear(4, 4)), _mesh(), {"nope": ColwiseParallel()}),
     ParallelPlanError, r"key 'nope' matches no submodule of Sequential"),
    ("colwise-on-conv", 2, lambda: parallelize_module(
        nn.Sequential(nn.Conv2d(2, 2, 1)), _mesh(), {"0": ColwiseParallel()}),
     ParallelStyleError, r"ColwiseParallel shards nn.Linear or nn.Embedding weights, but was "
     r"applied to Conv2d"),
    ("tp-style-on-2d-mesh", 4, lambda: parallelize_module(
        nn.Sequential(nn.Linear(4, 4)), _mesh(2, 2), {"0": ColwiseParallel()}),
     ParallelStyleError, r"shards over one mesh dim, but got the 2-d DeviceMesh"),
    ("plan-value-not-a-style", 2, lambda: parallelize_module(
        nn.Sequential(nn.Linear(4, 4)), _mesh(), {"0": "colwise"}), ParallelStyleError,
     r"parallelize_plan\['0'\] is 'colwise': expected a ParallelStyle"),
    ("fully-shard-a-tensor", 2, lambda: fully_shard(torch.ones(2), _mesh()), TypeError,
     r"fully_shard: expected an nn.Module, got Tensor"),
]


@pytest.mark.parametrize("world, program, error, pattern",
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_misuse_gets_a_clear_error(world, program, error, pattern):
    with pytest.raises(error, match=pattern):
        simpg.run(program, world, timeout=TIMEOUT)


def test_the_catalogue_is_large_and_its_ids_unique():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 30


def classify(world: int, program: Callable[[], Any], error: type, pattern: str) -> str:
    """One of: clear error, wrong error, hang, silent (the simpg side's tally)."""
    import re
    import threading

    box: dict[str, BaseException | None] = {"error": None}

    def attempt() -> None:
        try:
            simpg.run(program, world, timeout=TIMEOUT)
        except BaseException as e:  # noqa: BLE001 - every outcome is sorted below
            box["error"] = e

    t = threading.Thread(target=attempt, daemon=True)
    t.start()
    t.join(3 * TIMEOUT)
    if t.is_alive():
        return "hang"
    e = box["error"]
    if e is None:
        return "silent"
    return "clear error" if isinstance(e, error) and re.search(pattern, str(e)) else "wrong error"


if __name__ == "__main__":  # the tally: python -m tests.test_misuse_dtensor
    from tests.support.misuse import print_tally

    print_tally({c[0]: classify(*c[1:]) for c in CASES})
