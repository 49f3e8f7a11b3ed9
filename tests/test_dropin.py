"""The same program on torch.distributed.tensor and on ours (both on simpg, through
``dropin_world.both``): results, placements, shapes and error types agree, item by item of the
drop-in list."""

from __future__ import annotations

import copy
import io
import pickle
import pytest
import torch
import torch.distributed as dist
import torch.distributed.tensor as tdt
from torch.distributed.device_mesh import init_device_mesh as torch_init_device_mesh

import dtensor
import simpg
from tests.support.dropin_world import Lib, both, error_type, fresh_torch_caches


def test_placement_predicates():
    def program(lib: Lib) -> tuple:
        s, r, p = lib.Shard(1), lib.Replicate(), lib.Partial("avg")
        return (s.is_shard(), s.is_shard(1), s.is_shard(0), s.is_replicate(), s.is_partial(),
                r.is_replicate(), r.is_shard(), p.is_partial(), p.is_partial("avg"),
                p.is_partial("sum"), p.is_shard())

    res = both(1, program)
    assert res["ours"] == res["torch"]


def test_negative_shard_dims_resolve_against_the_tensor():
    def program(lib: Lib) -> tuple:
        mesh = lib.init_device_mesh("cpu", (2,))
        d = lib.distribute_tensor(torch.arange(12.0).reshape(3, 4), mesh, [lib.Shard(-1)])
        moved = d.redistribute(mesh, [lib.Shard(-2)])
        return (str(d.placements[0]), tuple(d.to_local().shape), str(moved.placements[0]),
                moved.to_local().tolist())

    res = both(2, program)
    assert [r[1:] for r in res["ours"]] == [r[1:] for r in res["torch"]]
    assert [r[0][-2] for r in res["ours"]] == ["1", "1"]  # S(1) / Shard(dim=1)


def test_product_partials_reduce_and_scatter_as_torch_does():
    def program(lib: Lib) -> tuple:
        mesh = lib.init_device_mesh("cpu", (4,))
        r = dist.get_rank()
        d = lib.DTensor.from_local(torch.tensor([r + 1.0, 2.0, -1.0, 3.0, 0.5]), mesh,
                                   [lib.Partial("product")])
        return (d.full_tensor().tolist(), d.redistribute(mesh, [lib.Shard(0)]).to_local().tolist(),
                d.redistribute(mesh, [lib.Replicate()]).to_local().tolist())

    res = both(4, program)
    assert res["ours"] == res["torch"]
    # torch builds Partial("prod") but its reduction raises "Unrecognized reduce_op: prod";
    # ours reads "prod" as "product" (docs/differences.md)
    assert dtensor.Partial("prod") == dtensor.Partial("product")


def test_mesh_is_a_context_manager_and_a_missing_dim_is_a_keyerror_type():
    def program(lib: Lib) -> tuple:
        mesh = lib.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        with mesh:
            d = lib.distribute_tensor(torch.ones(4, 2), placements=[lib.Shard(0), lib.Replicate()])
        try:
            mesh["no_such_dim"]
        except KeyError:  # ours: MeshDimError, a MeshError (ValueError) and a KeyError
            missing = "KeyError"
        return tuple(d.to_local().shape), missing

    res = both(4, program)
    assert res["ours"] == res["torch"]


def test_src_data_rank_is_a_group_rank_on_a_sub_mesh():
    def program(lib: Lib) -> list:
        mesh = lib.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        data = torch.full((4,), float(dist.get_rank()))  # each rank a different tensor
        d = lib.distribute_tensor(data, mesh["tp"], [lib.Shard(0)], src_data_rank=0)
        return d.to_local().tolist()

    res = both(4, program)
    assert res["ours"] == res["torch"]  # ranks 2, 3 read from rank 2, their tp group's first


def test_from_local_refuses_a_dtensor_and_keeps_the_local_layout_in_the_stride():
    def program(lib: Lib) -> tuple:
        mesh = lib.init_device_mesh("cpu", (2,))
        d = lib.distribute_tensor(torch.ones(4, 2), mesh, [lib.Shard(0)])
        err = error_type(lambda: lib.DTensor.from_local(d, mesh, [lib.Shard(0)]))
        transposed = lib.DTensor.from_local(torch.zeros(2, 3).t(), mesh, [lib.Shard(0)])
        return err, tuple(transposed.shape), tuple(transposed.stride())

    res = both(2, program)
    assert res["ours"][0][1:] == res["torch"][0][1:]
    assert res["ours"][0][0] != "no error"


