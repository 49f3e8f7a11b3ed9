"""The device mesh: a logical grid of ranks (``MeshSpec``) bound to process groups.

``MeshSpec`` is the logical part: shape and dim names, frozen and hashable. Sharding rules and
the planner need nothing else, so it is what they take and what caches key on. ``DeviceMesh``
binds a spec to global ranks and to ``torch.distributed`` process groups of any backend
(nccl, gloo, simpg), through the public torch.distributed API only.

Build one on every rank of the default group, like torch's ``DeviceMesh``:

>>> import simpg
>>> simpg.run(lambda: init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
...           .get_coordinate(), 4)
[[0, 0], [0, 1], [1, 0], [1, 1]]
"""

from __future__ import annotations

import contextvars
import itertools
import math
import os
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch._opaque_base import OpaqueBaseMeta

from dtensor.layout import mesh_coordinates, mesh_groups

MeshDim = int | str
DEVICE_TYPES = ("cpu", "cuda")


class MeshError(ValueError, RuntimeError):
    """A mesh that cannot be built or a mesh dim / rank that is not on the mesh. A
    ``RuntimeError`` too: torch raises that for the same mistakes (Note [torch's error types]
    in dtensor/__init__.py).

    >>> MeshSpec((2, 0))
    Traceback (most recent call last):
    ...
    dtensor.mesh.MeshError: mesh shape (2, 0): expected a non-empty tuple of ints >= 1
    """


class MeshDimError(MeshError, KeyError, IndexError):
    """A mesh dim the mesh lacks: a ``KeyError`` too, as ``mesh["nope"]`` is in torch, and an
    ``IndexError``, as torch's ``mesh.size(3)`` on a 1-d mesh is.

    >>> try:
    ...     MeshSpec((2,), ("dp",)).dim_index("tp")
    ... except KeyError as e:
    ...     print(type(e).__name__, e)
    MeshDimError mesh dim 'tp' is not on mesh(dp=2): expected one of ['dp']
    """

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


# Note [current mesh]
# ``with mesh:`` makes ``mesh`` the default of distribute_tensor, the factories and from_local
# on this rank (a ContextVar: ranks that are threads each have their own), innermost first.
_current: contextvars.ContextVar[tuple] = contextvars.ContextVar("dtensor_mesh", default=())


# Note [pickling meshes]
# A mesh holds process groups, which cannot be pickled. It pickles as its description
# (device type, ranks, dim names) and unpickles as the live mesh of this rank with that
# description, the one the program built (a checkpoint loaded where the mesh exists), or, if
# there is none, as a new one, which every rank of the default group must then build in the
# same order (SPMD, as when every rank loads the same checkpoint). ``copy.deepcopy`` keeps the
# mesh itself: it is an identity, not data.
_live: contextvars.ContextVar[dict | None] = contextvars.ContextVar("dtensor_meshes",
                                                                    default=None)


def _remember(mesh: DeviceMesh) -> None:
    live = _live.get()
    if live is None:
        live = weakref.WeakValueDictionary()
        _live.set(live)
    live[mesh._key()] = mesh


def _restore_mesh(device_type: str, ranks: list, names: tuple[str, ...] | None) -> DeviceMesh:
    """Note [pickling meshes]; ``torch.load`` with ``weights_only`` may call it with any
    loadable values (Note [weights_only loading] in dtensor/__init__.py)."""
    if not (isinstance(device_type, str) and isinstance(ranks, list)
            and (names is None or (isinstance(names, (tuple, list))
                                   and all(isinstance(n, str) for n in names)))):
        raise MeshError(f"cannot restore a DeviceMesh from ({device_type!r}, {ranks!r}, "
                        f"{names!r}): expected (device type, nested list of ranks, None or "
                        "dim names)")
    key = (device_type, tuple(torch.as_tensor(ranks).shape),
           tuple(torch.as_tensor(ranks).reshape(-1).tolist()), names)
    live = _live.get()
    found = live.get(key) if live is not None else None
    if found is not None:
        return found
    return DeviceMesh(device_type, ranks, mesh_dim_names=names)


def current_mesh() -> DeviceMesh | None:
    """The innermost mesh entered with ``with mesh:`` on this rank, or None.

    >>> import simpg
    >>> def body():
    ...     mesh = init_device_mesh("cpu", (2,))
    ...     with mesh:
    ...         inside = current_mesh() is mesh
    ...     return inside, current_mesh()
    >>> simpg.run(body, 2)
    [(True, None), (True, None)]
    """
    stack = _current.get()
    return stack[-1] if stack else None


