"""One pipeline stage: a module that runs on the ranks of one coordinate of the pp mesh dim,
receives its inputs from the previous stage, sends its outputs to the next, and does the same
with gradients the other way (torch.distributed.pipelining's ``PipelineStage``, manual form).

Note [stage boundaries]
What crosses a boundary is a tuple of tensors, plain or DTensor. A DTensor travels as its
local piece, from each rank of the sending stage to the rank at the same coordinate of the
receiving stage's mesh (the stages' meshes have one shape: the pp dim cut from one mesh), with
its global shape, stride and placements in a small header sent first (pickled, as
``send_object_list`` does, on the channel's tag), so the receiver makes the same DTensor on
its own mesh with no collective. The header goes
with every micro-batch: micro-batches may differ in size (``tensor_split`` of an uneven
batch), and a sender and receiver that disagree on a shape get simpg's clear error rather
than a wrong answer. The received pieces are leaves that require grad; their gradients go
back the same way, in the layout the forward sent (``from_local``'s backward gives the piece
of the gradient in the forward's placements).
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import nn

from dtensor.comm.activity import doing
from dtensor.mesh import DeviceMesh
from dtensor.pipelining.split_backward import WeightBackward, backward_input
from dtensor.tensor import DTensor


HEADER_BYTES = 512  # Note [stage boundaries]: one header message per micro-batch and channel


class PipeliningError(ValueError):
    """A stage or schedule set up in a way no pipeline can run."""


@dataclass(frozen=True)
class _Header:
    """What the receiver needs to rebuild one boundary value (Note [stage boundaries])."""

    local_shape: tuple[int, ...]
    dtype: torch.dtype
    requires_grad: bool
    # a DTensor's: global shape, stride, placements (None for a plain tensor)
    shape: tuple[int, ...] | None = None
    stride: tuple[int, ...] | None = None
    placements: tuple | None = None


class PipelineStage:
    """``submodule`` as stage ``stage_index`` of ``num_stages``, one stage per rank of
    ``group`` (the pp process group, the world by default), stage i on group rank i.

    ``mesh``: where DTensors that arrive at this stage live (this stage's sub-mesh, e.g.
    ``mesh["tp"]`` of a ``("pp", "tp")`` mesh); needed only when DTensors cross a boundary.
    ``static_shapes``: every micro-batch of every step crosses each boundary in the shapes of
    the first (torch's assumption), so the header goes once; by default it goes with each
    micro-batch (Note [stage boundaries]). Every stage must agree on it.
    ``device``, ``input_args`` and ``output_args`` are taken for torch's signature.
    """

    def __init__(self, submodule: nn.Module, stage_index: int, num_stages: int,
                 device: torch.device | str | None = None, input_args: Any = None,
                 output_args: Any = None, group: dist.ProcessGroup | None = None, *,
                 mesh: DeviceMesh | None = None, static_shapes: bool = False) -> None:
        if not isinstance(submodule, nn.Module):
            raise PipeliningError(f"PipelineStage takes an nn.Module, got "
                                  f"{type(submodule).__name__}")
        if num_stages < 1 or not 0 <= stage_index < num_stages:
            raise PipeliningError(f"stage_index {stage_index} of num_stages {num_stages}: "
                                  f"expected 0 <= stage_index < num_stages")
        self.group = group if group is not None else dist.group.WORLD
        size, rank = dist.get_world_size(self.group), dist.get_rank(self.group)
        looped = stage_index % size == rank
        v_shape = num_stages == 2 * size and stage_index == 2 * size - 1 - rank
        if num_stages % size or not (looped or v_shape):
            raise PipeliningError(
                f"stage {stage_index} of {num_stages} built on group rank {rank} of {size}: "
                f"stage i lives on group rank i % {size} (pass the pp mesh dim's group, e.g. "
                f"mesh.get_group('pp'), and num_stages a multiple of its size), or, for "
                f"ScheduleZBVZeroBubble's V, stages r and {2 * size - 1} - r on rank r")
        self.pp_size = size
        self.submod = submodule
        self.stage_index, self.num_stages = stage_index, num_stages
        self.mesh = mesh
        self.is_first = stage_index == 0
        self.is_last = stage_index == num_stages - 1
        self._inputs: dict[int, tuple] = {}  # micro-batch -> leaves received (or given)
        self._outputs: dict[int, tuple] = {}  # micro-batch -> this stage's outputs
        self._sends: list[dist.Work] = []
        self.static_shapes = static_shapes
        self._known: dict[int, Any] = {}  # tag -> the header once sent or received (static)
        self._posted: dict[int, list[tuple[torch.Tensor, dist.Work]]] = {}  # tag -> receives
        self._posted_for: set[tuple[str, int]] = set()  # (kind, micro-batch) posted this step
        self._weight_halves: dict[int, WeightBackward] = {}  # Note [input and weight backward]
        # Note [stages on one rank]: which rank holds stage i, and this rank's other stages
        self.stage_to_rank: Callable[[int], int] = lambda i: i % size
        self.local_stages: dict[int, PipelineStage] = {}
        self._local_inbox: dict[int, list[tuple[int, int, tuple]]] = {}  # tag -> sent values

    # -- forward ---------------------------------------------------------------------------
    def forward_one(self, mb: int, args: tuple, kwargs: dict, n_microbatches: int = 1
                    ) -> tuple:
        """Run micro-batch ``mb`` of ``n_microbatches``: the first stage on ``args``, the
        others on what the previous stage sent; sends the outputs on unless this is the last
        stage."""
        with doing(self._action("forward", mb, n_microbatches)):
            return self._forward_one(mb, args, kwargs, n_microbatches)

    def _forward_one(self, mb: int, args: tuple, kwargs: dict, n_microbatches: int) -> tuple:
        if not self.is_first:
            args, leaves = self._receive_values(self.stage_index - 1, mb, n_microbatches)
            kwargs = {}
            self._inputs[mb] = leaves
        out = self.submod(*args, **kwargs)
        outs = out if isinstance(out, tuple) else (out,)
        if not all(isinstance(o, torch.Tensor) for o in outs):
            raise PipeliningError(f"stage {self.stage_index} returned "
                                  f"{[type(o).__name__ for o in outs]}: a stage returns a "
                                  f"tensor or a tuple of tensors")
        self._outputs[mb] = outs
        if not self.is_last:
            self._send_values(outs, self.stage_index + 1, mb, n_microbatches)
        return outs

    # -- backward --------------------------------------------------------------------------
    def backward_one(self, mb: int, loss: torch.Tensor | None = None, n_microbatches: int = 1
                     ) -> None:
        """Micro-batch ``mb``'s backward: from ``loss`` on the last stage, else from the
        gradients the next stage sends; then the inputs' gradients go to the previous one."""
        with doing(self._action("backward", mb, n_microbatches)):
            self._backward_one(mb, loss, n_microbatches)

    def _action(self, what: str, mb: int, m: int) -> str:
        """Note [activity]: the name simpg gives this stage's communication in a report."""
        return f"pipeline stage {self.stage_index}: {what} of micro-batch {mb} of {m}"

    def _backward_one(self, mb: int, loss: torch.Tensor | None, n_microbatches: int,
                      split: bool = False) -> None:
        outs = self._outputs.pop(mb)
        if self.is_last:
            if loss is None:
                raise PipeliningError("the last stage's backward needs the micro-batch's loss: "
                                      "give the schedule a loss_fn")
            outs, grads = (loss,), [None]
        else:
            grads = self._receive_grads(outs, self.stage_index + 1, mb, n_microbatches)
        if split:
            self._weight_halves[mb] = backward_input(outs, grads, self._inputs.get(mb, ()))
        else:
            pairs = [(o, g) for o, g in zip(outs, grads) if o.requires_grad]
            if pairs:
                torch.autograd.backward([o for o, _ in pairs],
                                        None if self.is_last else [g for _, g in pairs])
        if not self.is_first:
            self._send_grads(self._inputs.pop(mb), self.stage_index - 1, mb, n_microbatches)

    def backward_input_one(self, mb: int, loss: torch.Tensor | None = None,
                           n_microbatches: int = 1) -> None:
        """The input half of micro-batch ``mb``'s backward (Note [input and weight backward]
        in split_backward.py): the inputs' gradients, sent back at once; the weights' wait
        for ``backward_weight_one``."""
        with doing(self._action("backward (inputs)", mb, n_microbatches)):
            self._backward_one(mb, loss, n_microbatches, split=True)

    def backward_weight_one(self, mb: int, n_microbatches: int = 1) -> None:
        """The weight half of micro-batch ``mb``'s backward: the parameters' gradients."""
        half = self._weight_halves.pop(mb, None)
        if half is None:
            raise PipeliningError(f"stage {self.stage_index}: the weight backward of "
                                  f"micro-batch {mb} comes before its input backward")
        # Note [a weight half inside fully_shard] in dtensor/parallel/fsdp_hooks.py
        ends = [mod.backward_outside() for mod in self.submod.modules()
                if hasattr(mod, "backward_outside")]
        with doing(self._action("backward (weights)", mb, n_microbatches)):
            try:
                half.run()
            finally:
                for end in ends:
                    end()

    def sync_gradients(self, sync: bool) -> None:
        """Whether the next forward or backward reduces gradients over dp, where the module
        is data parallel (Note [one reduce-scatter per step] in schedules.py)."""
        setter = getattr(self.submod, "set_requires_gradient_sync", None)
        if setter is not None:
            setter(sync)

    def reduce_accumulated_gradients(self) -> None:
        """Where the module is data parallel, reduce over dp the gradients its backwards
        summed with sync off (Note [zero bubble] in schedules.py)."""
        for mod in self.submod.modules():  # the module itself or those inside a container
            reduce = getattr(mod, "reduce_accumulated_gradients", None)
            if reduce is not None:
                reduce(recurse=False)

    def scale_grads(self, factor: int) -> None:
        """Divide the module's gradients by ``factor`` (the micro-batch count)."""
        with torch.no_grad():
            for p in self.submod.parameters():
                if p.grad is not None:
                    p.grad.div_(factor)

    def wait_sends(self) -> None:
        for work in self._sends:
            work.wait()
        self._sends.clear()
        self._posted_for.clear()

    # -- what crosses a boundary (Note [stage boundaries]) ----------------------------------
    # Each (sending stage, direction) is its own channel, a tag: with several stages a rank
    # (Note [virtual stages] in schedules.py), two ranks carry several channels, each in order.
    def _peer(self, stage: int) -> int:
        return dist.get_global_rank(self.group, self.stage_to_rank(stage))

    # Note [stages on one rank]: in a V (ScheduleZBVZeroBubble) stages pp - 1 and pp share a
    # rank; what crosses between two stages of one rank is handed over in memory, as torch's
    # schedules do (a message to oneself is no collective, and gloo has none): the values
    # detached (the receiver's leaves), in the order sent, checked by micro-batch.
    def _hand_over(self, stage: int, tag: int, mb: int, m: int, values: list) -> None:
        self.local_stages[stage]._local_inbox.setdefault(tag, []).append((mb, m, values))

    def _take_over(self, stage: int, tag: int, what: str, mb: int, m: int) -> list:
        box = self._local_inbox.get(tag)
        if not box:
            raise PipeliningError(
                f"stage {self.stage_index} runs the {what} of micro-batch {mb} of {m} before "
                f"stage {stage}, on the same rank, produced it: the schedule's order on this "
                f"rank runs a stage ahead of its own input")
        sent_mb, sent_m, values = box.pop(0)
        self._check_order(what, mb, m, f"stage {stage} handed over", sent_mb, sent_m)
        return values

    def _check_order(self, what: str, mb: int, m: int, sender: str, sent_mb: int,
                     sent_m: int) -> None:
        if (sent_mb, sent_m) != (mb, m):
            raise PipeliningError(
                f"stage {self.stage_index} runs the {what} of micro-batch {mb} of {m} but "
                f"{sender} micro-batch {sent_mb} of {sent_m}: every stage's schedule needs "
                f"the same n_microbatches and the same order of micro-batches")

    def _send(self, t: torch.Tensor, stage: int, tag: int) -> None:
        self._sends.append(dist.isend(t.detach().contiguous(), self._peer(stage),
                                      group=self.group, tag=tag))

    def _recv(self, buf: torch.Tensor, stage: int, tag: int) -> torch.Tensor:
        posted = self._posted.get(tag)
        if posted:  # issued early by post_receives, in the order they are read
            early, work = posted.pop(0)
            work.wait()
            return early
        dist.recv(buf, self._peer(stage), group=self.group, tag=tag)
        return buf

    def post_receives(self, kind: str, mb: int, n_microbatches: int = 1) -> None:
        """Issue now the receives micro-batch ``mb``'s forward (``"F"``) or backward
        (``"B"``) will read, where their shapes are known (static shapes, after the first
        header): the transfer then runs while this rank computes, as torch's schedules post
        the next action's receives with the current one's sends."""
        if not self.static_shapes:
            return
        if kind == "F" and not self.is_first:
            stage, tag = self.stage_index - 1, 2 * (self.stage_index - 1)
            headers = self._known.get(tag)
            shapes = None if headers is None else [(h[0], h[1]) for h in headers]
        elif kind in ("B", "I") and not self.is_last and mb in self._outputs:
            stage, tag = self.stage_index + 1, 2 * (self.stage_index + 1) + 1
            locals_ = [o._local_tensor if isinstance(o, DTensor) else o
                       for o in self._outputs[mb]]
            shapes = None if tag not in self._known else [(t.shape, t.dtype) for t in locals_]
        else:
            return
        if shapes is None or (kind, mb) in self._posted_for or stage in self.local_stages:
            return
        self._posted_for.add((kind, mb))
        device = self._device()
        bufs = [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in shapes]
        with doing(self._action("forward" if kind == "F" else "backward", mb,
                                n_microbatches)):
            self._posted.setdefault(tag, []).extend(
                (b, dist.irecv(b, self._peer(stage), group=self.group, tag=tag)) for b in bufs)

    def _send_header(self, header: Any, stage: int, tag: int) -> None:
        """``header`` pickled into one message of HEADER_BYTES (one latency, as the value
        that follows it); a longer one spills into a second message. With static shapes,
        only the first on each channel."""
        if self.static_shapes:
            if tag in self._known:
                return
            self._known[tag] = header
        data = pickle.dumps(header)
        first = torch.zeros(HEADER_BYTES, dtype=torch.uint8)
        first[:8] = torch.tensor([len(data)], dtype=torch.int64).view(torch.uint8)
        head = data[:HEADER_BYTES - 8]
        first[8:8 + len(head)] = torch.frombuffer(bytearray(head), dtype=torch.uint8)
        self._send(first.to(self._device()), stage, tag)
        if len(data) > len(head):
            rest = torch.frombuffer(bytearray(data[len(head):]), dtype=torch.uint8)
            self._send(rest.to(self._device()), stage, tag)

    def _recv_header(self, stage: int, tag: int, what: str, mb: int, m: int) -> Any:
        if self.static_shapes and tag in self._known:
            return self._known[tag]
        device = self._device()
        first = self._recv(torch.empty(HEADER_BYTES, dtype=torch.uint8, device=device),
                           stage, tag).cpu()
        n = int(first[:8].view(torch.int64))
        data = first[8:8 + n].numpy().tobytes()
        if n > len(data):
            rest = self._recv(torch.empty(n - len(data), dtype=torch.uint8, device=device),
                              stage, tag)
            data += rest.cpu().numpy().tobytes()
        sent_mb, sent_m, body = pickle.loads(data)
        if self.static_shapes:  # the first header, micro-batch 0's, stands for all
            self._known[tag] = body
        self._check_order(what, mb, m, f"stage {stage} sent", sent_mb, sent_m)
        return body

    def _send_values(self, values: tuple, stage: int, mb: int, m: int) -> None:
        tag = 2 * self.stage_index
        if stage in self.local_stages:
            return self._hand_over(stage, tag, mb, m, list(values))
        self._send_header((mb, m, [_header(v) for v in values]), stage, tag)
        for v in values:
            self._send(v._local_tensor if isinstance(v, DTensor) else v, stage, tag)

    def _receive_values(self, stage: int, mb: int, m: int) -> tuple[tuple, tuple]:
        """The values the previous stage sent for micro-batch ``mb`` of ``m``, and the
        received pieces behind them (their gradients are what goes back)."""
        tag = 2 * stage
        if stage in self.local_stages:
            return self._local_values(self._take_over(stage, tag, "forward", mb, m))
        headers = self._recv_header(stage, tag, "forward", mb, m)
        out, leaves = [], []
        for h in (_Header(*fields) for fields in headers):
            buf = self._recv(torch.empty(h.local_shape, dtype=h.dtype, device=self._device()),
                             stage, tag)
            buf.requires_grad_(h.requires_grad)
            leaves.append(buf)
            if h.placements is None:
                out.append(buf)
                continue
            if self.mesh is None:
                raise PipeliningError(
                    f"stage {self.stage_index} receives a DTensor with placements "
                    f"{h.placements} but was built without mesh=: pass the stage's sub-mesh "
                    f"(PipelineStage(..., mesh=mesh['tp']))")
            out.append(DTensor.from_local(buf, self.mesh, h.placements, shape=h.shape,
                                          stride=h.stride))
        return tuple(out), tuple(leaves)

    def _local_values(self, values: list) -> tuple[tuple, tuple]:
        """Values handed over by a stage of this rank, as ``_receive_values`` gives them."""
        out, leaves = [], []
        for v in values:
            local = v._local_tensor if isinstance(v, DTensor) else v
            leaf = local.detach().requires_grad_(v.requires_grad)
            leaves.append(leaf)
            out.append(leaf if not isinstance(v, DTensor) else DTensor.from_local(
                leaf, self.mesh if self.mesh is not None else v.device_mesh, v.placements,
                shape=v.shape, stride=v.stride()))
        return tuple(out), tuple(leaves)

    def _receive_grads(self, outs: tuple, stage: int, mb: int, m: int) -> list[torch.Tensor]:
        tag = 2 * stage + 1
        handed = None
        if stage in self.local_stages:
            handed = self._take_over(stage, tag, "backward", mb, m)
        else:
            self._recv_header(stage, tag, "backward", mb, m)
        grads = []
        for i, o in enumerate(outs):
            local = o._local_tensor if isinstance(o, DTensor) else o
            buf = handed[i] if handed is not None else self._recv(
                torch.empty(local.shape, dtype=local.dtype, device=local.device), stage, tag)
            if isinstance(o, DTensor):
                buf = DTensor.from_local(buf, o.device_mesh, o.placements, shape=o.shape,
                                         stride=o.stride())
            grads.append(buf)
        return grads

    def _send_grads(self, leaves: tuple, stage: int, mb: int, m: int) -> None:
        tag = 2 * self.stage_index + 1
        if stage in self.local_stages:
            return self._hand_over(stage, tag, mb, m, [
                leaf.grad if leaf.grad is not None else torch.zeros_like(leaf)
                for leaf in leaves])
        self._send_header((mb, m, None), stage, tag)
        for leaf in leaves:
            self._send(leaf.grad if leaf.grad is not None else torch.zeros_like(leaf), stage,
                       tag)

    def _device(self) -> torch.device:
        p = next(self.submod.parameters(), None)
        if p is None:
            return torch.device("cpu")
        return (p._local_tensor if isinstance(p, DTensor) else p).device


def _header(v: torch.Tensor) -> tuple:
    """A ``_Header`` as a plain tuple (a short pickle: the header is one small message)."""
    if isinstance(v, DTensor):
        return (tuple(v._local_tensor.shape), v.dtype, v.requires_grad, tuple(v.shape),
                tuple(v.stride()), tuple(v.placements))
    return (tuple(v.shape), v.dtype, v.requires_grad)


LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
