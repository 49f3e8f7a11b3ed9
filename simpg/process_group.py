"""The process group torch.distributed talks to: c10d's methods turned into simpg calls.

Each method checks its own rank's arguments at once (a clear ``ValueError`` on the calling
rank, as a real backend raises locally), describes the call, and hands it to the world's
rendezvous. Everything that needs the other ranks' calls happens there.
"""

from __future__ import annotations

import functools
import operator
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist

from simpg import collectives as C
from simpg.capabilities import PROFILES, Capabilities, refuse
from simpg.faults import apply_fault
from simpg.rendezvous import Call, GroupInfo, Work, caller_site
from simpg.world import World

_REDUCE_OPS = {
    dist.ReduceOp.RedOpType.SUM: "sum",
    dist.ReduceOp.RedOpType.AVG: "avg",
    dist.ReduceOp.RedOpType.PRODUCT: "product",
    dist.ReduceOp.RedOpType.MIN: "min",
    dist.ReduceOp.RedOpType.MAX: "max",
    dist.ReduceOp.RedOpType.BAND: "band",
    dist.ReduceOp.RedOpType.BOR: "bor",
    dist.ReduceOp.RedOpType.BXOR: "bxor",
}


_RED_OP_TYPE = dist.ReduceOp.RedOpType
# keyed by the enum's value: hashing a pybind enum and comparing it are Python-level calls
_REDUCE_OPS_BY_VALUE = {int(k): v for k, v in _REDUCE_OPS.items()}


def reduce_op_name(op: Any) -> str:
    kind = op.op if type(op) is dist.ReduceOp else op
    if type(kind) is _RED_OP_TYPE:
        name = _REDUCE_OPS_BY_VALUE.get(int(kind))
    else:
        name = _REDUCE_OPS.get(getattr(op, "op", op))
    if name is None:
        raise ValueError(
            f"simpg does not support reduce op {op!r}: expected one of SUM, AVG, PRODUCT, MIN, "
            "MAX, BAND, BOR, BXOR"
        )
    return name


@functools.lru_cache(maxsize=None)
def _check_reduce_op(op: str, dtype: torch.dtype) -> None:
    C.check_reduce_op(op, dtype)


_KIND = operator.attrgetter("layout", "dtype", "device")


def _check_tensors(arg: str, tensors: Sequence[torch.Tensor]) -> torch.dtype:
    """All of one rank's tensors in a call: real (not meta), dense, one dtype and device."""
    if not tensors:
        raise ValueError(f"{arg}: got no tensors, expected at least one")
    first = tensors[0]
    if len(tensors) == 1:
        if type(first) is torch.Tensor and first.layout is torch.strided and not first.is_meta:
            return first.dtype  # the common case, checked cheaply
    else:  # a list (all_gather's outputs): one set of kinds, mapped without a Python frame
        # per tensor (every rank checks N tensors: N^2 a collective)
        try:
            kinds = set(map(_KIND, tensors))
        except AttributeError:
            kinds = set()  # not a tensor: the loop below says which
        if len(kinds) == 1 and set(map(type, tensors)) == {torch.Tensor}:
            ((layout, dtype, device),) = kinds
            if layout is torch.strided and device.type != "meta":
                return dtype
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{arg}[{i}]: expected a torch.Tensor, got {type(t).__name__}")
        if t.device.type == "meta" or t.layout != torch.strided:
            raise ValueError(
                f"{arg}[{i}] is a {t.layout} tensor on {t.device}: simpg moves real data and "
                "needs dense tensors on a real device (cpu or cuda)"
            )
        if t.device != first.device:
            raise ValueError(
                f"{arg}[{i}] is on {t.device} but {arg}[0] is on {first.device}: one call's "
                "tensors must share a device"
            )
        if t.dtype != first.dtype:
            raise ValueError(
                f"{arg}[{i}] has dtype {t.dtype} but {arg}[0] has {first.dtype}: one call's "
                "tensors must share a dtype"
            )
    return first.dtype


