"""torch's DTensor on simpg: each sharding decision made once per world, not once per rank.

Note [one propagation for every rank]
torch's DTensor propagates shardings per process: ``ShardingPropagator`` caches per thread,
keyed by specs whose mesh is the rank's own (simpg.mesh_identity). On N simulated ranks every
new op schema is then propagated N times, on the same specs, to the same answer; in torch's
op-database test that is half of a rank's time. A world keeps the first rank's answer by a
key in which a mesh is its layout (its ``_hash_key`` without the per-rank identity), and
every other rank gets a copy rebound to its own meshes, as if it had computed it.

The copy is exact or not made:
- a rank shares only while its strategy tables are the world's (Note [values and objects]
  in simpg/isolation.py: ``register_sharding`` and context parallel change a rank's own), and
  only for ops whose cache key holds their non-tensor arguments: a registered strategy (torch's
  own cache relies on that) or a decomposed op whose schema info is known (the first call of a
  decomposed op is keyed without its arguments; torch registers them after it);
- an answer that read a local shape some rank of the mesh has different (uneven pieces: a
  view's size argument rewritten to the rank's piece, a few rules priced by local sizes;
  watched in ``_compute_local_shape_and_global_offset``, which all of them call) is the
  rank's alone and not shared;
- the answer is rebound spec by spec to the rank's meshes; an answer that holds a plain
  tensor, a mesh the inputs did not bring, or a placement of unknown kind is not shared (the
  rank computes its own, as before), and ``_MaskPartial``'s mask buffer, which the rank fills
  while it runs the op, is a fresh one per rank;
- a propagation that raises is not shared: each rank raises its own;
- under tracing (``torch.compile``) torch bypasses its cache and this one.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import operator
import sys
import threading
from typing import Any

import torch

from simpg.isolation import PropagatorTable
from simpg.world import rank_context

_API = "torch.distributed.tensor._api"
# simpg.isolation's switch names of the propagator tables that decide a strategy
_TABLES = (("sharding strategies", "op_strategy_funcs"),
           ("single-dim sharding strategies", "op_single_dim_strategy_funcs"),
           ("single-dim strategy schema info", "op_to_schema_info_for_single_dim_strategy"),
           ("sharding rules", "op_to_rules"))
_UNSHAREABLE = object()  # a key whose answer a rank must compute itself


class _CannotRebind(Exception):
    pass


class _Torch:
    """torch's DTensor classes, read from ``sys.modules`` once torch's DTensor is imported:
    simpg never imports it."""

    def load(self, mods: dict[str, Any]) -> None:
        from torch.distributed.device_mesh import DeviceMesh

        tensor = "torch.distributed.tensor."
        kinds = mods[tensor + "placement_types"]
        schema = mods[tensor + "_op_schema"]
        self.DeviceMesh = DeviceMesh
        self.DTensorSpec = mods[tensor + "_dtensor_spec"].DTensorSpec
        self.OpSchema, self.OutputSharding = schema.OpSchema, schema.OutputSharding
        self.LocalLRUCache = mods[tensor + "_sharding_prop"].LocalLRUCache
        self.MaskPartial = kinds._MaskPartial
        # placements without state of their own: one object serves every rank
        self.pure_placements = (kinds.Shard, kinds.Replicate, kinds.Partial,
                                kinds._StridedShard,
                                mods[tensor + "_ops._math_ops"]._NormPartial)


_torch = _Torch()


def install() -> None:
    """Route torch's sharding propagation through the world's share; idempotent, and a no-op
    until torch's DTensor is imported. Outside a simpg world it computes as torch does."""
    api = sys.modules.get(_API)
    if api is None:
        return
    prop = api.DTensor._op_dispatcher.sharding_propagator
    with _install_lock:
        if getattr(prop.propagate_op_sharding_non_cached, "simpg_shared", False):
            return
        _torch.load(sys.modules)
        _probe_local_shapes(sys.modules["torch.distributed.tensor._utils"])
        kind = type(prop)

        def compute(op_schema: Any) -> Any:  # torch's method, as its class has it now
            return kind.propagate_op_sharding_non_cached(prop, op_schema)

        def shared(op_schema: Any) -> Any:
            located = rank_context.get()
            if located is None:
                return compute(op_schema)
            return _shared(located[0], prop, compute, op_schema)

        shared.simpg_shared = True  # type: ignore[attr-defined]
        # the C++ fast path calls the uncached method on a miss, the Python path the cache
        prop.propagate_op_sharding_non_cached = shared
        prop.propagate_op_sharding = _torch.LocalLRUCache(shared)


_install_lock = threading.Lock()


class _Probe(threading.local):
    """Whether the answer being made on this thread read a local shape that differs from
    rank to rank."""

    depth = 0  # shared computations running on this thread (decompositions nest them)
    rank_dependent = False


_probe = _Probe()


def _probe_local_shapes(utils: Any) -> None:
    """Watch where a sharding decision reads this rank's local shape (torch 2.13 rewrites a
    view's size argument to the rank's piece and prices a few rules by local sizes): an answer
    that read a shape some rank has different is that rank's alone."""
    local_shape = utils._compute_local_shape_and_global_offset

    def probed(global_shape: Any, mesh_shape: Any, my_coordinate: Any, placements: Any,
               skip_offset: bool = False) -> Any:
        found = local_shape(global_shape, mesh_shape, my_coordinate, placements, skip_offset)
        if _probe.depth and not _probe.rank_dependent:
            for coordinate in itertools.product(*map(range, mesh_shape)):
                if local_shape(global_shape, mesh_shape, list(coordinate), placements,
                               True)[0] != found[0]:
                    _probe.rank_dependent = True
                    break
        return found

    utils._compute_local_shape_and_global_offset = probed