@pytest.mark.parametrize("what", ["dtype", "requires_grad", "replicas"])
def test_run_check_catches_pieces_that_cannot_form_one_tensor(what):
    def body() -> None:
        mesh = dtensor.init_device_mesh("cpu", (2,))
        r = dist.get_rank()
        local = torch.ones(2, 3)
        placements = [dtensor.Shard(0)]
        if what == "dtype":
            local = local.double() if r else local
        elif what == "requires_grad":
            local.requires_grad_(r == 0)
        else:
            local, placements = local * r, [dtensor.Replicate()]
        with pytest.raises(ValueError, match={"dtype": "different dtypes",
                                              "requires_grad": "different requires_grad",
                                              "replicas": "must be equal replicas"}[what]):
            dtensor.DTensor.from_local(local, mesh, placements, run_check=True)

    simpg.run(body, 2)


def test_pickle_torch_save_and_deepcopy_round_trip():
    def program(lib: Lib) -> list:
        mesh = lib.init_device_mesh("cpu", (2,))
        d = lib.distribute_tensor(torch.arange(6.0).reshape(3, 2), mesh, [lib.Shard(0)])
        buf = io.BytesIO()
        torch.save(d, buf)
        loaded = torch.load(io.BytesIO(buf.getvalue()), weights_only=False)
        out = []
        for copy_ in (copy.deepcopy(d), pickle.loads(pickle.dumps(d)), loaded):
            out.append((type(copy_).__name__, copy_.to_local().tolist(), tuple(copy_.shape),
                        copy_.device_mesh == mesh))
        param = torch.nn.Parameter(d)
        out.append(isinstance(copy.deepcopy(param), torch.nn.Parameter))
        return out

    res = both(2, program)
    assert res["ours"] == res["torch"]


def test_async_redistribute_and_dtypes_of_the_collectives():
    def program(lib: Lib) -> tuple:
        mesh = lib.init_device_mesh("cpu", (2,))
        x = lib.distribute_tensor(torch.arange(4.0).requires_grad_(), mesh, [lib.Shard(0)])
        y = x.redistribute(mesh, [lib.Replicate()], async_op=True)
        z = x.redistribute(mesh, [lib.Replicate()], forward_dtype=torch.bfloat16,
                           backward_dtype=torch.float64)
        (z.to_local().float() * 2).sum().backward()
        return (y.to_local().tolist(), z.dtype, z.to_local().dtype, x.grad.dtype,
                x.grad.to_local().tolist())

    res = both(2, program)
    assert res["ours"] == res["torch"]


def test_init_device_mesh_creates_the_default_group_under_a_launcher(monkeypatch):
    # what torchrun sets; the group is made from the environment, as torch's does
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for k, v in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
                 "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}.items():
        monkeypatch.setenv(k, v)
    assert not dist.is_initialized()
    try:
        mesh = dtensor.init_device_mesh("cpu", (1,))
        assert dist.is_initialized() and dist.get_backend() == "gloo"
        assert mesh.get_coordinate() == [0]
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_ranks_outside_a_mesh_hold_empty_pieces_and_wait_for_nothing():
    def program(lib: Lib) -> list:
        from torch.distributed.device_mesh import DeviceMesh as TorchMesh

        mesh = (dtensor.DeviceMesh("cpu", [0, 3]) if lib.name == "ours"
                else TorchMesh("cpu", [0, 3]))
        x = lib.distribute_tensor(torch.arange(8.0).reshape(4, 2), mesh, [lib.Shard(0)])
        y = x.redistribute(mesh, [lib.Replicate()])
        z = (x * 2 + 1).sum()
        local = lib.DTensor.from_local(torch.ones(2, 2), mesh, [lib.Shard(0)])
        full = x.full_tensor()
        return [(tuple(t.to_local().shape), tuple(t.shape))
                for t in (x, y, z, local)] + [tuple(full.shape)]

    res = both(4, program)
    assert res["ours"] == res["torch"]
    assert res["ours"][1][0] == ((0,), (4, 2))  # rank 1 is outside [0, 3]


