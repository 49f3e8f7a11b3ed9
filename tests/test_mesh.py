"""DeviceMesh on simpg: the logical spec, this rank's view, groups, sub-meshes and errors."""

from __future__ import annotations

import doctest

import pytest
import torch
import torch.distributed as dist

import dtensor.mesh
import simpg
from dtensor.layout import mesh_coordinates, mesh_groups
from dtensor.mesh import DeviceMesh, MeshError, MeshSpec, init_device_mesh


def test_mesh_spec_is_a_hashable_value():
    a = MeshSpec((2, 4), ("dp", "tp"))
    assert a == MeshSpec((2, 4), ("dp", "tp")) and hash(a) == hash(MeshSpec((2, 4), ("dp", "tp")))
    assert {a: 1}[MeshSpec((2, 4), ("dp", "tp"))] == 1
    assert (a.ndim, a.size, a.dim_index("tp"), a.dim_index(-2), str(a)) == \
        (2, 8, 1, 0, "mesh(dp=2, tp=4)")


@pytest.mark.parametrize("shape,names,match", [
    ((2, 3), ("a",), r"1 names for a 2-d mesh of shape \(2, 3\): expected one name per mesh dim"),
    ((2, 3), ("a", "a"), r"repeats \['a'\]: expected distinct names"),
    ((), None, "expected a non-empty tuple of ints >= 1"),
    ((2, 0), None, "expected a non-empty tuple of ints >= 1"),
])
def test_mesh_spec_errors(shape, names, match):
    with pytest.raises(MeshError, match=match):
        MeshSpec(shape, names)


def test_mesh_spec_unknown_dim():
    with pytest.raises(MeshError, match=r"mesh dim 'x' is not on .*expected one of \['dp'"):
        MeshSpec((2, 2), ("dp", "tp")).dim_index("x")
    with pytest.raises(MeshError, match=r"expected an int in \[-2, 1\]"):
        MeshSpec((2, 2)).dim_index(2)


@pytest.mark.parametrize("shape", [(4,), (2, 2), (2, 4)], ids=str)
def test_mesh_api_and_groups(shape):
    names = ("dp", "tp")[:len(shape)] if len(shape) == 2 else ("x",)

    def body():
        mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
        rank = dist.get_rank()
        coord = tuple(mesh.get_coordinate())
        assert mesh.shape == shape and mesh.ndim == len(shape) and mesh.size() == rank_count
        assert mesh.mesh.tolist() == torch.arange(rank_count).reshape(shape).tolist()
        assert mesh.mesh_dim_names == names and mesh.get_rank() == rank
        assert coord == list(mesh_coordinates(shape))[rank]  # row-major
        for m, name in enumerate(names):
            assert mesh.size(m) == mesh.size(name) == shape[m]
            assert mesh.get_local_rank(m) == mesh.get_local_rank(name) == coord[m]
            group = mesh.get_group(name)
            assert group is mesh.get_group(m)
            members = next(g for g in mesh_groups(shape, (m,)) if coord in g)
            assert dist.get_process_group_ranks(group) == [mesh.mesh[c].item() for c in members]
            t = torch.tensor([rank])
            dist.all_reduce(t, group=group)  # the group really moves data among its members
            assert t.item() == sum(mesh.mesh[c].item() for c in members)
        all_dims = tuple(range(len(shape)))
        whole = mesh.group_for(all_dims)
        assert dist.get_process_group_ranks(whole) == list(range(rank_count))
        return mesh

    rank_count = torch.Size(shape).numel()
    meshes = simpg.run(body, rank_count)
    assert all(m == meshes[0] and hash(m) == hash(meshes[0]) for m in meshes)
    ranks = torch.arange(rank_count).reshape(shape).tolist()
    assert repr(meshes[0]).startswith(f"DeviceMesh('cpu', {ranks}")


def test_group_for_order_is_mesh_groups_order_on_a_permuted_mesh():
    # Ranks not increasing row-major: group ranks must still follow mesh_groups order.
    ranks = [[0, 4, 1, 5], [2, 6, 3, 7]]

    def body():
        mesh = DeviceMesh("cpu", ranks, mesh_dim_names=("a", "b"))
        coord = tuple(mesh.get_coordinate())
        out = {}
        for dims in [(0,), (1,), (0, 1)]:
            group = mesh.group_for(dims)
            assert group is mesh.group_for(dims)  # cached
            members = next(g for g in mesh_groups((2, 4), dims) if coord in g)
            expected = [ranks[c[0]][c[1]] for c in members]
            assert dist.get_process_group_ranks(group) == expected
            assert dist.get_rank(group) == members.index(coord)
            t = torch.tensor([dist.get_rank()])
            dist.all_gather(gathered := [torch.empty_like(t) for _ in expected], t, group=group)
            out[dims] = [g.item() for g in gathered]
        return out

    for out in simpg.run(body, 8):
        assert out[(0, 1)] == [0, 4, 1, 5, 2, 6, 3, 7]