def resolve_mesh(mesh: DeviceMesh | None, what: str) -> DeviceMesh:
    """``mesh``, else the current mesh (Note [current mesh]); a clear error for neither."""
    if mesh is None:
        mesh = current_mesh()
        if mesh is None:
            raise MeshError(f"{what}: no device_mesh given and no mesh is current: pass "
                            f"device_mesh= or run inside `with mesh:`")
    if not isinstance(mesh, DeviceMesh):
        from dtensor.foreign import refuse_torch_mesh

        refuse_torch_mesh(mesh, what)
        raise TypeError(f"{what}: device_mesh must be a dtensor DeviceMesh, got "
                        f"{type(mesh).__name__}")
    return mesh


@dataclass(frozen=True, slots=True)
class MeshSpec:
    """The logical mesh: sizes and optional names, no ranks, no groups.

    >>> MeshSpec((2, 4), ("dp", "tp")).dim_index("tp")
    1
    """

    shape: tuple[int, ...]
    dim_names: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not self.shape or any(isinstance(n, bool) or not isinstance(n, int) or n < 1
                                 for n in self.shape):
            raise MeshError(f"mesh shape {self.shape}: expected a non-empty tuple of ints >= 1")
        names = self.dim_names
        if names is None:
            return
        if len(names) != len(self.shape):
            raise MeshError(f"mesh_dim_names {names} has {len(names)} names for a "
                            f"{len(self.shape)}-d mesh of shape {self.shape}: expected one "
                            f"name per mesh dim")
        if any(not isinstance(n, str) for n in names):
            raise MeshError(f"mesh_dim_names {names}: expected strings")
        dups = sorted({n for n in names if names.count(n) > 1})
        if dups:
            raise MeshError(f"mesh_dim_names {names} repeats {dups}: expected distinct names")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def dim_index(self, dim: MeshDim) -> int:
        """The index of mesh dim ``dim`` (an int, negative allowed, or a name)."""
        if isinstance(dim, str):
            if self.dim_names is None or dim not in self.dim_names:
                raise MeshDimError(f"mesh dim {dim!r} is not on {self}: expected one of "
                                   f"{list(self.dim_names or ())}")
            return self.dim_names.index(dim)
        if isinstance(dim, bool) or not isinstance(dim, int) or not -self.ndim <= dim < self.ndim:
            raise MeshDimError(f"mesh dim {dim!r} is not on {self.ndim}-d mesh {self}: "
                               f"expected an int in [{-self.ndim}, {self.ndim - 1}] or a dim name")
        return dim % self.ndim

    def __str__(self) -> str:
        if self.dim_names is None:
            return f"mesh{self.shape}"
        return "mesh(" + ", ".join(f"{k}={n}" for k, n in zip(self.dim_names, self.shape)) + ")"


def _dim_subsets(ndim: int) -> list[tuple[int, ...]]:
    """Every set of mesh dims, single dims first (the per-dim groups), in one order."""
    return [dims for k in range(1, ndim + 1) for dims in itertools.combinations(range(ndim), k)]


class _Groups:
    """Process groups shared by a mesh and its sub-meshes, keyed by global ranks in group-rank
    order (so a group is made once however many meshes use it)."""

    def __init__(self) -> None:
        self.by_ranks: dict[tuple[int, ...], dist.ProcessGroup] = {}


