"""The simulated collectives as pure functions over all ranks' inputs.

Each function takes the per-rank inputs of one group (a list indexed by group rank) and
returns the per-rank outputs (a list indexed by group rank). No threads, no process
groups: a rendezvous elsewhere collects one input per rank, one thread calls the function
here, and every rank copies its output into its own buffers. Outputs never alias inputs
(a rank's output buffer may be its input buffer), but one output tensor may be shared by
several ranks.

Reductions fold strictly in rank order, ``((x0 op x1) op x2) ...``, in the tensors' own
dtype, so a float sum is bitwise reproducible whatever the thread interleaving.

``traffic`` gives the bytes each rank sends and receives under the usual ring algorithms;
it is what ``CollectiveRecord.bytes_sent`` / ``bytes_received`` hold.

>>> import torch
>>> [t.tolist() for t in all_reduce([torch.tensor([1, 2]), torch.tensor([3, 4])], "sum")]
[[4, 6], [4, 6]]
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

__all__ = [
    "REDUCE_OPS",
    "check_reduce_op",
    "reduce_tensors",
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "all_to_all_single",
    "all_to_all",
    "broadcast",
    "reduce",
    "gather",
    "scatter",
    "traffic",
    "TRAFFIC_OPS",
]

# --------------------------------------------------------------------------- reduce ops

_INTEGER = frozenset(
    {torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
     torch.uint16, torch.uint32, torch.uint64}
)
# uint16/32/64 are "barebones" in torch: bitwise ops work, add/min/max do not on CPU.
_ARITH_INTEGER = _INTEGER - {torch.uint16, torch.uint32, torch.uint64}
_FLOATING = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})
_COMPLEX = frozenset({torch.complex64, torch.complex128})  # complex32 lacks most kernels
_BOOL = frozenset({torch.bool})

# op -> (dtypes it supports, how the error message names them)
_SUPPORT: dict[str, tuple[frozenset[torch.dtype], str]] = {
    "sum": (_BOOL | _ARITH_INTEGER | _FLOATING | _COMPLEX,
            "bool, an integer (not uint16/32/64), floating or complex dtype"),
    "product": (_BOOL | _ARITH_INTEGER | _FLOATING | _COMPLEX,
                "bool, an integer (not uint16/32/64), floating or complex dtype"),
    "avg": (_FLOATING | _COMPLEX, "a floating or complex dtype (an integer average would "
                                  "round; use sum and divide)"),
    "min": (_BOOL | _ARITH_INTEGER | _FLOATING,
            "bool, an integer (not uint16/32/64) or floating dtype"),
    "max": (_BOOL | _ARITH_INTEGER | _FLOATING,
            "bool, an integer (not uint16/32/64) or floating dtype"),
    "band": (_BOOL | _INTEGER, "bool or an integer dtype"),
    "bor": (_BOOL | _INTEGER, "bool or an integer dtype"),
    "bxor": (_BOOL | _INTEGER, "bool or an integer dtype"),
}
REDUCE_OPS: tuple[str, ...] = tuple(_SUPPORT)


_Binary = Callable[[Tensor, Tensor], Tensor]
_BINARY: dict[str, _Binary] = {
    "sum": torch.add, "avg": torch.add, "product": torch.mul,
    "min": torch.minimum, "max": torch.maximum,
    "band": torch.bitwise_and, "bor": torch.bitwise_or, "bxor": torch.bitwise_xor,
}


def _binary(op: str, dtype: torch.dtype) -> _Binary:
    # On bool, sum/max are logical or and product/min logical and (what NCCL does); we
    # spell them out rather than rely on torch.add's saturating bool semantics.
    if dtype == torch.bool and op in ("sum", "max"):
        return torch.logical_or
    if dtype == torch.bool and op in ("product", "min"):
        return torch.logical_and
    return _BINARY[op]


def check_reduce_op(op: str, dtype: torch.dtype) -> None:
    """Raise ``ValueError`` unless reduce op ``op`` is defined on ``dtype``.

    >>> check_reduce_op("sum", torch.bool)
    """
    if op not in _SUPPORT:
        raise ValueError(f"unknown reduce op {op!r}: expected one of {', '.join(REDUCE_OPS)}")
    dtypes, needs = _SUPPORT[op]
    if dtype not in dtypes:
        raise ValueError(f"reduce op {op!r} does not support dtype {dtype}: it needs {needs}")


def reduce_tensors(tensors: Sequence[Tensor], op: str) -> Tensor:
    """Reduce ``tensors`` (one per rank, equal shapes and dtypes) in rank order.

    >>> reduce_tensors([torch.tensor(1.5), torch.tensor(2.0)], "avg").item()
    1.75
    """
    return _reduce("tensors", tensors, op)


def _reduce(arg: str, tensors: Sequence[Tensor], op: str) -> Tensor:
    """``reduce_tensors`` whose errors name the caller's argument ``arg``."""
    _check_nonempty(arg, tensors)
    _check_same_meta(arg, tensors, dtype=True, shape=True)
    check_reduce_op(op, tensors[0].dtype)
    fn = _binary(op, tensors[0].dtype)
    acc = tensors[0].detach().clone()  # a new tensor even for one rank: never alias inputs
    for t in tensors[1:]:
        acc = fn(acc, t.detach())
    if op == "avg":
        acc = acc / len(tensors)
    return acc