def test_sub_meshes_by_name():
    def body():
        mesh = init_device_mesh("cpu", (2, 4), mesh_dim_names=("dp", "tp"))
        tp, dp, both, flipped = mesh["tp"], mesh["dp"], mesh["dp", "tp"], mesh["tp", "dp"]
        coord = mesh.get_coordinate()
        assert tp.mesh_dim_names == ("tp",) and tp.shape == (4,)
        assert tp.get_coordinate() == [coord[1]] and dp.get_coordinate() == [coord[0]]
        assert tp.get_group() is mesh.get_group("tp") and dp.get_group() is mesh.get_group(0)
        assert both == mesh
        assert flipped.shape == (4, 2) and flipped.get_coordinate() == coord[::-1]
        assert flipped.mesh.tolist() == mesh.mesh.T.tolist()
        # the flipped mesh's combined group is ordered tp-major, unlike the parent's
        assert dist.get_process_group_ranks(flipped.group_for((0, 1))) == \
            mesh.mesh.T.reshape(-1).tolist()
        return tp.mesh.tolist(), dp.mesh.tolist()

    out = simpg.run(body, 8)
    assert out[5] == ([4, 5, 6, 7], [1, 5])


def test_ranks_outside_the_mesh():
    def body():
        mesh = DeviceMesh("cpu", [0, 1])  # every rank constructs it, as in torch
        if dist.get_rank() < 2:
            return mesh.get_coordinate()
        with pytest.raises(MeshError, match=r"rank 2 is not on this mesh"):
            mesh.get_group()
        with pytest.raises(MeshError, match="not on this mesh"):
            mesh.get_local_rank()
        return mesh.get_coordinate()

    assert simpg.run(body, 3) == [[0], [1], None]


@pytest.mark.parametrize("build,match", [
    (lambda: init_device_mesh("cpu", (2, 3)),
     r"init_device_mesh\(\(2, 3\)\) needs 6 ranks, but the default group has 4"),
    (lambda: init_device_mesh("cpu", (2, 2), mesh_dim_names=("a",)),
     "1 names for a 2-d mesh"),
    (lambda: init_device_mesh("cpu", (2, 2), mesh_dim_names=("a", "a")), "repeats"),
    (lambda: init_device_mesh("cpu", (2, 2), mesh_dim_names=("a", "b"))["x"],
     r"mesh dim 'x' is not on mesh\(a=2, b=2\)"),
    (lambda: init_device_mesh("cpu", (2, 2))["a"], "has no mesh_dim_names"),
    (lambda: DeviceMesh("cpu", [[0, 1], [2, 7]]), r"holds ranks \[7\] outside the default group"),
    (lambda: DeviceMesh("cpu", [0, 0, 1, 2]), "expected distinct ranks"),
    (lambda: DeviceMesh("cpu", [[0.0, 1.0]]), "integer ranks"),
    (lambda: DeviceMesh("tpu", [0, 1, 2, 3]), r"device_type 'tpu': expected one of"),
    (lambda: init_device_mesh("cpu", (2, 2)).get_group(), "expected a mesh_dim"),
], ids=["size", "names-count", "names-dup", "unknown-name", "no-names", "rank-outside",
        "dup-ranks", "float-ranks", "device", "get-group-2d"])
def test_errors(build, match):
    def body():
        with pytest.raises(MeshError, match=match):
            build()

    simpg.run(body, 4)


def test_not_initialized():
    with pytest.raises(MeshError, match="torch.distributed is not initialized"):
        init_device_mesh("cpu", (2,))


def test_cuda_device_type_is_sane_without_a_gpu():
    def body():
        mesh = init_device_mesh("cuda", (2,))
        return mesh.device_type, mesh.get_coordinate()

    assert simpg.run(body, 2) == [("cuda", [0]), ("cuda", [1])]


def test_doctests():
    assert doctest.testmod(dtensor.mesh, raise_on_error=False).failed == 0
