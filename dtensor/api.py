"""Building DTensors: distribute_tensor and the factory functions.

Note [sharded RNG]
``rand``/``randn`` must give, piece by piece, exactly the tensor a single device gives for
the same seed, whatever the mesh and placements. torch's CPU generator (mt19937) cannot skip
ahead, so every rank draws the whole tensor from its generator and keeps its piece: exact,
and every rank's generator ends in the state a single device would reach, so later draws
agree too. The cost is drawing the full tensor on each rank; a counter-based generator
(CUDA's Philox) could draw only the piece, and is the place to optimise.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.distributed as dist

from dtensor.foreign import refuse_torch_dtensor
from dtensor.layout import check_layout, local_shape
from dtensor.mesh import DeviceMesh, resolve_mesh
from dtensor.placements import Placement, Replicate, has_split_rule, normalize_placements
from dtensor.redistribute import redistribute_local_tensor
from dtensor.tensor import DTensor, make_dtensor


def _placements(placements: Sequence[Placement] | None, ndim: int, mesh: DeviceMesh,
                shape: Sequence[int]) -> tuple[Placement, ...]:
    if placements is None:
        placements = [Replicate()] * mesh.ndim
    out = normalize_placements(placements, ndim, mesh.ndim, shape=shape)
    if has_split_rule(out):  # explicit sizes must cut the tensor: Note [split rules]
        check_layout(shape, mesh.shape, out)
    return out


def _from_full(full: torch.Tensor, mesh: DeviceMesh, placements: tuple[Placement, ...],
               requires_grad: bool) -> DTensor:
    replicated = tuple(Replicate() for _ in placements)
    local = full
    if placements != replicated:  # local steps only: slicing and identity fills
        local = redistribute_local_tensor(full, mesh, replicated, placements, full.shape)
    return make_dtensor(local.contiguous(), mesh, placements, full.shape,
                        requires_grad=requires_grad)


def distribute_tensor(tensor: torch.Tensor, device_mesh: DeviceMesh | None = None,
                      placements: Sequence[Placement] | None = None, *,
                      src_data_rank: int | None = 0) -> DTensor:
    """Shard ``tensor`` over ``device_mesh`` (default: the mesh of the innermost ``with
    mesh:``): every rank takes its piece of the tensor held by group rank ``src_data_rank``
    on every mesh dim (broadcast first), or of its own copy when it is None.

    The result is a leaf that requires grad if ``tensor`` did.

    >>> import torch, simpg
    >>> from dtensor import init_device_mesh, Shard
    >>> def body():
    ...     mesh = init_device_mesh("cpu", (2,))
    ...     return distribute_tensor(torch.arange(5.0), mesh, [Shard(0)]).to_local().tolist()
    >>> simpg.run(body, 2)
    [[0.0, 1.0, 2.0], [3.0, 4.0]]
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"distribute_tensor: tensor must be a torch.Tensor, got "
                        f"{type(tensor).__name__}")
    refuse_torch_dtensor(tensor, "distribute_tensor")  # Note [two DTensor libraries]
    device_mesh = resolve_mesh(device_mesh, "distribute_tensor")
    placements_t = _placements(placements, tensor.dim(), device_mesh, tensor.shape)
    if isinstance(tensor, DTensor):  # moved, to another mesh too: Note [cross-mesh moves]
        return tensor.redistribute(device_mesh, placements_t)
    if device_mesh.get_coordinate() is None:  # not a member: an empty piece, no collective
        return make_dtensor(tensor.new_empty(0), device_mesh, placements_t, tensor.shape,
                            requires_grad=tensor.requires_grad)
    full = tensor.detach()
    if src_data_rank is not None and not full.is_meta:  # meta holds no values to broadcast
        source = _source_rank(device_mesh, src_data_rank)
        full = full.clone() if dist.get_rank() != source else full.contiguous()
        group = device_mesh.group_for(tuple(range(device_mesh.ndim)))
        dist.broadcast(full, src=source, group=group)
    return _from_full(full, device_mesh, placements_t, tensor.requires_grad)


def _source_rank(mesh: DeviceMesh, src_data_rank: int) -> int:
    """The global rank holding the data: group rank ``src_data_rank`` on every mesh dim, as
    torch reads it (so a sub-mesh of ranks [4, 5, 6, 7] reads from rank 4 for 0)."""
    if isinstance(src_data_rank, bool) or not isinstance(src_data_rank, int) \
            or not 0 <= src_data_rank < min(mesh.shape):
        raise ValueError(f"src_data_rank={src_data_rank!r} is not a group rank on every dim of "
                         f"{mesh}: expected an int in [0, {min(mesh.shape) - 1}] or None")
    return int(mesh.mesh[(src_data_rank,) * mesh.ndim])


class SizeError(ValueError, RuntimeError):
    """A factory's negative size: a ``RuntimeError`` too, as torch's (Note [torch's error
    types] in dtensor/__init__.py)."""


