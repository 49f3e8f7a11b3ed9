"""simpg.collectives: each pure collective against a naive reference, errors, traffic."""

from __future__ import annotations

import doctest
import functools
import operator
import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from simpg import collectives as C

WORLD_SIZES = [1, 2, 3, 4, 8]
DTYPES = [torch.bool, torch.int8, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64, torch.complex64]
OPS = list(C.REDUCE_OPS)


def _dt(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def make_inputs(n: int, dtype: torch.dtype, shape: tuple[int, ...] = (3, 4),
                seed: int = 0) -> list[torch.Tensor]:
    """Distinct per-rank inputs; small integers so products stay exact-ish but not trivial."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        if dtype == torch.bool:
            t = torch.randint(0, 2, shape, generator=g).bool()
        elif dtype.is_complex:
            t = torch.complex(torch.randn(shape, generator=g), torch.randn(shape, generator=g))
            t = t.to(dtype)
        elif dtype.is_floating_point:
            t = torch.randn(shape, generator=g).to(dtype)
        else:
            t = torch.randint(-5, 6, shape, generator=g).to(dtype)
        out.append(t)
    return out


# The naive reference: written independently of simpg's table, one Python fold per op.
_REF_BINARY: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "sum": operator.add, "avg": operator.add, "product": operator.mul,
    "band": operator.and_, "bor": operator.or_, "bxor": operator.xor,
}


def reference_reduce(tensors: list[torch.Tensor], op: str) -> torch.Tensor:
    dtype = tensors[0].dtype
    stacked = torch.stack(tensors)
    if dtype == torch.bool and op in ("sum", "max"):
        return stacked.any(0)
    if dtype == torch.bool and op in ("product", "min"):
        return stacked.all(0)
    if op == "min":
        return stacked.amin(0)
    if op == "max":
        return stacked.amax(0)
    acc = functools.reduce(_REF_BINARY[op], tensors)
    return acc / len(tensors) if op == "avg" else acc


def supported(op: str, dtype: torch.dtype) -> bool:
    if op == "avg":
        return dtype.is_floating_point or dtype.is_complex
    if op in ("min", "max"):
        return not dtype.is_complex
    if op in ("band", "bor", "bxor"):
        return not (dtype.is_floating_point or dtype.is_complex)
    return True


def assert_bitwise_equal(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)


# --------------------------------------------------------------------------- reductions

@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=_dt)
@pytest.mark.parametrize("n", WORLD_SIZES)
def test_all_reduce_matches_reference(n: int, dtype: torch.dtype, op: str) -> None:
    inputs = make_inputs(n, dtype, seed=n)
    before = [t.clone() for t in inputs]
    if not supported(op, dtype):
        with pytest.raises(ValueError, match=re.escape(f"reduce op {op!r} does not support "
                                                       f"dtype {dtype}: it needs")):
            C.all_reduce(inputs, op)
        return
    outs = C.all_reduce(inputs, op)
    expected = reference_reduce(inputs, op)
    assert len(outs) == n
    for out in outs:
        assert_bitwise_equal(out, expected)
        assert all(out.data_ptr() != t.data_ptr() for t in inputs)
    for t, b in zip(inputs, before):  # inputs untouched
        assert_bitwise_equal(t, b)


@pytest.mark.parametrize("op", ["sum", "avg", "product", "max", "bor"])
@pytest.mark.parametrize("n", WORLD_SIZES)
def test_reduce_and_reduce_scatter_match_reference(n: int, op: str) -> None:
    dtype = torch.int32 if op == "bor" else torch.float32
    inputs = make_inputs(n, dtype, shape=(2 * n, 3), seed=7)
    expected = reference_reduce(inputs, op)
    for dst in range(n):
        outs = C.reduce(inputs, dst, op)
        assert [o is None for o in outs] == [r != dst for r in range(n)]
        assert_bitwise_equal(outs[dst], expected)  # type: ignore[arg-type]
    rs = C.reduce_scatter_tensor(inputs, op)
    for i, piece in enumerate(torch.chunk(expected, n)):
        assert_bitwise_equal(rs[i], piece)
    lists = [list(torch.split(t, [1] * n + [n], dim=0)[:n]) for t in inputs]
    rs_list = C.reduce_scatter(lists, op)
    for i in range(n):
        assert_bitwise_equal(rs_list[i], reference_reduce([lst[i] for lst in lists], op))


def test_reduction_is_a_left_fold_in_rank_order() -> None:
    # In float32, 1e8 + 1 rounds back to 1e8: ((1e8 + 1) - 1e8) == 0 while
    # ((1e8 - 1e8) + 1) == 1. Only a strict rank-order fold gives 0.
    inputs = [torch.tensor([1e8]), torch.tensor([1.0]), torch.tensor([-1e8])]
    out = C.all_reduce(inputs, "sum")[0]
    assert out.item() == 0.0
    assert C.all_reduce([inputs[0], inputs[2], inputs[1]], "sum")[0].item() == 1.0


@settings(deadline=None, max_examples=40)
@given(n=st.integers(1, 8), seed=st.integers(0, 2**16),
       dtype=st.sampled_from([torch.float16, torch.bfloat16, torch.float32, torch.complex64]))
def test_float_sum_equals_explicit_left_fold_bitwise(n: int, seed: int,
                                                     dtype: torch.dtype) -> None:
    inputs = [t * 10 ** (i % 4) for i, t in enumerate(make_inputs(n, dtype, (17,), seed))]
    acc = inputs[0]
    for t in inputs[1:]:
        acc = acc + t
    for out in C.all_reduce(inputs, "sum"):
        assert_bitwise_equal(out, acc)
    assert_bitwise_equal(C.reduce_tensors(inputs, "avg"), acc / n)


def test_bool_reductions_are_logical() -> None:
    t, f = torch.tensor([True, True, False]), torch.tensor([True, False, False])
    assert C.reduce_tensors([t, f], "sum").tolist() == [True, True, False]
    assert C.reduce_tensors([t, f], "product").tolist() == [True, False, False]
    assert C.reduce_tensors([t, f], "bxor").tolist() == [False, True, False]


def test_integer_sum_wraps_in_its_dtype() -> None:
    out = C.reduce_tensors([torch.tensor([100], dtype=torch.int8)] * 2, "sum")
    assert out.dtype == torch.int8 and out.item() == -56


@pytest.mark.parametrize("op,dtype,needs", [
    ("band", torch.float32, "it needs bool or an integer dtype"),
    ("bxor", torch.complex64, "it needs bool or an integer dtype"),
    ("avg", torch.int64, "it needs a floating or complex dtype"),
    ("avg", torch.bool, "it needs a floating or complex dtype"),
    ("min", torch.complex64, "it needs bool, an integer (not uint16/32/64) or floating"),
    ("sum", torch.uint32, "it needs bool, an integer (not uint16/32/64), floating or complex"),
])
def test_check_reduce_op_rejects(op: str, dtype: torch.dtype, needs: str) -> None:
    with pytest.raises(ValueError, match=re.escape(
            f"reduce op {op!r} does not support dtype {dtype}: {needs}")):
        C.check_reduce_op(op, dtype)


def test_bitwise_ops_work_on_barebones_unsigned() -> None:
    a = torch.tensor([0b1100], dtype=torch.uint32)
    b = torch.tensor([0b1010], dtype=torch.uint32)
    assert C.reduce_tensors([a, b], "bxor").to(torch.int64).item() == 0b0110


def test_unknown_reduce_op() -> None:
    with pytest.raises(ValueError, match=r"unknown reduce op 'mean': expected one of sum, "
                       r"product, avg, min, max, band, bor, bxor"):
        C.all_reduce([torch.ones(2)], "mean")


# --------------------------------------------------------------------------- data movement

@pytest.mark.parametrize("dtype", DTYPES, ids=_dt)
@pytest.mark.parametrize("n", WORLD_SIZES)
def test_all_gather_and_broadcast_family(n: int, dtype: torch.dtype) -> None:
    inputs = make_inputs(n, dtype, (2, 3), seed=3)
    for got in C.all_gather(inputs):
        assert len(got) == n
        for g, t in zip(got, inputs):
            assert_bitwise_equal(g, t)
            assert g.data_ptr() != t.data_ptr()
    full = C.all_gather_into_tensor(inputs)
    for out in full:
        assert_bitwise_equal(out, torch.cat(inputs))
    for root in range(n):
        for out in C.broadcast(inputs, root):
            assert_bitwise_equal(out, inputs[root])
        gathered = C.gather(inputs, root)
        assert [g is None for g in gathered] == [r != root for r in range(n)]
        for g, t in zip(gathered[root], inputs):  # type: ignore[arg-type]
            assert_bitwise_equal(g, t)
        lists: list[list[torch.Tensor] | None] = [None] * n
        lists[root] = inputs
        for out, t in zip(C.scatter(lists, root), inputs):
            assert_bitwise_equal(out, t)


@settings(deadline=None, max_examples=40)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=8))
def test_all_gather_uneven(rows: list[int]) -> None:
    inputs = [torch.full((k, 2), float(r)) for r, k in enumerate(rows)]
    for got in C.all_gather(inputs):
        assert [tuple(g.shape) for g in got] == [(k, 2) for k in rows]
        assert all(bool((g == r).all()) for r, g in enumerate(got))


@settings(deadline=None, max_examples=60)
@given(st.data())
def test_all_to_all_single_uneven_matches_reference(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 6), label="n")
    splits = data.draw(st.lists(st.lists(st.integers(0, 3), min_size=n, max_size=n),
                                min_size=n, max_size=n), label="splits")
    inputs = [torch.arange(sum(s) * 2).reshape(-1, 2) + 100 * r for r, s in enumerate(splits)]
    out_splits = [[splits[src][dst] for src in range(n)] for dst in range(n)]
    outs = C.all_to_all_single(inputs, splits, out_splits)
    for dst in range(n):
        expected = []
        for src in range(n):  # naive: walk rank src's rows to find its piece for dst
            start = sum(splits[src][:dst])
            expected.append(inputs[src][start:start + splits[src][dst]])
        assert_bitwise_equal(outs[dst], torch.cat(expected))
    # output_splits=None means "equal pieces from every source": fine exactly when each
    # destination's incoming pieces are equal, an error otherwise.
    if all(len(set(row)) == 1 for row in out_splits):
        for a, b in zip(C.all_to_all_single(inputs, splits, None), outs):
            assert_bitwise_equal(a, b)
    else:
        with pytest.raises(ValueError, match=r"is None \(equal pieces\) but rank \d+ receives"):
            C.all_to_all_single(inputs, splits, None)


@pytest.mark.parametrize("n", WORLD_SIZES)
def test_all_to_all_single_equal_split_and_all_to_all(n: int) -> None:
    inputs = [torch.arange(2 * n) + 10 * r for r in range(n)]
    outs = C.all_to_all_single(inputs)
    for dst in range(n):
        assert outs[dst].tolist() == [10 * src + 2 * dst + k for src in range(n) for k in (0, 1)]
    lists = [[torch.tensor([src, dst] * (dst + 1)) for dst in range(n)] for src in range(n)]
    for dst, got in enumerate(C.all_to_all(lists)):
        assert [g.tolist() for g in got] == [[src, dst] * (dst + 1) for src in range(n)]


# --------------------------------------------------------------------------- errors

def _raises(fn: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        fn()


def test_shape_and_dtype_errors_name_rank_value_and_expectation() -> None:
    a, b = torch.zeros(2, 3), torch.zeros(3, 3)
    _raises(lambda: C.all_reduce([a, b], "sum"),
            "inputs: rank 1 has shape (3, 3), expected (2, 3) (the shape of rank 0)")
    _raises(lambda: C.reduce_tensors([a, a.double()], "sum"),
            "tensors: rank 1 has dtype torch.float64, expected torch.float32")
    _raises(lambda: C.all_gather([a, a.int()]),
            "inputs: rank 1 has dtype torch.int32, expected torch.float32")
    _raises(lambda: C.all_gather_into_tensor([a, b]), "rank 1 has shape (3, 3), expected (2, 3)")
    _raises(lambda: C.all_gather_into_tensor([torch.tensor(1.0)] * 2),
            "inputs: rank 0 passed a 0-dim tensor, expected at least one dimension")
    _raises(lambda: C.broadcast([a, b], src=0),
            "inputs: rank 1 has torch.float32 (3, 3), expected torch.float32 (2, 3) "
            "(that of root rank 0)")
    _raises(lambda: C.all_reduce([], "sum"), "inputs: expected one entry per rank of the group")
    _raises(lambda: C.all_gather([a, "x"]),  # type: ignore[list-item]
            "inputs[1]: expected a torch.Tensor, got str")


def test_root_errors() -> None:
    x = [torch.zeros(1)] * 2
    _raises(lambda: C.broadcast(x, src=2), "src=2 is not a group rank: expected 0 <= src < 2")
    _raises(lambda: C.reduce(x, dst=-1, op="sum"), "dst=-1 is not a group rank")
    _raises(lambda: C.gather(x, dst=5), "dst=5 is not a group rank: expected 0 <= dst < 2")
    _raises(lambda: C.scatter([x, None], src=1),
            "inputs_lists_at_src[1] (the source's scatter list): got None, expected 2 tensors")
    _raises(lambda: C.scatter([x[:1], None], src=0),
            "inputs_lists_at_src[0] (the source's scatter list): got 1 tensors, expected 2")


def test_list_errors() -> None:
    x = torch.zeros(2)
    _raises(lambda: C.reduce_scatter([[x, x], [x]], "sum"),
            "inputs_lists: rank 1 passed 1 tensors, expected 2 (one per rank of the group)")
    _raises(lambda: C.reduce_scatter([[x, x], [x, torch.zeros(3)]], "sum"),
            "inputs_lists[*][1]: rank 1 has shape (3,), expected (2,)")
    _raises(lambda: C.all_to_all([[x, x], [x, x, x]]),
            "inputs_lists: rank 1 passed 3 tensors, expected 2")
    _raises(lambda: C.all_to_all([[x, x], [x, x.int()]]),
            "inputs_lists: rank 1's tensor 1 has dtype torch.int32, expected torch.float32 "
            "(that of rank 0's tensor 0)")
    _raises(lambda: C.reduce_scatter([[x, x.int()], [x, x.int()]], "sum"),
            "inputs_lists: rank 0's tensor 1 has dtype torch.int32, expected torch.float32")
    _raises(lambda: C.reduce_scatter_tensor([torch.zeros(3)] * 2, "sum"),
            "inputs: dim 0 has size 3, expected a multiple of the group size 2")


def test_all_to_all_single_errors() -> None:
    x = [torch.zeros(4, 2), torch.zeros(2, 2)]
    _raises(lambda: C.all_to_all_single(x, [[1, 3], [1, 1]], [[1, 1], [3, 2]]),
            "all_to_all_single: rank 1 sends 1 rows to rank 1 (input_splits[1][1]) but rank 1 "
            "expects 2 from rank 1 (output_splits[1][1])")
    _raises(lambda: C.all_to_all_single(x, [[1, 3], [2, 0]], [[2, 2], [3, 0]]),
            "all_to_all_single: rank 0 sends 1 rows to rank 0 (input_splits[0][0]) but rank 0 "
            "expects 2 from rank 0 (output_splits[0][0])")
    _raises(lambda: C.all_to_all_single(x, [[1, 2], [1, 1]]),
            "input_splits[0] = [1, 2] sums to 3, expected rank 0's dim 0 size 4")
    _raises(lambda: C.all_to_all_single(x, [[1, 3, 0], [1, 1]]),
            "input_splits[0] = [1, 3, 0]: expected 2 non-negative sizes")
    _raises(lambda: C.all_to_all_single(x, [[4, 0], [1, 1]], [[1, 1], [3, 1]][:1]),
            "output_splits: got 1 entries, expected 2 (one per rank)")
    _raises(lambda: C.all_to_all_single([torch.zeros(3), torch.zeros(2)]),
            "input_splits[0] is None (equal split) but rank 0's dim 0 has size 3, expected a "
            "multiple of the group size 2")
    _raises(lambda: C.all_to_all_single(x, [[3, 1], [1, 1]], None),
            "output_splits[0] is None (equal pieces) but rank 0 receives pieces of sizes [3, 1]")
    _raises(lambda: C.all_to_all_single([torch.zeros(2, 2), torch.zeros(2, 3)]),
            "inputs: rank 1 has shape (2, 3), expected trailing dims (2,) (those of rank 0)")


# --------------------------------------------------------------------------- traffic

def test_traffic_hand_computed() -> None:
    # all_gather of 4, 8, 12 bytes: T = 24. received = T - in_i; sent = T - in_{i+1}.
    assert C.traffic("all_gather", in_bytes=[4, 8, 12]) == ((16, 12, 20), (20, 16, 12))
    assert C.traffic("reduce_scatter", out_bytes=[4, 8, 12]) == ((16, 12, 20), (20, 16, 12))
    # all_reduce of 10 float32 on 4 ranks: chunks 3, 3, 2, 2 elements = 12, 12, 8, 8 bytes.
    assert C.traffic("all_reduce", numel=10, itemsize=4, group_size=4) == (
        (56, 64, 64, 56), (56, 56, 64, 64))
    assert C.traffic("all_to_all", send_bytes=[[1, 2], [3, 4]]) == ((2, 3), (3, 2))
    assert C.traffic("broadcast", nbytes=8, root=1, group_size=3) == ((0, 8, 8), (8, 0, 8))
    assert C.traffic("reduce", nbytes=8, root=1, group_size=3) == ((8, 0, 8), (8, 8, 0))
    assert C.traffic("gather", in_bytes=[1, 2, 3], root=2) == ((1, 2, 0), (0, 0, 3))
    assert C.traffic("scatter", out_bytes=[1, 2, 3], root=0) == ((5, 0, 0), (0, 2, 3))
    assert C.traffic("send", nbytes=7) == ((7, 0), (0, 7))
    assert C.traffic("barrier", group_size=3) == ((0, 0, 0), (0, 0, 0))


@pytest.mark.parametrize("op,kwargs", [
    ("all_gather", {"in_bytes": [9]}),
    ("reduce_scatter", {"out_bytes": [9]}),
    ("all_reduce", {"numel": 5, "itemsize": 2, "group_size": 1}),
    ("all_to_all", {"send_bytes": [[4]]}),
    ("broadcast", {"nbytes": 3, "root": 0, "group_size": 1}),
    ("reduce", {"nbytes": 3, "root": 0, "group_size": 1}),
    ("gather", {"in_bytes": [3], "root": 0}),
    ("scatter", {"out_bytes": [3], "root": 0}),
])
def test_traffic_group_of_one_is_zero(op: str, kwargs: dict[str, object]) -> None:
    assert C.traffic(op, **kwargs) == ((0,), (0,))


_sizes = st.lists(st.integers(0, 1000), min_size=1, max_size=8)


@settings(deadline=None, max_examples=50)
@given(data=st.data())
def test_traffic_conserves_bytes(data: st.DataObject) -> None:
    sizes = data.draw(_sizes, label="sizes")
    n = len(sizes)
    root = data.draw(st.integers(0, n - 1), label="root")
    matrix = data.draw(st.lists(st.lists(st.integers(0, 50), min_size=n, max_size=n),
                                min_size=n, max_size=n), label="matrix")
    cases: list[tuple[str, dict[str, Any]]] = [
        ("all_gather", {"in_bytes": sizes}),
        ("reduce_scatter", {"out_bytes": sizes}),
        ("all_reduce", {"numel": sizes[0], "itemsize": 2, "group_size": n}),
        ("all_to_all_single", {"send_bytes": matrix}),
        ("broadcast", {"nbytes": sizes[0], "root": root, "group_size": n}),
        ("reduce", {"nbytes": sizes[0], "root": root, "group_size": n}),
        ("gather", {"in_bytes": sizes, "root": root}),
        ("scatter", {"out_bytes": sizes, "root": root}),
    ]
    for op, kwargs in cases:
        sent, received = C.traffic(op, **kwargs)
        assert len(sent) == len(received) == n, op
        assert sum(sent) == sum(received), op
        assert min(sent + received) >= 0, op


def test_traffic_errors() -> None:
    _raises(lambda: C.traffic("allgather", in_bytes=[1]),
            "traffic: unknown op 'allgather': expected one of all_gather")
    _raises(lambda: C.traffic("all_gather", nbytes=1),
            "traffic('all_gather'): got keyword arguments ['nbytes'], expected in_bytes")
    _raises(lambda: C.traffic("broadcast", nbytes=1, root=3, group_size=2),
            "root=3 is not a group rank: expected 0 <= root < 2")
    _raises(lambda: C.traffic("all_to_all", send_bytes=[[1, 2], [3]]),
            "send_bytes[1] has 1 entries, expected 2")


def test_docstring_examples_run() -> None:
    result = doctest.testmod(C, raise_on_error=False)
    assert result.attempted > 10 and result.failed == 0