def test_mixing_the_two_libraries_says_which_argument_is_whose():
    # Note [two DTensor libraries] in dtensor/foreign.py
    from dtensor.foreign import MixedDTensorError

    def body() -> str:
        fresh_torch_caches()
        mesh = dtensor.init_device_mesh("cpu", (2,))
        torch_mesh = torch_init_device_mesh("cpu", (2,))
        ours = dtensor.distribute_tensor(torch.ones(4, 4), mesh, [dtensor.Shard(0)])
        theirs = tdt.distribute_tensor(torch.ones(4, 4), torch_mesh, [tdt.Shard(0)])
        with pytest.raises(MixedDTensorError, match=r"tensor 0: dtensor.DTensor \(4, 4\), "
                           r"tensor 1: torch.distributed.tensor.DTensor \(4, 4\)"):
            ours + theirs
        with pytest.raises(MixedDTensorError, match=r"aten.mm.default: mixes"):
            torch.mm(ours, theirs)
        with pytest.raises(TypeError, match=r"distribute_tensor: got a torch.distributed.tensor "
                           r"DTensor \(4, 4\) \[Shard\(dim=0\)\]"):
            dtensor.distribute_tensor(theirs, mesh, [dtensor.Shard(0)])
        with pytest.raises(TypeError, match=r"DTensor.from_local: got a torch.distributed"):
            dtensor.DTensor.from_local(theirs, mesh)
        with pytest.raises(TypeError, match=r"got torch.distributed's DeviceMesh .* build it "
                           r"with dtensor.init_device_mesh"):
            ours.redistribute(torch_mesh, [dtensor.Replicate()])
        with pytest.raises(TypeError, match=r"distribute_tensor: got torch.distributed's Dev"):
            dtensor.distribute_tensor(torch.ones(2), torch_mesh, [dtensor.Shard(0)])
        # torch's DTensor first: torch's dispatcher answers first, with its own message
        with pytest.raises(RuntimeError, match=r"got mixed torch.Tensor and DTensor"):
            theirs + ours
        return "ok"

    assert simpg.run(body, 2) == ["ok", "ok"]


def test_torch_load_with_weights_only_rebuilds_dtensors_meshes_and_placements():
    # torch.load's default is weights_only=True (Note [weights_only loading])
    def program(lib: Lib) -> list:
        mesh = lib.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        d = lib.distribute_tensor(torch.arange(6.0).reshape(3, 2), mesh,
                                  [lib.Shard(0), lib.Replicate()])
        buf = io.BytesIO()
        torch.save({"d": d, "param": torch.nn.Parameter(d), "mesh": mesh,
                    "placements": [lib.Shard(1), lib.Replicate(), lib.Partial("avg")]}, buf)
        out = torch.load(io.BytesIO(buf.getvalue()))
        return [(isinstance(t, lib.DTensor), isinstance(t, torch.nn.Parameter),
                 t.to_local().tolist(), tuple(t.shape), t.requires_grad, t.device_mesh == mesh,
                 [str(p) for p in t.placements])
                for t in (out["d"], out["param"])] + [
                out["mesh"] == mesh, out["mesh"].mesh_dim_names,
                [type(p).__name__ for p in out["placements"]],
                out["placements"][0].dim, out["placements"][2].reduce_op]

    res = both(4, program)
    assert res["ours"][0][:2] == [(True, False, [[0.0, 1.0], [2.0, 3.0]], (3, 2), False, True,
                                   ["S(0)", "R"]),
                                  (True, True, [[0.0, 1.0], [2.0, 3.0]], (3, 2), True, True,
                                   ["S(0)", "R"])]
    # the placements' str differ by design (ours: S(0), torch: Shard(dim=0))
    strip = [[r[:6] if isinstance(r, tuple) else r for r in rank] for rank in res["ours"]]
    assert strip == [[r[:6] if isinstance(r, tuple) else r for r in rank]
                     for rank in res["torch"]]


@pytest.mark.parametrize("args, error", [
    (("x", "mesh", (), (), (), False), "cannot rebuild a DTensor: expected"),
    ((torch.ones(2), "mesh", "S(0)", (4,), (1,), False), "cannot rebuild a DTensor"),
    ((torch.ones(2), "mesh", [dtensor.Shard(3)], (4,), (1,), False), "Shard.3. is out of range"),
    ((torch.ones(2), "mesh", [dtensor.Shard(0)], (4,), (1, 1), False), "of equal length"),
    ((torch.ones(2), "mesh", [dtensor.Shard(0)], (4,), (1,), False, {"_spec": 1}),
     "with attributes"),
])
def test_the_rebuild_function_allowed_for_weights_only_checks_its_arguments(args, error):
    # a crafted file can pass any loadable value to an allow-listed function
    from dtensor.mesh import _restore_mesh
    from dtensor.tensor import _rebuild

    def body() -> None:
        mesh = dtensor.init_device_mesh("cpu", (2,))
        with pytest.raises((TypeError, ValueError), match=error):
            _rebuild(*[mesh if a == "mesh" else a for a in args])
        for bad in (("cpu", "0,1", None), ("cpu", [0, 1], "ab"), (3, [0, 1], None)):
            with pytest.raises(dtensor.MeshError, match="cannot restore a DeviceMesh"):
                _restore_mesh(*bad)

    simpg.run(body, 2)