def _shape(size: tuple) -> tuple[int, ...]:
    """``zeros(2, 3)`` and ``zeros((2, 3))`` alike."""
    if len(size) == 1 and not isinstance(size[0], int):
        size = tuple(size[0])
    shape = tuple(int(s) for s in size)
    if any(s < 0 for s in shape):
        raise SizeError(f"size {shape}: expected sizes >= 0")
    return shape


def _factory(make: Callable[[tuple[int, ...]], torch.Tensor], size: tuple,
             device_mesh: DeviceMesh, placements: Sequence[Placement] | None,
             requires_grad: bool) -> DTensor:
    """Build only this rank's piece (nothing on a rank outside the mesh)."""
    shape = _shape(size)
    placements_t = _placements(placements, len(shape), device_mesh, shape)
    coord = device_mesh.get_coordinate()
    piece = ((0,) if coord is None
             else local_shape(shape, device_mesh.shape, placements_t, coord))
    return make_dtensor(make(piece), device_mesh, placements_t, shape,
                        requires_grad=requires_grad)


def _filled(fill: Callable[..., torch.Tensor]) -> Callable[..., DTensor]:
    def factory(*size: int, device_mesh: DeviceMesh | None = None,
                placements: Sequence[Placement] | None = None,
                dtype: torch.dtype | None = None, requires_grad: bool = False) -> DTensor:
        device_mesh = resolve_mesh(device_mesh, fill.__name__)
        device = torch.device(device_mesh.device_type)
        return _factory(lambda s: fill(s, dtype=dtype, device=device), size, device_mesh,
                        placements, requires_grad)

    factory.__name__ = fill.__name__
    factory.__doc__ = (f"Like ``torch.{fill.__name__}`` for a DTensor; each rank builds only "
                       "its piece. Partial placements hold the value on every rank.\n\n"
                       ">>> import simpg\n"
                       f">>> from dtensor import init_device_mesh, Shard, {fill.__name__}\n"
                       ">>> def body():\n"
                       "...     mesh = init_device_mesh('cpu', (2,))\n"
                       f"...     x = {fill.__name__}(3, 2, device_mesh=mesh, "
                       "placements=[Shard(0)])\n"
                       "...     return tuple(x.shape), tuple(x.to_local().shape)\n"
                       ">>> simpg.run(body, 2)\n"
                       "[((3, 2), (2, 2)), ((3, 2), (1, 2))]\n")
    return factory


zeros = _filled(torch.zeros)
ones = _filled(torch.ones)
empty = _filled(torch.empty)


def full(size: Sequence[int], fill_value: float, *, device_mesh: DeviceMesh | None = None,
         placements: Sequence[Placement] | None = None, dtype: torch.dtype | None = None,
         requires_grad: bool = False) -> DTensor:
    """Like ``torch.full`` for a DTensor; each rank builds only its piece.

    >>> import simpg
    >>> from dtensor import init_device_mesh, Shard
    >>> def body():
    ...     mesh = init_device_mesh("cpu", (2,))
    ...     return full((3,), 7.0, device_mesh=mesh, placements=[Shard(0)]).to_local().tolist()
    >>> simpg.run(body, 2)
    [[7.0, 7.0], [7.0]]
    """
    device_mesh = resolve_mesh(device_mesh, "full")
    device = torch.device(device_mesh.device_type)
    return _factory(lambda s: torch.full(s, fill_value, dtype=dtype, device=device),
                    tuple(size), device_mesh, placements, requires_grad)


def _random(draw: Callable[..., torch.Tensor]) -> Callable[..., DTensor]:
    def factory(*size: int, device_mesh: DeviceMesh | None = None,
                placements: Sequence[Placement] | None = None,
                dtype: torch.dtype | None = None, requires_grad: bool = False,
                generator: torch.Generator | None = None) -> DTensor:
        device_mesh = resolve_mesh(device_mesh, draw.__name__)
        shape = _shape(size)
        full_tensor = draw(shape, dtype=dtype, generator=generator,
                           device=torch.device(device_mesh.device_type))  # Note [sharded RNG]
        placements_t = _placements(placements, len(shape), device_mesh, shape)
        return _from_full(full_tensor, device_mesh, placements_t, requires_grad)

    factory.__name__ = draw.__name__
    factory.__doc__ = (f"Like ``torch.{draw.__name__}`` for a DTensor: for the same seed, the "
                       "pieces form exactly the single-device tensor (Note [sharded RNG]).\n\n"
                       ">>> import torch, simpg\n"
                       f">>> from dtensor import init_device_mesh, Shard, {draw.__name__}\n"
                       ">>> def body():\n"
                       "...     mesh, g = init_device_mesh('cpu', (2,)), "
                       "torch.Generator().manual_seed(0)\n"
                       f"...     x = {draw.__name__}(5, device_mesh=mesh, placements=[Shard(0)], "
                       "generator=g)\n"
                       f"...     return x.full_tensor().equal(torch.{draw.__name__}(5, "
                       "generator=g.manual_seed(0)))\n"
                       ">>> simpg.run(body, 2)\n"
                       "[True, True]\n")
    return factory


rand = _random(torch.rand)
randn = _random(torch.randn)