# --------------------------------------------------------------------------- validation


def _check_nonempty(arg: str, items: Sequence[object]) -> None:
    if len(items) == 0:
        raise ValueError(f"{arg}: expected one entry per rank of the group, got an empty list")


def _check_same_meta(arg: str, tensors: Sequence[Tensor], *, dtype: bool, shape: bool) -> None:
    """Every tensor must have rank 0's dtype (and shape): name the first that does not."""
    ref = tensors[0]
    for r, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise ValueError(f"{arg}[{r}]: expected a torch.Tensor, got {type(t).__name__}")
        if dtype and t.dtype != ref.dtype:
            raise ValueError(f"{arg}: rank {r} has dtype {t.dtype}, expected {ref.dtype} "
                             f"(the dtype of rank 0)")
        if shape and t.shape != ref.shape:
            raise ValueError(f"{arg}: rank {r} has shape {tuple(t.shape)}, expected "
                             f"{tuple(ref.shape)} (the shape of rank 0)")


def _check_root(arg: str, root: int, n: int) -> None:
    if not 0 <= root < n:
        raise ValueError(f"{arg}={root} is not a group rank: expected 0 <= {arg} < {n}")


def _check_lists(arg: str, lists: Sequence[Sequence[Tensor]], n: int) -> None:
    """n lists of n tensors, all of one dtype (that of ``lists[0][0]``)."""
    for r, lst in enumerate(lists):
        if len(lst) != n:
            raise ValueError(f"{arg}: rank {r} passed {len(lst)} tensors, expected {n} "
                             f"(one per rank of the group)")
    ref = lists[0][0].dtype
    for r, lst in enumerate(lists):
        for i, t in enumerate(lst):
            if not isinstance(t, Tensor):
                raise ValueError(f"{arg}[{r}][{i}]: expected a torch.Tensor, got "
                                 f"{type(t).__name__}")
            if t.dtype != ref:
                raise ValueError(f"{arg}: rank {r}'s tensor {i} has dtype {t.dtype}, expected "
                                 f"{ref} (that of rank 0's tensor 0)")


def _check_dim0(arg: str, tensors: Sequence[Tensor]) -> None:
    for r, t in enumerate(tensors):
        if t.dim() == 0:
            raise ValueError(f"{arg}: rank {r} passed a 0-dim tensor, expected at least one "
                             f"dimension to split or concatenate along dim 0")