class DeviceMesh(metaclass=OpaqueBaseMeta):  # a graph input: Note [the mesh in a graph]
    """A logical mesh (``spec``) bound to global ranks and process groups.

    ``mesh`` is a nested list or tensor of global ranks; rank ``mesh[c]`` sits at coordinate
    ``c``. Construct it on every rank of the default group (ranks outside the mesh too: they
    get ``get_coordinate() is None``), in the same order, because it creates the per-dim
    groups collectively (Note [Creating groups]).

    >>> import simpg
    >>> simpg.run(lambda: DeviceMesh("cpu", [[0, 2], [1, 3]]).get_local_rank(1), 4)
    [0, 0, 1, 1]
    """

    def __init__(self, device_type: str, mesh: torch.Tensor | Sequence,
                 *, mesh_dim_names: Sequence[str] | None = None) -> None:
        ranks = _as_rank_tensor(mesh)
        names = None if mesh_dim_names is None else tuple(mesh_dim_names)
        self._bind(device_type, ranks, MeshSpec(tuple(ranks.shape), names), _Groups())
        _check_world(self)
        _init_device(self)
        self._create_dim_groups()
        _remember(self)

    # -- construction ------------------------------------------------------------------------
    def _bind(self, device_type: str, ranks: torch.Tensor, spec: MeshSpec,
              groups: _Groups) -> None:
        if device_type not in DEVICE_TYPES:
            raise MeshError(f"device_type {device_type!r}: expected one of {DEVICE_TYPES}")
        flat = ranks.reshape(-1).tolist()
        if len(set(flat)) != len(flat) or min(flat) < 0:
            raise MeshError(f"mesh {ranks.tolist()}: expected distinct ranks >= 0")
        self.device_type = device_type
        self.spec = spec
        self._ranks = ranks
        self._flat: tuple[int, ...] = tuple(flat)
        self._groups = groups
        self._rank_at = dict(zip(mesh_coordinates(spec.shape), flat))
        me = dist.get_rank() if dist.is_initialized() else -1
        self._coord: tuple[int, ...] | None = next(
            (c for c, r in self._rank_at.items() if r == me), None)
        self._dim_groups: list[dist.ProcessGroup | None] = [None] * spec.ndim
        # Note [per-mesh caches]: what a layer keeps per mesh, because its entries hold this
        # mesh's process groups or this rank's coordinate; declared here, filled by its owner
        # (read through __dict__, as the compiled fast path does, so a mesh stand-in without
        # them in a traced graph reads as empty)
        self._fast_plans: dict[tuple, Any] = {}  # dispatch: the fast path (entry.py, native/)
        self._dispatch_plans: dict[tuple, Any] = {}  # dispatch/plans.py: op plans
        self._redistribute_programs: dict[tuple, Any] = {}  # redistribute/execute.py
        self._traced_binding: tuple | None = None  # compile.py: coordinate and group names

    def _create_dim_groups(self) -> None:
        # Note [Creating groups]
        # Per-dim groups are made at construction by *every* rank of the default group, for
        # every group of every dim, in one order, with use_local_synchronization=False. c10d
        # then names each group from a counter that every rank advances on every call, so
        # members agree on the name (gloo rendezvouses on a store prefix made from it; simpg
        # matches groups by it). With use_local_synchronization=True the name hashes the ranks
        # with the number of groups the *calling* process holds, which differs between ranks
        # as soon as some made a group the others did not: members would wait on different
        # names (a hang on gloo, a deadlock report on simpg). sort_ranks=False keeps the group
        # rank order equal to layout.mesh_groups order even when the mesh's ranks are not
        # increasing along it.
        # The groups over several dims (group_for) are made here too, the same way: made
        # lazily by their members only, they took names that differed between members once
        # some held more groups than others (two overlapping meshes: a deadlock). Whether a
        # rank set was made is tracked for every rank, member or not, so that all advance
        # the counter alike; a set that is the whole world in rank order is the default group.
        world = tuple(range(dist.get_world_size()))
        made: set[tuple[int, ...]] = set()
        for dims in _dim_subsets(self.ndim):
            for members in mesh_groups(self.shape, dims):
                ranks = tuple(self._rank_at[c] for c in members)
                if ranks not in made:
                    made.add(ranks)
                    if len(dims) > 1 and ranks == world:
                        pg = dist.group.WORLD
                    else:
                        pg = dist.new_group(list(ranks), sort_ranks=False)
                    if pg is not None and pg != dist.GroupMember.NON_GROUP_MEMBER:
                        self._groups.by_ranks[ranks] = pg
                if len(dims) == 1 and self._coord is not None and self._coord in members:
                    self._dim_groups[dims[0]] = self._groups.by_ranks[ranks]

    # -- logical view ------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self.spec.shape

    @property
    def ndim(self) -> int:
        return self.spec.ndim

    @property
    def mesh_dim_names(self) -> tuple[str, ...] | None:
        return self.spec.dim_names

    @property
    def mesh(self) -> torch.Tensor:
        """The global ranks, a tensor of ``shape``."""
        return self._ranks.clone()

    def size(self, mesh_dim: MeshDim | None = None) -> int:
        return self.spec.size if mesh_dim is None else self.shape[self.spec.dim_index(mesh_dim)]

    # -- this rank ---------------------------------------------------------------------------
    def get_rank(self) -> int:
        """This process's global rank."""
        return dist.get_rank()

    def get_coordinate(self) -> list[int] | None:
        """This rank's coordinate on the mesh, or None when it is not on the mesh."""
        return None if self._coord is None else list(self._coord)

    def get_local_rank(self, mesh_dim: MeshDim | None = None) -> int:
        """This rank's index along ``mesh_dim`` (optional on a 1-d mesh)."""
        m = self._one_dim(mesh_dim, "get_local_rank")
        return self._require_coord("get_local_rank")[m]

    def get_group(self, mesh_dim: MeshDim | None = None) -> dist.ProcessGroup:
        """The group along ``mesh_dim`` that holds this rank (optional on a 1-d mesh)."""
        m = self._one_dim(mesh_dim, "get_group")
        self._require_coord("get_group")
        group = self._dim_groups[m]
        assert group is not None  # made at construction for every dim of a member rank
        return group

    def get_all_groups(self) -> list[dist.ProcessGroup]:
        return [self.get_group(m) for m in range(self.ndim)]

    def group_for(self, mesh_dims: Sequence[int]) -> dist.ProcessGroup:
        """The group spanning ``mesh_dims`` that holds this rank; group ranks are in
        ``layout.mesh_groups`` order (row-major over the mesh dims). Made on first use.

        Note [Lazy groups]: the groups of every set of this mesh's dims are made with the
        mesh (Note [Creating groups]). A sub-mesh whose dims run in another order than its
        root's asks for rank orders not made there; those are made here, with
        use_local_synchronization=True, so only the members call it; c10d names it from the
        ranks and the number of groups each member already holds, so members must have made
        the same number of groups before (true when every rank of the mesh runs the same
        redistributions and no other mesh overlaps it partly).
        """
        dims = tuple(sorted({self.spec.dim_index(m) for m in mesh_dims}))
        if not dims:
            raise MeshError(f"group_for({tuple(mesh_dims)}): expected at least one mesh dim")
        coord = self._require_coord("group_for")
        if len(dims) == 1:
            return self.get_group(dims[0])
        members = next(g for g in mesh_groups(self.shape, dims) if coord in g)
        ranks = tuple(self._rank_at[c] for c in members)
        pg = self._groups.by_ranks.get(ranks)
        if pg is None:
            if ranks == tuple(range(dist.get_world_size())):
                pg = dist.group.WORLD
            else:
                pg = dist.new_group(list(ranks), use_local_synchronization=True,
                                    sort_ranks=False)
            assert pg is not None
            self._groups.by_ranks[ranks] = pg
        return pg

    # -- sub-meshes --------------------------------------------------------------------------
    def __getitem__(self, names: str | tuple[str, ...]) -> DeviceMesh:
        """The sub-mesh over the named dims, in the order given, that holds this rank."""
        names = (names,) if isinstance(names, str) else tuple(names)
        if self.mesh_dim_names is None:
            raise MeshError(f"{self!r} has no mesh_dim_names: name the dims to slice by name")
        dims = [self.spec.dim_index(n) for n in names]
        if len(set(dims)) != len(dims) or not dims:
            raise MeshError(f"mesh[{names}]: expected distinct dim names of {self.mesh_dim_names}")
        coord = self._require_coord(f"mesh[{names}]")
        index = tuple(slice(None) if m in dims else coord[m] for m in range(self.ndim))
        # The kept dims stay in mesh order after indexing; permute them into the order given.
        kept = sorted(dims)
        ranks = self._ranks[index].permute([kept.index(m) for m in dims]).contiguous()
        sub = DeviceMesh.__new__(DeviceMesh)
        sub._bind(self.device_type, ranks, MeshSpec(tuple(ranks.shape), names), self._groups)
        # A sub-mesh's dim groups are its parent's: the same ranks in the same order.
        sub._dim_groups = [self._dim_groups[m] for m in dims]
        # Remember where it came from: fully_shard composes a dp sub-mesh with parameters on
        # a sibling tp sub-mesh by laying them out over the mesh both were cut from.
        root, root_dims = self.root_mesh()
        sub._root = root
        sub._root_dims = tuple(root_dims[m] for m in dims)
        _remember(sub)
        return sub

    def root_mesh(self) -> tuple[DeviceMesh, tuple[int, ...]]:
        """The mesh this one was sliced from (itself if none), and the dim of that mesh each
        of this mesh's dims is."""
        root = getattr(self, "_root", None)
        if root is None:
            return self, tuple(range(self.ndim))
        return root, self._root_dims

    # -- the current mesh (Note [current mesh]) ---------------------------------------------
    def __enter__(self) -> DeviceMesh:
        self.__dict__.setdefault("_tokens", []).append(_current.set(_current.get() + (self,)))
        return self

    def __exit__(self, *exc: object) -> None:
        _current.reset(self.__dict__["_tokens"].pop())

    # -- pickling (Note [pickling meshes]) ---------------------------------------------------
    def __reduce__(self) -> tuple:
        return (_restore_mesh, (self.device_type, self._ranks.tolist(), self.mesh_dim_names))

    def __deepcopy__(self, memo: dict) -> DeviceMesh:
        return self

    def __copy__(self) -> DeviceMesh:
        return self

    # -- identity ----------------------------------------------------------------------------
    def _key(self) -> tuple:
        return (self.device_type, self.shape, self._flat, self.mesh_dim_names)

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, DeviceMesh) and self._key() == other._key())

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        names = "" if self.mesh_dim_names is None else f", mesh_dim_names={self.mesh_dim_names}"
        return f"DeviceMesh({self.device_type!r}, {self._ranks.tolist()}{names})"

    # -- helpers -----------------------------------------------------------------------------
    def _one_dim(self, mesh_dim: MeshDim | None, what: str) -> int:
        if mesh_dim is None:
            if self.ndim != 1:
                raise MeshError(f"{what}() on {self.ndim}-d {self!r}: expected a mesh_dim "
                                f"(int or name) unless the mesh is 1-d")
            return 0
        return self.spec.dim_index(mesh_dim)

    def _require_coord(self, what: str) -> tuple[int, ...]:
        if self._coord is None:
            raise MeshError(f"{what} on {self!r}: rank {dist.get_rank()} is not on this mesh")
        return self._coord


