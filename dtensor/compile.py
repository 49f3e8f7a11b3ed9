"""torch.compile of code on DTensors: what makes it traceable, and its limits.

Note [tracing DTensors]
DTensor is a traceable wrapper subclass: ``__tensor_flatten__`` names its one inner tensor
(``_local_tensor``) and a context ``(spec, binding, requires_grad)``. Dynamo guards
on that context by equality, so a compiled graph is reused only for inputs with the same
mesh, placements, global shape, stride and dtype, bound the same way (``binding``: this
rank's mesh coordinate and the names of its groups). The binding matters where ranks share
a process (simpg runs ranks as threads, and dynamo's cache is per code object, process-wide):
a graph bakes in this rank's process groups and its pieces' shapes and offsets, and would be
wrong on any other rank. Under torchrun it is a
constant of the process.

AOTAutograd then runs ``__torch_dispatch__`` with fake local tensors and under
functionalization: the sharding decision is pure Python on specs and runs as in eager; the
collectives go through ``dtensor.comm.functional`` (Note [functional collectives]).

Note [tangents]
AOTAutograd traces the backward once, with tangents whose metadata it guesses from the
forward outputs, and asks each DTensor tangent to match (``__coerce_tangent_metadata__``).
A Partial gradient is only a promise of a sum that the traced graph cannot keep for later, so
it is turned into Replicate (the sum taken, one all-reduce) before it enters the graph; any
other placement is kept. A tangent whose placements differ from the ones traced is moved to
them (``__coerce_same_metadata_as_tangent__``), as torch's DTensor does.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Callable
from typing import Any

from dtensor.mesh import DeviceMesh
from dtensor.placements import Partial, Replicate, Shard
from dtensor.spec import DTensorSpec


def one_cut_on_every_rank() -> None:
    """Note [one cut on every rank]
    AOTAutograd's partitioner chooses what the forward saves by the saved tensors' sizes, and
    an uneven layout gives each rank other sizes (an empty piece on one rank, a full one on
    the next). A collective of a backward formula that needs no gradient (aminmax's count of
    ties: a reduce-scatter) is computed in the forward and saved, on every rank; but where
    its output is read only through a view (the rank's piece of it), the partitioner may
    save the view instead, and on a rank whose piece is empty the view is the cheaper one:
    that rank saved it, and the collective stayed in its backward graph as well, issued a
    second time (seen: the compiled backwards of aminmax, native_group_norm and
    max_unpool2d re-issued a reduce-scatter on one rank only: a mismatch on simpg, a hang on
    NCCL). With views recomputed from their bases (``recompute_views``), the collective's
    own output is what every rank saves, whatever its piece sizes. Set as a compile's tracer
    meets a DTensor (its flatten): a value set before the compile did not reach the
    partitioner (measured), one set here does. torch's own answer, a vote on the cut
    (``_sync_decision_cross_ranks``), needs graphs of one structure on every rank, a world
    collective inside each compile, and every rank compiling at once (no pipeline stage
    compiles alone)."""
    import torch._functorch.config as functorch_config

    functorch_config.recompute_views = True


def binding(mesh: DeviceMesh) -> tuple:
    """What a graph traced on ``mesh`` bakes in beyond the mesh's description: this rank's
    coordinate and the names of its groups (Note [tracing DTensors]). Cached on the mesh.

    >>> import simpg
    >>> from dtensor import init_device_mesh
    >>> simpg.run(lambda: binding(init_device_mesh("cpu", (2,)))[0], 2)
    [(0,), (1,)]
    """
    found = mesh.__dict__.get("_traced_binding")  # Note [per-mesh caches] in mesh.py
    if found is None:
        names = tuple(g.group_name if g is not None else None for g in mesh._dim_groups)
        found = mesh.__dict__["_traced_binding"] = (mesh._coord, names)
    return found


def _register_mesh() -> None:
    """Note [the mesh in a graph]
    A compiled graph calls DTensor methods that take the mesh (``redistribute(mesh, ...)``,
    ``DTensor.from_local(x, mesh, ...)``), so the mesh must be something dynamo can put in a
    graph: it is an opaque reference type, a graph input guarded by ``binding`` (this rank's
    coordinate and group names). A value type would be guarded by ``==``, which ignores the
    rank: with ranks as threads, a graph traced on rank 0 from a mesh in a closure was
    reused by the other ranks, with rank 0's pieces baked in (seen: 3 ranks all got
    [0., 1.] of Replicate->Shard(0) of arange(5)). While AOTAutograd traces, the mesh arrives
    wrapped (a ``FakeScriptObject``): ``real_mesh`` unwraps it."""
    from torch._library.opaque_object import MemberType, register_opaque_type

    real = MemberType.USE_REAL
    members = {name: real for name in (
        "ndim", "shape", "size", "device_type", "mesh_dim_names", "get_coordinate",
        "get_local_rank", "get_rank", "__eq__", "__ne__", "__hash__")}
    register_opaque_type(DeviceMesh, typ="reference", members=members, guard_fn=binding_list)


def binding_list(mesh: DeviceMesh) -> list:
    return list(binding(mesh))


def real_mesh(mesh: Any) -> Any:
    """``mesh`` itself, or the mesh a tracer's ``FakeScriptObject`` stands for."""
    return getattr(mesh, "real_obj", mesh) if type(mesh) is not DeviceMesh else mesh


def _placement_fx_repr(p: Any) -> tuple[str, dict[str, type]]:
    return repr(p), {type(p).__name__: type(p)}  # their repr evals back (STYLE 1)


def _register_placements() -> None:
    """Note [placements in a graph]
    Dynamo meets placements as values of no source (``dt.placements`` of a DTensor computed
    in the graph, as a style's hook compares): as frozen dataclasses it cannot wrap them and
    breaks the graph there (seen: "SourcelessBuilder.create does not know how to wrap
    <class 'dtensor.placements.Replicate'>", 6 breaks per MLP step). As opaque value types
    they are constants, guarded by ``==``; a graph writes them as their repr."""
    from torch._library.opaque_object import register_opaque_type

    for cls in (Shard, Replicate, Partial):
        cls.__fx_repr__ = _placement_fx_repr  # type: ignore[attr-defined]
        register_opaque_type(cls, typ="value")


_register_mesh()
_register_placements()


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``then`` right after module ``name`` has been executed (once)."""

    def __init__(self, name: str, then: Callable[[], None]) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            self.then()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def when_dynamo_loads(then: Callable[[], None]) -> None:
    """Note [from_local in a graph]
    Dynamo would inline ``DTensor.from_local`` and stop at its checks on the mesh; marked
    ``allow_in_graph`` it is one node of the graph, run by AOTAutograd on fake pieces like
    ``redistribute`` and ``to_local`` (tensor methods, which dynamo puts in the graph as they
    are). Marking needs ``torch._dynamo``, whose import costs seconds: it is done when
    something else imports it (``torch.compile`` does), or now if it is loaded."""
    if "torch._dynamo" in sys.modules:
        then()
    else:
        sys.meta_path.insert(0, _AfterImport("torch._dynamo", then))