def _copies(tensors: Sequence[Tensor]) -> list[Tensor]:
    return [t.detach().clone() for t in tensors]


# --------------------------------------------------------------------------- collectives


def all_reduce(inputs: Sequence[Tensor], op: str) -> list[Tensor]:
    """Every rank gets the rank-order reduction of all inputs.

    >>> [t.item() for t in all_reduce([torch.tensor(2), torch.tensor(5)], "max")]
    [5, 5]
    """
    _check_nonempty("inputs", inputs)
    out = _reduce("inputs", inputs, op)
    return [out] * len(inputs)


def all_gather(inputs: Sequence[Tensor]) -> list[list[Tensor]]:
    """Every rank gets every rank's tensor; shapes may differ, dtypes may not.

    >>> [t.tolist() for t in all_gather([torch.tensor([1]), torch.tensor([2, 3])])[0]]
    [[1], [2, 3]]
    """
    _check_nonempty("inputs", inputs)
    _check_same_meta("inputs", inputs, dtype=True, shape=False)
    gathered = _copies(inputs)
    return [list(gathered) for _ in inputs]


def all_gather_into_tensor(inputs: Sequence[Tensor]) -> list[Tensor]:
    """Every rank gets all inputs concatenated along dim 0; shapes must be equal.

    >>> all_gather_into_tensor([torch.tensor([1]), torch.tensor([2])])[1].tolist()
    [1, 2]
    """
    _check_nonempty("inputs", inputs)
    _check_same_meta("inputs", inputs, dtype=True, shape=True)
    _check_dim0("inputs", inputs)
    out = torch.cat([t.detach() for t in inputs], dim=0)
    return [out] * len(inputs)


def reduce_scatter(inputs_lists: Sequence[Sequence[Tensor]], op: str) -> list[Tensor]:
    """Rank ``i`` gets the reduction of every rank's ``i``-th tensor.

    >>> x = [[torch.tensor(1), torch.tensor(2)], [torch.tensor(10), torch.tensor(20)]]
    >>> [t.item() for t in reduce_scatter(x, "sum")]
    [11, 22]
    """
    _check_nonempty("inputs_lists", inputs_lists)
    n = len(inputs_lists)
    _check_lists("inputs_lists", inputs_lists, n)
    outs = []
    for i in range(n):
        column = [lst[i] for lst in inputs_lists]
        outs.append(_reduce(f"inputs_lists[*][{i}]", column, op))
    return outs


def reduce_scatter_tensor(inputs: Sequence[Tensor], op: str) -> list[Tensor]:
    """Each input is split along dim 0 into n equal parts; rank ``i`` gets part ``i`` reduced.

    >>> [t.tolist() for t in reduce_scatter_tensor([torch.tensor([1, 2])] * 2, "sum")]
    [[2], [4]]
    """
    _check_nonempty("inputs", inputs)
    _check_same_meta("inputs", inputs, dtype=True, shape=True)
    _check_dim0("inputs", inputs)
    n = len(inputs)
    if inputs[0].shape[0] % n != 0:
        raise ValueError(f"inputs: dim 0 has size {inputs[0].shape[0]}, expected a multiple "
                         f"of the group size {n}")
    return reduce_scatter([list(torch.chunk(t, n, dim=0)) for t in inputs], op)


def _per_rank_splits(arg: str, splits: Sequence[Sequence[int] | None] | None,
                     n: int) -> list[list[int] | None]:
    """One entry per rank: its validated split sizes, or None for "equal"."""
    if splits is None:
        return [None] * n
    if len(splits) != n:
        raise ValueError(f"{arg}: got {len(splits)} entries, expected {n} (one per rank)")
    if all(sp is not None for sp in splits):  # n^2 sizes (4,096 at 64 ranks), checked in C
        rows = [list(sp) for sp in splits]
        if (all(len(r) == n for r in rows)
                and set(map(type, itertools.chain.from_iterable(rows))) <= {int}
                and min(map(min, rows), default=0) >= 0):
            return rows  # type: ignore[return-value]
    resolved: list[list[int] | None] = []
    for r, s in enumerate(splits):
        if s is not None:
            s = [int(x) for x in s]
            if len(s) != n or any(x < 0 for x in s):
                raise ValueError(f"{arg}[{r}] = {s}: expected {n} non-negative sizes")
        resolved.append(s)
    return resolved