def init_device_mesh(device_type: str, mesh_shape: Sequence[int], *,
                     mesh_dim_names: Sequence[str] | None = None) -> DeviceMesh:
    """A mesh of ``mesh_shape`` over ranks 0..N-1 of the default group, row-major.

    >>> import simpg
    >>> simpg.run(lambda: init_device_mesh("cpu", (2,)).size(), 2)
    [2, 2]
    """
    shape = tuple(mesh_shape)
    spec = MeshSpec(shape, None if mesh_dim_names is None else tuple(mesh_dim_names))
    _init_from_launcher(device_type)
    world = _world_size(f"init_device_mesh({shape})")
    if spec.size != world:
        raise MeshError(f"init_device_mesh({shape}) needs {spec.size} ranks, but the default "
                        f"group has {world}")
    return DeviceMesh(device_type, torch.arange(world).reshape(shape),
                      mesh_dim_names=mesh_dim_names)


def _as_rank_tensor(mesh: torch.Tensor | Sequence) -> torch.Tensor:
    try:
        ranks = torch.as_tensor(mesh, device="cpu")
    except (TypeError, ValueError, RuntimeError) as e:
        raise MeshError(f"mesh {mesh!r}: expected a nested list or tensor of ranks ({e})") from e
    if ranks.dtype.is_floating_point or ranks.dtype.is_complex or ranks.dtype == torch.bool \
            or ranks.ndim == 0 or ranks.numel() == 0:
        raise MeshError(f"mesh {mesh!r}: expected a non-empty n-d array of integer ranks")
    return ranks.to(torch.int64)