def _shared(world: Any, prop: Any, compute: Any, op_schema: Any) -> Any:
    key = _key(world, prop, op_schema)
    if key is None:
        return compute(op_schema)
    share = world.propagation_share
    found = share.get(key)
    if found is None:
        outer = _probe.rank_dependent
        _probe.depth += 1
        _probe.rank_dependent = False
        try:
            answer = compute(op_schema)
        finally:
            _probe.depth -= 1
            mine = _probe.rank_dependent
            _probe.rank_dependent = outer or mine
        share[key] = _UNSHAREABLE if mine else (answer, op_schema)
        return answer
    if found is _UNSHAREABLE:
        return compute(op_schema)
    answer, source = found
    try:
        return _rebind(answer, _mesh_map(source, op_schema), {})
    except _CannotRebind:
        share[key] = _UNSHAREABLE
        return compute(op_schema)


def _key(world: Any, prop: Any, op_schema: Any) -> Any:
    op = op_schema.op
    if not (op in prop.op_strategy_funcs or op in prop.op_single_dim_strategy_funcs
            or op in prop.op_to_schema_info):
        return None
    baseline = world.switches
    for switch, table in _TABLES:
        mine = getattr(prop, table)
        if type(mine) is PropagatorTable and not mine.changes:
            continue  # the rank's unchanged copy of the baseline's
        if mine != baseline.get(switch):
            return None  # this rank's tables are its own now
    try:
        # torch's OpSchema.__eq__ compares the argument count beside the key
        return len(op_schema.args_schema), _neutral(op_schema._comparison_key)
    except TypeError:  # an unhashable argument: torch's cache would not key it either
        return None


def _neutral(value: Any) -> Any:
    if type(value) is tuple or type(value) is list:
        return (type(value), tuple(_neutral(v) for v in value))
    if isinstance(value, _torch.DTensorSpec):
        return ("spec", value.mesh._hash_key()[:-1], value.placements, value.tensor_meta,
                value.shard_order, value.use_strided_shard_as_shard_order)
    if isinstance(value, _torch.DeviceMesh):
        return ("mesh", value._hash_key()[:-1])
    hash(value)
    return value


def _mesh_map(source: Any, target: Any) -> dict[int, Any]:
    """id of each mesh in ``source``'s arguments -> the mesh at the same place in ``target``'s."""
    found: dict[int, Any] = {}

    def walk(a: Any, b: Any) -> None:
        if isinstance(a, _torch.DTensorSpec):
            found[id(a.mesh)] = b.mesh
        elif isinstance(a, _torch.DeviceMesh):
            found[id(a)] = b
        elif isinstance(a, (tuple, list)):
            for x, y in zip(a, b):
                walk(x, y)
        elif isinstance(a, dict):
            for k in a:
                walk(a[k], b[k])

    walk(source.args_schema, target.args_schema)
    walk(source.kwargs_schema, target.kwargs_schema)
    return found


def _rebind(value: Any, meshes: dict[int, Any], copies: dict[int, Any]) -> Any:
    """``value`` (an OutputSharding or a part of one) on the meshes ``meshes`` maps to;
    ``copies`` keeps one copy of each spec and placement object, so what the answer aliases
    the copy aliases (a ``_MaskPartial`` is one object in the input spec that fills its mask
    and in the output spec that applies it)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, _torch.DTensorSpec):
        mesh = meshes.get(id(value.mesh))
        if mesh is None:
            raise _CannotRebind
        spec = copies.get(id(value))
        if spec is not None:
            return spec
        spec = copies[id(value)] = copy.copy(value)
        spec.mesh = mesh
        mine = tuple(_own_placement(p, copies) for p in value.placements)
        if any(map(operator.is_not, mine, value.placements)):
            spec.placements = mine
        return spec
    if isinstance(value, (tuple, list)):
        items = [_rebind(v, meshes, copies) for v in value]
        if all(map(operator.is_, items, value)):
            return value  # sizes, tensor metadata, lists of numbers
        if type(value) in (tuple, list):
            return type(value)(items)
        raise _CannotRebind  # a tuple subclass holding specs: not built by torch's rules
    if isinstance(value, dict):
        return {k: _rebind(v, meshes, copies) for k, v in value.items()}
    if isinstance(value, _torch.OutputSharding):
        return dataclasses.replace(
            value, output_spec=_rebind(value.output_spec, meshes, copies),
            redistribute_schema=_rebind(value.redistribute_schema, meshes, copies))
    if isinstance(value, _torch.OpSchema):
        return dataclasses.replace(
            value, args_schema=_rebind(value.args_schema, meshes, copies),
            kwargs_schema=_rebind(value.kwargs_schema, meshes, copies))
    if isinstance(value, _torch.DeviceMesh):
        mesh = meshes.get(id(value))
        if mesh is None:
            raise _CannotRebind
        return mesh
    if isinstance(value, torch.Tensor):
        raise _CannotRebind  # a rank's own data
    return value  # dtypes, sizes, tensor metadata: immutable values


def _own_placement(p: Any, copies: dict[int, Any]) -> Any:
    kind = type(p)
    if kind in _torch.pure_placements:
        return p
    if kind is _torch.MaskPartial:  # its buffer is filled by the rank that runs the op
        mine = copies.get(id(p))
        if mine is None:
            mine = copies[id(p)] = _torch.MaskPartial(offset_shape=p.offset_shape,
                                                offset_dim=p.offset_dim, reduce_op=p.reduce_op)
        return mine
    raise _CannotRebind  # a placement of a kind not known to be stateless


__all__ = ["install"]