def _shape(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(t.shape)


def _summary(name: str, /, **fields: Any) -> Callable[[], str]:
    """A call's description for reports, formatted only if a report needs it."""
    return lambda: f"{name}({', '.join(f'{k}={v}' for k, v in fields.items())})"


class SimProcessGroup(dist.ProcessGroup):
    """One rank's view of one simpg group; created by the ``"simpg"`` backend."""

    # What this backend runs natively, for libraries that ask a group (dtensor.comm reads it):
    # every list form with uneven tensors, reduce_scatter, and ReduceOp.AVG; a world that
    # behaves as another backend uses a subclass (Note [behaving as gloo])
    capabilities: Capabilities = PROFILES["full"]
    collective_capabilities = capabilities.declared()

    def __init__(self, world: World, group: GroupInfo, group_rank: int, is_default: bool) -> None:
        super().__init__(group_rank, group.size)
        self._world, self._group, self._group_rank = world, group, group_rank
        self._rank = group.ranks[group_rank]  # in the world
        self._is_default = is_default
        self._seq = 0
        self._epoch = 0  # world.epoch when _seq was last reset (see simpg.subtests)
        self._destroyed = False
        self._checked_reduce_ops: dict[tuple[int, torch.dtype], str] = {}  # Note [lean issue]

    # -- identity --------------------------------------------------------------------------------
    def getBackendName(self) -> str:
        return "simpg"

    # c10d sets and reads the name through the C++ base, which keeps it on a backend that a
    # Python process group does not have; DeviceMesh and functional collectives need it.
    def getGroupName(self) -> str:
        return self._group.name

    def setGroupName(self, name: str) -> None:
        if name != self._group.name:
            raise ValueError(f"simpg group {self._group.label} is named {self._group.name!r}, "
                             f"not {name!r}")

    @property
    def group_name(self) -> str:
        return self._group.name

    def getGroupDesc(self) -> str:
        return self._group.label

    def setGroupDesc(self, desc: str) -> None:
        pass  # the label is derived from the ranks

    @property
    def group_desc(self) -> str:
        return self._group.label

    def __repr__(self) -> str:
        return f"SimProcessGroup({self._group.label}, rank={self._group_rank})"

    def shutdown(self) -> None:
        self._destroyed = True  # torch lets a destroyed group be used; a real backend crashes
        if self._is_default:
            self._world.leave_if_member()

    def abort(self) -> None:
        self.shutdown()

    # -- the one way in --------------------------------------------------------------------------
    def _check_alive(self, op: str) -> None:
        if self._destroyed:
            raise ValueError(
                f"{op} on group {self._group.label}, which this rank destroyed with "
                "destroy_process_group: expected a live group (create a new one with new_group)")

    # Note [lean issue]
    # Every rank of every collective passes here, so its cost is paid N times per collective
    # (Note [rank switches] in simpg/scheduler.py has the whole budget). What it keeps off that
    # path: a reduce op already checked for this group and dtype is a dict hit
    # (``_checked_reduce_ops``); shapes stay ``torch.Size`` (equal to their tuples) and the
    # report text is a closure formatted only if a report needs it; a world without faults
    # only counts the call. Each of these was a few hundred ns a rank.
    def _issue(self, op: str, dtype: torch.dtype | None, signature: tuple,
               summary: Callable[[], str], payload: dict) -> Work:
        world = self._world
        if self._destroyed:
            self._check_alive(op)
        world.check_failed()
        site = caller_site()
        if world.schedule_seed is not None:
            world.preempt()
        if world.faults:
            apply_fault(world, world.faults, self._rank, op, site)
        else:
            world.count_call(self._rank)
        call = Call(op, self._group, self._group_rank, dtype, (op, dtype) + signature, summary,
                    payload, site)
        if self._epoch != world.epoch:
            self._epoch, self._seq = world.epoch, 0
        self._seq += 1
        return world.rendezvous.collective(call, (self._epoch, self._seq))

    def _reduce_op(self, opts: Any, dtype: torch.dtype) -> str:
        op = opts.reduceOp
        kind = op.op if type(op) is dist.ReduceOp else op
        # keyed by the enum's value: hashing a pybind enum is a Python-level call
        key = (int(kind), dtype) if type(kind) is _RED_OP_TYPE else None
        name = self._checked_reduce_ops.get(key) if key is not None else None
        if name is not None:
            return name
        name = reduce_op_name(op)
        _check_reduce_op(name, dtype)
        if name == "avg" and not self.capabilities.avg:
            raise refuse(self.capabilities, "ReduceOp.AVG", "which has no AVG")
        if key is not None:
            self._checked_reduce_ops[key] = name
        return name

    def _refuse_reduce_scatter(self, op: str) -> None:
        if not self.capabilities.reduce_scatter:
            raise refuse(self.capabilities, op, "which has no reduce_scatter")

    # -- collectives -------------------------------------------------------------------------------
    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Work:
        opts = opts or dist.AllreduceOptions()
        dtype = _check_tensors("tensors", tensors)
        op = self._reduce_op(opts, dtype)
        # torch.Size compares equal to the tuple of its sizes: no conversion (Note [lean issue])
        shapes = (tensors[0].shape,) if len(tensors) == 1 else tuple([t.shape for t in tensors])

        def summary() -> str:
            return (f"all_reduce(shapes={[tuple(s) for s in shapes]}, dtype={dtype}, "
                    f"op={op})")

        return self._issue("all_reduce", dtype, (op, shapes), summary,
                           {"tensors": tensors, "reduce_op": op, "inputs": tensors})

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> Work:
        return self.allreduce(tensors, opts or dist.AllreduceCoalescedOptions())

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> Work:
        opts = opts or dist.BroadcastOptions()
        (tensor,) = self._single("tensors", tensors)
        root = self._root(opts.rootRank)
        summary = _summary("broadcast", shape=_shape(tensor), dtype=tensor.dtype, src=root)
        return self._issue("broadcast", tensor.dtype, (root, _shape(tensor)), summary,
                           {"tensor": tensor, "root": root, "inputs": tensor})

    def reduce(self, tensors: list[torch.Tensor], opts: Any = None) -> Work:
        opts = opts or dist.ReduceOptions()
        (tensor,) = self._single("tensors", tensors)
        root = self._root(opts.rootRank)
        op = self._reduce_op(opts, tensor.dtype)
        summary = _summary("reduce", shape=_shape(tensor), dtype=tensor.dtype, op=op, dst=root)
        return self._issue("reduce", tensor.dtype, (op, root, _shape(tensor)), summary,
                           {"tensor": tensor, "root": root, "reduce_op": op, "inputs": tensor})

    def allgather(self, output_lists: list[list[torch.Tensor]], inputs: list[torch.Tensor],
                  opts: Any = None) -> Work:
        (inp,) = self._single("input_tensors", inputs)
        (outs,) = output_lists
        self._check_list("output_tensor_list", outs, inp.dtype)
        if not self.capabilities.uneven_all_gather and any(o.shape != inp.shape for o in outs):
            raise refuse(self.capabilities, "all_gather with tensors of different shapes",
                         f"which needs every output shaped like the input {_shape(inp)}, got "
                         f"{[_shape(o) for o in outs]}")

        def summary() -> str:
            return f"all_gather(input_shape={_shape(inp)}, dtype={inp.dtype})"

        return self._issue("all_gather", inp.dtype, (), summary,
                           {"input": inp, "outputs": outs, "inputs": inp})

    def allgather_coalesced(self, output_lists: list[list[torch.Tensor]],
                            inputs: list[torch.Tensor], opts: Any = None) -> Work:
        work = None
        for outs, inp in zip(output_lists, inputs, strict=True):
            work = self.allgather([outs], [inp], opts)
        return work  # type: ignore[return-value]

    def all_gather_single(self, output: torch.Tensor, inp: torch.Tensor, opts: Any = None) -> Work:
        _check_tensors("tensors", [output, inp])
        n = self._group.size
        if output.numel() != n * inp.numel():
            raise ValueError(
                f"all_gather_into_tensor: output has {output.numel()} elements, expected "
                f"{n} x {inp.numel()} (group size x input elements) for input {_shape(inp)}"
            )
        if not self.capabilities.any_gather_output_shape:
            stacked = (n * inp.shape[0], *inp.shape[1:]) if inp.dim() else None
            if _shape(output) != stacked:
                raise refuse(self.capabilities, "all_gather_into_tensor",
                             f"which needs the output shaped as the inputs concatenated along "
                             f"dim 0, {stacked}, got {_shape(output)} for input {_shape(inp)}")
        summary = _summary("all_gather_into_tensor", input_shape=_shape(inp), dtype=inp.dtype)
        return self._issue("all_gather_into_tensor", inp.dtype, (_shape(inp),), summary,
                           {"input": inp, "output": output, "inputs": inp})

    _allgather_base = all_gather_single

    def all_gather_single_coalesced(self, outputs: list[torch.Tensor],
                                    inputs: list[torch.Tensor], opts: Any = None) -> Work:
        work = None
        for out, inp in zip(outputs, inputs, strict=True):
            work = self.all_gather_single(out, inp, opts)
        return work  # type: ignore[return-value]

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def reduce_scatter(self, outputs: list[torch.Tensor], input_lists: list[list[torch.Tensor]],
                       opts: Any = None) -> Work:
        opts = opts or dist.ReduceScatterOptions()
        self._refuse_reduce_scatter("reduce_scatter")
        (out,) = self._single("output_tensors", outputs)
        (ins,) = input_lists
        self._check_list("input_list", ins, out.dtype)
        mine = ins[self._group_rank]
        if mine.shape != out.shape:
            raise ValueError(
                f"reduce_scatter: output has shape {_shape(out)} but input_list[{self._group_rank}]"
                f" (this rank's piece) has shape {_shape(mine)}: they must match"
            )
        op = self._reduce_op(opts, out.dtype)
        shapes = tuple(_shape(t) for t in ins)
        summary = _summary("reduce_scatter", input_shapes=list(shapes), dtype=out.dtype, op=op)
        return self._issue("reduce_scatter", out.dtype, (op, shapes), summary,
                           {"inputs": ins, "output": out, "reduce_op": op})

    def reduce_scatter_single(self, output: torch.Tensor, inp: torch.Tensor,
                              opts: Any = None) -> Work:
        opts = opts or dist.ReduceScatterOptions()
        self._refuse_reduce_scatter("reduce_scatter_tensor")
        _check_tensors("tensors", [output, inp])
        n = self._group.size
        if inp.numel() != n * output.numel():
            raise ValueError(
                f"reduce_scatter_tensor: input has {inp.numel()} elements, expected {n} x "
                f"{output.numel()} (group size x output elements) for output {_shape(output)}"
            )
        op = self._reduce_op(opts, inp.dtype)
        summary = _summary("reduce_scatter_tensor", input_shape=_shape(inp), dtype=inp.dtype, op=op)
        return self._issue("reduce_scatter_tensor", inp.dtype, (op, _shape(inp)), summary,
                           {"input": inp, "output": output, "reduce_op": op, "inputs": inp})

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(self, outputs: list[torch.Tensor],
                                        inputs: list[torch.Tensor], opts: Any = None) -> Work:
        work = None
        for out, inp in zip(outputs, inputs, strict=True):
            work = self.reduce_scatter_single(out, inp, opts)
        return work  # type: ignore[return-value]

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def all_to_all_single(self, output: torch.Tensor, inp: torch.Tensor,
                          output_split_sizes: list[int] | None,
                          input_split_sizes: list[int] | None, opts: Any = None) -> Work:
        _check_tensors("tensors", [output, inp])
        n = self._group.size
        for name, splits, t in (("input_split_sizes", input_split_sizes, inp),
                                ("output_split_sizes", output_split_sizes, output)):
            if splits:
                if len(splits) != n or sum(splits) != (t.shape[0] if t.dim() else 1):
                    raise ValueError(
                        f"all_to_all_single: {name}={list(splits)} must have {n} entries (one "
                        f"per rank) summing to dim 0 of its tensor, {_shape(t)}"
                    )
            elif t.dim() == 0 or t.shape[0] % n:
                raise ValueError(
                    f"all_to_all_single: {name} not given, so dim 0 of shape {_shape(t)} must "
                    f"split evenly over the group's {n} ranks"
                )
        summary = _summary("all_to_all_single", input_shape=_shape(inp), dtype=inp.dtype,
                           input_splits=input_split_sizes or "equal")
        return self._issue("all_to_all_single", inp.dtype, (_shape(inp)[1:],), summary, {
            "input": inp, "output": output, "inputs": inp,
            "input_splits": list(input_split_sizes) if input_split_sizes else None,
            "output_splits": list(output_split_sizes) if output_split_sizes else None,
        })

    def alltoall_base(self, output: torch.Tensor, inp: torch.Tensor,
                      output_split_sizes: list[int], input_split_sizes: list[int],
                      opts: Any = None) -> Work:
        return self.all_to_all_single(output, inp, output_split_sizes, input_split_sizes, opts)

    def alltoall(self, outputs: list[torch.Tensor], inputs: list[torch.Tensor],
                 opts: Any = None) -> Work:
        dtype = _check_tensors("input_tensor_list", inputs)
        self._check_list("input_tensor_list", inputs, dtype)
        self._check_list("output_tensor_list", outputs, dtype)
        if not self.capabilities.uneven_all_to_all and \
                len({t.shape for t in (*inputs, *outputs)}) > 1:
            raise refuse(self.capabilities, "all_to_all with tensors of different shapes",
                         f"which needs one shape for every tensor, got inputs "
                         f"{[_shape(t) for t in inputs]}, outputs {[_shape(t) for t in outputs]}")
        summary = _summary("all_to_all", input_shapes=[_shape(t) for t in inputs], dtype=dtype)
        return self._issue("all_to_all", dtype, (), summary, {"inputs": inputs, "outputs": outputs})

    def gather(self, output_lists: list[list[torch.Tensor]], inputs: list[torch.Tensor],
               opts: Any = None) -> Work:
        opts = opts or dist.GatherOptions()
        (inp,) = self._single("input_tensors", inputs)
        root = self._root(opts.rootRank)
        outs = output_lists[0] if output_lists else []
        if self._group_rank == root:
            self._check_list("gather_list", outs, inp.dtype)
        summary = _summary("gather", shape=_shape(inp), dtype=inp.dtype, dst=root)
        return self._issue("gather", inp.dtype, (root,), summary,
                           {"input": inp, "outputs": outs, "root": root, "inputs": inp})

    def scatter(self, outputs: list[torch.Tensor], input_lists: list[list[torch.Tensor]],
                opts: Any = None) -> Work:
        opts = opts or dist.ScatterOptions()
        (out,) = self._single("output_tensors", outputs)
        root = self._root(opts.rootRank)
        ins = input_lists[0] if input_lists else []
        if self._group_rank == root:
            self._check_list("scatter_list", ins, out.dtype)
        summary = _summary("scatter", shape=_shape(out), dtype=out.dtype, src=root)
        return self._issue("scatter", out.dtype, (root,), summary,
                           {"inputs": ins, "output": out, "root": root})

    def barrier(self, opts: Any = None) -> Work:
        return self._issue("barrier", None, (), _summary("barrier"), {})

    def monitored_barrier(self, timeout: Any = None, wait_all_ranks: bool = False) -> None:
        self.barrier().wait()

    # -- point to point ------------------------------------------------------------------------
    def send(self, tensors: list[torch.Tensor], dst: int, tag: int = 0) -> Work:
        (t,) = self._single("tensors", tensors)
        self._peer("dst", dst)
        call = self._p2p_call("send", t, _summary("send", shape=_shape(t), dtype=t.dtype,
                                                  to_group_rank=dst, tag=tag))
        return self._world.rendezvous.send(call, dst, tag, t)

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int = 0) -> Work:
        (t,) = self._single("tensors", tensors)
        self._peer("src", src)
        call = self._p2p_call("recv", t, _summary("recv", shape=_shape(t), dtype=t.dtype,
                                                  from_group_rank=src, tag=tag))
        return self._world.rendezvous.recv(call, src, tag, t)

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int = 0) -> Work:
        (t,) = self._single("tensors", tensors)
        call = self._p2p_call("recv", t, _summary("recv", shape=_shape(t), dtype=t.dtype,
                                                  from_group_rank="any", tag=tag))
        return self._world.rendezvous.recv(call, None, tag, t)

    def _p2p_call(self, op: str, t: torch.Tensor, summary: Callable[[], str]) -> Call:
        world = self._world
        self._check_alive(op)
        world.check_failed()
        site = caller_site()
        world.preempt()
        apply_fault(world, world.faults, self._rank, op, site)
        return Call(op, self._group, self._group_rank, t.dtype, (op,), summary, {"inputs": t},
                    site)

    # -- argument checks ---------------------------------------------------------------------
    def _single(self, arg: str, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        if len(tensors) != 1:
            raise ValueError(f"{arg}: simpg takes one tensor per call, got {len(tensors)}")
        _check_tensors(arg, tensors)
        return tensors

    def _check_list(self, arg: str, tensors: list[torch.Tensor], dtype: torch.dtype) -> None:
        n = self._group.size
        if len(tensors) != n:
            raise ValueError(
                f"{arg}: got {len(tensors)} tensors, expected {n} (one per rank of group "
                f"{self._group.label})"
            )
        if _check_tensors(arg, tensors) != dtype:
            raise ValueError(f"{arg}: dtype {tensors[0].dtype} differs from the input's {dtype}")

    def _root(self, root: int) -> int:
        if not 0 <= root < self._group.size:
            raise ValueError(
                f"root rank {root} is out of range for group {self._group.label} of size "
                f"{self._group.size}: expected a group rank in [0, {self._group.size - 1}]"
            )
        return root

    def _peer(self, arg: str, peer: int) -> None:
        self._root(peer)
        if peer == self._group_rank:
            raise ValueError(f"{arg}={peer} is this rank itself: a rank cannot message itself")


_PROFILE_CLASSES: dict[str, type[SimProcessGroup]] = {"full": SimProcessGroup}


def group_class(caps: Capabilities) -> type[SimProcessGroup]:
    """The group class that declares ``caps`` (Note [behaving as gloo]: one per profile)."""
    cls = _PROFILE_CLASSES.get(caps.name)
    if cls is None:
        cls = _PROFILE_CLASSES[caps.name] = type(
            f"SimProcessGroup_{caps.name}", (SimProcessGroup,),
            {"capabilities": caps, "collective_capabilities": caps.declared(),
             "__module__": __name__})
    return cls