def _init_from_launcher(device_type: str) -> None:
    """Under torchrun (RANK, WORLD_SIZE, MASTER_ADDR in the environment) and with no default
    group yet, create it as torch's init_device_mesh does: nccl for cuda meshes, else gloo."""
    if dist.is_initialized() or not all(k in os.environ for k in ("RANK", "WORLD_SIZE",
                                                                  "MASTER_ADDR")):
        return
    dist.init_process_group("nccl" if device_type == "cuda" else "gloo")


def _world_size(what: str) -> int:
    if not dist.is_initialized():
        raise MeshError(f"{what}: torch.distributed is not initialized: call "
                        f"dist.init_process_group first (or run under simpg.run / torchrun)")
    return dist.get_world_size()


def _check_world(mesh: DeviceMesh) -> None:
    world = _world_size(repr(mesh))
    outside = sorted(r for r in mesh._flat if r >= world)
    if outside:
        raise MeshError(f"{mesh!r} holds ranks {outside} outside the default group: expected "
                        f"ranks in [0, {world - 1}]")


def _init_device(mesh: DeviceMesh) -> None:
    # One GPU per local rank: without this every process of a node would use cuda:0.
    if mesh.device_type == "cuda" and torch.cuda.is_available():
        count = torch.cuda.device_count()
        local = int(os.environ.get("LOCAL_RANK", dist.get_rank() % max(count, 1)))
        torch.cuda.set_device(local % max(count, 1))