def _input_splits(splits: Sequence[Sequence[int] | None] | None,
                  sizes: Sequence[int]) -> list[list[int]]:
    """Each rank's split of its dim 0 (of size ``sizes[r]``); None means equal parts."""
    n = len(sizes)
    resolved = []
    for r, s in enumerate(_per_rank_splits("input_splits", splits, n)):
        if s is None:
            if sizes[r] % n != 0:
                raise ValueError(f"input_splits[{r}] is None (equal split) but rank {r}'s dim "
                                 f"0 has size {sizes[r]}, expected a multiple of the group "
                                 f"size {n}")
            s = [sizes[r] // n] * n
        elif sum(s) != sizes[r]:
            raise ValueError(f"input_splits[{r}] = {s} sums to {sum(s)}, expected rank {r}'s "
                             f"dim 0 size {sizes[r]}")
        resolved.append(s)
    return resolved


def all_to_all_single(inputs: Sequence[Tensor],
                      input_splits: Sequence[Sequence[int] | None] | None = None,
                      output_splits: Sequence[Sequence[int] | None] | None = None,
                      ) -> list[Tensor]:
    """Rank ``i`` gets, concatenated in rank order, the ``i``-th dim-0 slice of every input.

    ``input_splits[r]`` is how rank r cuts its input (sizes along dim 0, one per
    destination); ``output_splits[r]`` is what rank r expects from each source. ``None``,
    for one rank or for all, means an equal split (for outputs: equal-sized pieces from
    every source). Rank i's ``input_splits[j]`` must equal rank j's ``output_splits[i]``.

    >>> x = [torch.tensor([0, 1, 2]), torch.tensor([10])]
    >>> [t.tolist() for t in all_to_all_single(x, [[1, 2], [0, 1]], [[1, 0], [2, 1]])]
    [[0], [1, 2, 10]]
    """
    _check_nonempty("inputs", inputs)
    n = len(inputs)
    _check_same_meta("inputs", inputs, dtype=True, shape=False)
    _check_dim0("inputs", inputs)
    for r, t in enumerate(inputs):
        if t.shape[1:] != inputs[0].shape[1:]:
            raise ValueError(f"inputs: rank {r} has shape {tuple(t.shape)}, expected trailing "
                             f"dims {tuple(inputs[0].shape[1:])} (those of rank 0)")
    ins = _input_splits(input_splits, [t.shape[0] for t in inputs])
    outs = _per_rank_splits("output_splits", output_splits, n)
    columns = list(zip(*ins))  # columns[dst][src]: rows src sends to dst
    for dst, (incoming, expected) in enumerate(zip(columns, outs)):
        if expected is None:
            if len(set(incoming)) > 1:
                raise ValueError(f"output_splits[{dst}] is None (equal pieces) but rank {dst} "
                                 f"receives pieces of sizes {list(incoming)} from ranks "
                                 f"0..{n - 1}")
        elif tuple(expected) != incoming:
            src = next(r for r in range(n) if incoming[r] != expected[r])
            raise ValueError(
                f"all_to_all_single: rank {src} sends {incoming[src]} rows to rank {dst} "
                f"(input_splits[{src}][{dst}]) but rank {dst} expects {expected[src]} "
                f"from rank {src} (output_splits[{dst}][{src}])")
    return _exchange_rows(inputs, ins, columns)


def _exchange_rows(inputs: Sequence[Tensor], ins: list[list[int]],
                   columns: list[tuple[int, ...]]) -> list[Tensor]:
    """Note [one copy per all_to_all]: every input stacked once, then one gather (a transpose
    when every piece has the same rows) puts each destination's rows together; the outputs
    are views of that one result. Splitting every input into n pieces and concatenating n
    pieces per destination made n^2 tensors (64 ranks: 4,096 views, 11 ms a call)."""
    n = len(inputs)
    stacked = torch.cat([t.detach() for t in inputs], dim=0)
    rest = tuple(stacked.shape[1:])
    k = ins[0][0]
    if len(set(ins[0])) == 1 and all(row == ins[0] for row in ins):
        moved = stacked.view(n, n, k, *rest).transpose(0, 1).reshape(n, n * k, *rest)
        return list(moved.unbind(0))
    lengths = torch.tensor(ins, dtype=torch.long)  # [src][dst]
    starts = torch.cumsum(lengths.reshape(-1), 0).reshape(n, n) - lengths  # row of each piece
    by_dst_len, by_dst_start = lengths.t().reshape(-1), starts.t().reshape(-1)
    piece_begin = torch.cumsum(by_dst_len, 0) - by_dst_len
    total = int(by_dst_len.sum())
    index = (torch.repeat_interleave(by_dst_start - piece_begin, by_dst_len, output_size=total)
             + torch.arange(total))
    return list(stacked.index_select(0, index).split([sum(c) for c in columns], dim=0))


def all_to_all(inputs_lists: Sequence[Sequence[Tensor]]) -> list[list[Tensor]]:
    """Rank ``i`` gets ``[inputs_lists[j][i] for j in ranks]``.

    >>> x = [[torch.tensor(0), torch.tensor(1)], [torch.tensor(10), torch.tensor(11)]]
    >>> [[t.item() for t in ts] for ts in all_to_all(x)]
    [[0, 10], [1, 11]]
    """
    _check_nonempty("inputs_lists", inputs_lists)
    n = len(inputs_lists)
    _check_lists("inputs_lists", inputs_lists, n)
    return [[inputs_lists[src][dst].detach().clone() for src in range(n)] for dst in range(n)]


def broadcast(inputs: Sequence[Tensor], src: int) -> list[Tensor]:
    """Every rank gets ``inputs[src]``; every rank's buffer must match it in shape and dtype.

    >>> [t.item() for t in broadcast([torch.tensor(7), torch.tensor(0)], src=0)]
    [7, 7]
    """
    _check_nonempty("inputs", inputs)
    _check_root("src", src, len(inputs))
    _check_matches_root("inputs", inputs, src)
    out = inputs[src].detach().clone()
    return [out] * len(inputs)


def _check_matches_root(arg: str, tensors: Sequence[Tensor], root: int) -> None:
    ref = tensors[root]
    for r, t in enumerate(tensors):
        if t.dtype != ref.dtype or t.shape != ref.shape:
            raise ValueError(f"{arg}: rank {r} has {t.dtype} {tuple(t.shape)}, expected "
                             f"{ref.dtype} {tuple(ref.shape)} (that of root rank {root})")


def reduce(inputs: Sequence[Tensor], dst: int, op: str) -> list[Tensor | None]:
    """Rank ``dst`` gets the rank-order reduction; the other ranks get None.

    >>> reduce([torch.tensor(1), torch.tensor(2)], dst=1, op="sum")[0] is None
    True
    """
    _check_nonempty("inputs", inputs)
    _check_root("dst", dst, len(inputs))
    out = _reduce("inputs", inputs, op)
    return [out if r == dst else None for r in range(len(inputs))]


def gather(inputs: Sequence[Tensor], dst: int) -> list[list[Tensor] | None]:
    """Rank ``dst`` gets every rank's tensor (shapes may differ); the others get None.

    >>> gather([torch.tensor(1), torch.tensor(2)], dst=0)[1] is None
    True
    """
    _check_nonempty("inputs", inputs)
    _check_root("dst", dst, len(inputs))
    _check_same_meta("inputs", inputs, dtype=True, shape=False)
    gathered = _copies(inputs)
    return [gathered if r == dst else None for r in range(len(inputs))]


def scatter(inputs_lists_at_src: Sequence[Sequence[Tensor] | None], src: int) -> list[Tensor]:
    """Rank ``i`` gets ``inputs_lists_at_src[src][i]``.

    The argument is indexed by group rank like every other; only the source rank's entry
    (its scatter list of n tensors) is read, the others may be None.

    >>> [t.item() for t in scatter([None, [torch.tensor(4), torch.tensor(5)]], src=1)]
    [4, 5]
    """
    _check_nonempty("inputs_lists_at_src", inputs_lists_at_src)
    n = len(inputs_lists_at_src)
    _check_root("src", src, n)
    lst = inputs_lists_at_src[src]
    if lst is None or len(lst) != n:
        got = "None" if lst is None else f"{len(lst)} tensors"
        raise ValueError(f"inputs_lists_at_src[{src}] (the source's scatter list): got {got}, "
                         f"expected {n} tensors (one per rank of the group)")
    _check_same_meta(f"inputs_lists_at_src[{src}]", lst, dtype=True, shape=False)
    return _copies(lst)


# --------------------------------------------------------------------------- traffic
# Note [ring traffic]: the formulas are those of the textbook ring algorithms NCCL uses.
# In a ring all_gather each piece travels n-1 hops; rank i receives every piece but its
# own and forwards every piece but the one of its successor (i+1), which is where that
# piece started. reduce_scatter is the same ring backwards in data flow, all_reduce is a
# reduce_scatter plus an all_gather on numel split into n near-equal chunks. A pipelined
# broadcast is a chain from the root: everyone receives S except the root and everyone
# sends S except the last rank of the chain, (root - 1) % n. reduce is its mirror.

Traffic = tuple[tuple[int, ...], tuple[int, ...]]  # (bytes_sent, bytes_received) by rank


def _ring_gather_traffic(in_bytes: Sequence[int]) -> Traffic:
    n, total = len(in_bytes), sum(in_bytes)
    sent = tuple(total - in_bytes[(i + 1) % n] for i in range(n))
    received = tuple(total - in_bytes[i] for i in range(n))
    return sent, received


def _reduce_scatter_traffic(out_bytes: Sequence[int]) -> Traffic:
    # A rank's input is the n output pieces laid end to end, so with S = sum(o_j) the
    # formula (S - o_i received, S - o_{i+1} sent) is all_gather's.
    return _ring_gather_traffic(out_bytes)


def _all_reduce_traffic(numel: int, itemsize: int, group_size: int) -> Traffic:
    n, total = group_size, numel * itemsize
    chunks = [(numel // n + (1 if j < numel % n else 0)) * itemsize for j in range(n)]
    sent = tuple(2 * (total - chunks[(i + 1) % n]) for i in range(n))
    received = tuple(2 * (total - chunks[i]) for i in range(n))
    return sent, received


def _all_to_all_traffic(send_bytes: Sequence[Sequence[int]]) -> Traffic:
    n = len(send_bytes)
    for i, row in enumerate(send_bytes):
        if len(row) != n:
            raise ValueError(f"send_bytes[{i}] has {len(row)} entries, expected {n}")
    sent = tuple(sum(send_bytes[i][j] for j in range(n) if j != i) for i in range(n))
    received = tuple(sum(send_bytes[j][i] for j in range(n) if j != i) for i in range(n))
    return sent, received


def _broadcast_traffic(nbytes: int, root: int, group_size: int) -> Traffic:
    n = group_size
    _check_root("root", root, n)
    sent = tuple(0 if i == (root - 1) % n else nbytes for i in range(n))
    received = tuple(0 if i == root else nbytes for i in range(n))
    return sent, received


def _reduce_traffic(nbytes: int, root: int, group_size: int) -> Traffic:
    # Mirror of broadcast: the chain runs into the root, so its far end is (root + 1) % n,
    # which receives nothing.
    n = group_size
    _check_root("root", root, n)
    sent = tuple(0 if i == root else nbytes for i in range(n))
    received = tuple(0 if i == (root + 1) % n else nbytes for i in range(n))
    return sent, received


def _gather_traffic(in_bytes: Sequence[int], root: int) -> Traffic:
    n = len(in_bytes)
    _check_root("root", root, n)
    sent = tuple(0 if i == root else in_bytes[i] for i in range(n))
    received = tuple(sum(sent) if i == root else 0 for i in range(n))
    return sent, received


def _scatter_traffic(out_bytes: Sequence[int], root: int) -> Traffic:
    received, sent = _gather_traffic(out_bytes, root)
    return sent, received


def _p2p_traffic(nbytes: int) -> Traffic:
    return (nbytes, 0), (0, nbytes)  # group rank 0 is the sender, 1 the receiver


def _barrier_traffic(group_size: int) -> Traffic:
    return (0,) * group_size, (0,) * group_size


_TRAFFIC: dict[str, Callable[..., Traffic]] = {
    "all_gather": _ring_gather_traffic,
    "all_gather_into_tensor": _ring_gather_traffic,
    "reduce_scatter": _reduce_scatter_traffic,
    "reduce_scatter_tensor": _reduce_scatter_traffic,
    "all_reduce": _all_reduce_traffic,
    "all_to_all": _all_to_all_traffic,
    "all_to_all_single": _all_to_all_traffic,
    "broadcast": _broadcast_traffic,
    "reduce": _reduce_traffic,
    "gather": _gather_traffic,
    "scatter": _scatter_traffic,
    "send": _p2p_traffic,
    "recv": _p2p_traffic,
    "barrier": _barrier_traffic,
}
TRAFFIC_OPS: tuple[str, ...] = tuple(_TRAFFIC)


def traffic(op: str, **sizes: object) -> Traffic:
    """Bytes each group rank sends and receives for ``op`` under ring algorithms.

    Keyword arguments by op (per-rank lists are indexed by group rank):

    - ``all_gather``, ``all_gather_into_tensor``: ``in_bytes`` (each rank's input bytes)
    - ``reduce_scatter``, ``reduce_scatter_tensor``: ``out_bytes`` (each rank's output
      piece; a rank's input is all pieces, S = sum(out_bytes))
    - ``all_reduce``: ``numel``, ``itemsize``, ``group_size``
    - ``all_to_all``, ``all_to_all_single``: ``send_bytes`` (``send_bytes[i][j]``: bytes
      rank i sends to rank j; the diagonal stays local)
    - ``broadcast``, ``reduce``: ``nbytes``, ``root``, ``group_size``
    - ``gather``: ``in_bytes``, ``root``; ``scatter``: ``out_bytes``, ``root``
    - ``send``, ``recv``: ``nbytes`` (a two-rank group: rank 0 sends, rank 1 receives)
    - ``barrier``: ``group_size``

    Returns ``(bytes_sent, bytes_received)``, one tuple entry per group rank.

    >>> traffic("all_gather", in_bytes=[4, 4, 4])
    ((8, 8, 8), (8, 8, 8))
    """
    fn = _TRAFFIC.get(op)
    if fn is None:
        raise ValueError(f"traffic: unknown op {op!r}: expected one of {', '.join(TRAFFIC_OPS)}")
    try:
        inspect.signature(fn).bind(**sizes)
    except TypeError:
        expected = ", ".join(inspect.signature(fn).parameters)
        raise ValueError(f"traffic({op!r}): got keyword arguments {sorted(sizes)}, expected "
                         f"{expected}") from None
    return fn(**sizes)
