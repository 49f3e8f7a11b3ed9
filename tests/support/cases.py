"""What the rule tests (tests/rules/) share: the meshes a rule is checked on, readable ids for
op calls, and the soundness test every rule family runs over its own calls.

A family's test file lists its calls and asks for the test in one line:

    CASES = [(aten.glu.default, (torch.randn(5, 4), 1)), ...]
    test_every_strategy_is_sound = soundness_test(CASES)

which checks, for each call on each mesh of ``MESHES``, that every strategy the op's rule
offers is sound (``dtensor.ops.soundness.check_op``: each rank's local result is exactly the
piece its claimed output placement says). Ids read like the call: ``glu.default(f32[5,4],1)``
on ``mesh(2,2)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest
import torch

from dtensor.ops.propagate import per_dim_strategies
from dtensor.ops.registry import Strategy
from dtensor.ops.soundness import check_op, op_spec

# even and odd 1-D meshes, a 2-D one (nested shards), and more ranks than small dims have rows
# (empty pieces)
MESHES: list[tuple[int, ...]] = [(2,), (3,), (2, 2), (4,)]

_DTYPE_NAMES = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32",
                torch.float64: "f64", torch.complex64: "c64", torch.complex128: "c128",
                torch.int8: "i8", torch.uint8: "u8", torch.int16: "i16", torch.int32: "i32",
                torch.int64: "i64", torch.bool: "b8"}


def dtype_name(dtype: torch.dtype) -> str:
    return _DTYPE_NAMES.get(dtype, str(dtype).removeprefix("torch."))


def describe(value: Any) -> str:
    """One argument, short: a tensor as its dtype and shape (``f32[5,3]``), a list or tuple
    item by item, a dtype by its short name, anything else as its repr."""
    if isinstance(value, torch.Tensor):
        return f"{dtype_name(value.dtype)}[{','.join(map(str, value.shape))}]"
    if isinstance(value, torch.dtype):
        return dtype_name(value)
    if isinstance(value, list):
        return f"[{','.join(describe(v) for v in value)}]"
    if isinstance(value, tuple):
        return f"({','.join(describe(v) for v in value)}{',' if len(value) == 1 else ''})"
    return repr(value)


def case_id(op: Any, args: Sequence = (), kwargs: Mapping[str, Any] | None = None) -> str:
    """An op call as a test id: ``floor_divide.Scalar(f32[5,3],0.7)``, ``sum.dim_IntList(
    f32[4,6],[1],keepdim=True)`` (the ``aten.`` namespace left out)."""
    parts = [describe(a) for a in args]
    parts += [f"{k}={describe(v)}" for k, v in (kwargs or {}).items()]
    return f"{str(op).removeprefix('aten.')}({','.join(parts)})"


def mesh_id(mesh_shape: Sequence[int]) -> str:
    return f"mesh({','.join(map(str, mesh_shape))})"


def _as_param(case: Any) -> Any:
    """``(op, args)``, ``(op, args, kwargs)``, either led by a name (or wrapped in
    ``pytest.param`` for marks): a pytest param of (op, args, kwargs) whose id is the name,
    else ``case_id``."""
    values, marks = (case.values, case.marks) if hasattr(case, "marks") else (case, ())
    name = values[0] if values and isinstance(values[0], str) else None
    call = tuple(values[1:] if name else values)
    if len(call) not in (2, 3) or not isinstance(call[1], (tuple, list)):
        raise TypeError(f"a soundness case is (op, args) or (op, args, kwargs), optionally "
                        f"led by a name; got {case!r}")
    op, args, kwargs = call[0], tuple(call[1]), dict(call[2]) if len(call) == 3 else {}
    return pytest.param(op, args, kwargs, marks=marks, id=name or case_id(op, args, kwargs))


def soundness_test(cases: Sequence[Sequence], *, meshes: Sequence[Sequence[int]] = MESHES,
                   **tolerance: float) -> Callable[..., None]:
    """A test parametrized over ``cases`` and ``meshes`` that checks every strategy the rule
    of each case's op offers for that call on that mesh (``check_op``; ``tolerance``: its
    ``rtol``/``atol``). A case is ``(op, args)`` or ``(op, args, kwargs)``, optionally led by
    a name that becomes its id. Assign it to a ``test_*`` name in the test module."""
    params = [_as_param(c) for c in cases]

    @pytest.mark.parametrize("mesh_shape", [tuple(m) for m in meshes], ids=mesh_id)
    @pytest.mark.parametrize("op,args,kwargs", params)
    def test_every_strategy_is_sound(op: Any, args: tuple, kwargs: dict,
                                     mesh_shape: tuple[int, ...]) -> None:
        problems = check_op(op, args, kwargs, mesh_shape, **tolerance)
        # this module is not assertion-rewritten: the message says what was unsound
        assert not problems, "unsound strategies:\n" + "\n".join(map(str, problems))

    return test_every_strategy_is_sound


def strategies(op: Any, args: Sequence, kwargs: Mapping[str, Any] | None = None,
               mesh_shape: Sequence[int] = (2,), mesh_dim: int = 0) -> list[Strategy]:
    """What the op's rule offers for this call (every tensor Replicate) on one mesh dim."""
    spec = op_spec(op, tuple(args), dict(kwargs or {}), tuple(mesh_shape))
    return list(per_dim_strategies(spec)[mesh_dim])


def offered(op: Any, args: Sequence, kwargs: Mapping[str, Any] | None = None,
            mesh_shape: Sequence[int] = (2,), mesh_dim: int = 0) -> set[str]:
    """``strategies`` as their reprs (``Strategy(S(0),R->S(0))``), for tests that say which
    strategies are among them and which are not."""
    return {repr(s) for s in strategies(op, args, kwargs, mesh_shape, mesh_dim)}
