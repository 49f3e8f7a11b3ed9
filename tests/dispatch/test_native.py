"""The compiled dispatch entry (Note [native fast path] in dtensor.dispatch.native): built where a
compiler is, never compiled at import, switched off by DTENSOR_NATIVE=0 or a stale build, and
indistinguishable from the Python entry in what it returns."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from dtensor import DTensor, Replicate, Shard, distribute_tensor
from dtensor.dispatch import native
from dtensor.dispatch.native import build
from tests.support.mesh_world import run_on_mesh as _world
from tests.support.paths import ROOT
from opdb_tests.causes import of_exception

aten = torch.ops.aten
needs_native = pytest.mark.skipif(native.MODULE is None,
                                  reason=f"the compiled entry is not available: {native.REASON}")


def test_a_machine_with_a_compiler_has_the_compiled_entry():
    # setup.sh builds it; a build that silently failed would leave only the Python entry
    if os.environ.get("DTENSOR_NATIVE") == "0":
        assert native.MODULE is None and "DTENSOR_NATIVE=0" in native.REASON
        return
    if shutil.which("c++") is None or shutil.which("ninja") is None:
        assert native.MODULE is None
        return
    assert native.MODULE is not None, native.REASON
    assert DTensor.__dict__["__torch_dispatch__"].__func__ is native.MODULE.dispatch


def _in_subprocess(code: str, **env: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, **env}, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_dtensor_native_0_keeps_the_python_entry():
    code = ("from dtensor import DTensor; from dtensor.dispatch import native, torch_dispatch; "
            "print(DTensor.__dict__['__torch_dispatch__'].__func__ is torch_dispatch, "
            "native.REASON)")
    assert _in_subprocess(code, DTENSOR_NATIVE="0") == "True switched off by DTENSOR_NATIVE=0"


def test_a_stale_build_is_not_loaded(monkeypatch):
    if not build.built_library().exists():
        pytest.skip(f"nothing built to find stale: {native.REASON}")
    saved = native.REASON
    monkeypatch.setenv("DTENSOR_NATIVE", "1")
    monkeypatch.setattr(build, "source_hash", lambda: "another source")
    try:
        assert native._load() is None
        assert native.REASON.startswith("stale")
    finally:
        native.REASON = saved


def test_the_build_is_skipped_when_its_source_has_not_changed():
    if not build.up_to_date():
        pytest.skip(f"no current build: {native.REASON}")
    out = subprocess.run([sys.executable, str(ROOT / "dtensor/dispatch/native/build.py")], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "up to date" in out.stdout, out.stderr


def _fields(t: torch.Tensor) -> tuple:
    return (type(t), str(torch._C._dispatch_keys(t)), t.shape, t.stride(), t.dtype, t.device,
            t.layout, t.requires_grad, t._spec, t._tspec, type(t._local_tensor),
            t._local_tensor.tolist())


def _outputs(calls) -> list:
    out = []
    for f in calls:
        r = f()
        out.append([_fields(t) for t in (r if isinstance(r, (list, tuple)) else [r])])
    return out


@needs_native
def test_the_compiled_entry_gives_what_the_python_entry_gives():
    full = torch.arange(24.0).reshape(6, 4)

    def body(mesh):
        a = distribute_tensor(full, mesh, [Shard(0)])
        r = distribute_tensor(full.t().contiguous(), mesh, [Replicate()])
        calls = [lambda: a + a, lambda: torch.mm(a, r), lambda: a.sum(0),
                 lambda: torch.softmax(a, 1), lambda: a.split(2, 1), lambda: a * torch.ones(4),
                 lambda: torch.ones_like(a, dtype=torch.float64), lambda: aten.mul.Scalar(a, 2),
                 lambda: a.view(6, 2, 2), lambda: torch.cat([a, a], 1)]
        _outputs(calls)  # recorded
        compiled = sum(1 for e in mesh.__dict__["_fast_plans"].values() if e.native is not None)
        before = native.MODULE.taken()
        ours = _outputs(calls)
        taken = native.MODULE.taken() - before
        with native.python_entry_only(DTensor):
            theirs = _outputs(calls)
        return compiled == len(calls), taken >= len(calls), ours == theirs

    assert _world((2,), body) == [(True, True, True)] * 2


@needs_native
def test_a_float_equal_as_a_key_is_passed_as_it_is():
    # 0.0 == -0.0 keys one entry; the op must still see the sign it was given
    def body(mesh):
        x = distribute_tensor(torch.ones(4), mesh, [Shard(0)])
        signs = []
        for s in (0.0, -0.0, 0.0, -0.0):
            y = aten.mul.Scalar(x, s)
            signs.append(torch.signbit(y.to_local()).all().item())
        return signs

    assert _world((2,), body) == [[False, True, False, True]] * 2


@needs_native
def test_large_pieces_run_through_the_compiled_entry():
    # numel >= 2**15: the op runs without the GIL, as func._op runs it
    full = torch.arange(2.0 ** 17).reshape(512, 256)

    def body(mesh):
        a = distribute_tensor(full, mesh, [Shard(0)])
        outs = [(a + a).full_tensor() for _ in range(3)]
        return all(torch.equal(o, full * 2) for o in outs)

    assert _world((2,), body) == [True, True]


class _Log(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


@needs_native
def test_a_dispatch_mode_sees_the_same_calls_through_either_entry():
    def body(mesh):
        a = distribute_tensor(torch.ones(4, 4), mesh, [Shard(0)])
        a + a
        seen = []
        for python in (False, True):
            with native.python_entry_only(DTensor) if python else contextlib.nullcontext():
                with _Log() as log:
                    (a + a).sum(0)
            seen.append(log.seen)
        return seen[0] == seen[1], seen[0][:1]

    assert _world((2,), body) == [(True, ["aten.add.Tensor"])] * 2


@needs_native
def test_entries_with_local_moves_run_compiled_and_agree():
    # Note [local moves]: mm(S(1), R) wants its R argument as S(0), a slice of each piece
    full_a = torch.arange(35.0).reshape(5, 7)
    full_b = torch.arange(21.0).reshape(7, 3)

    def body(mesh):
        a = distribute_tensor(full_a, mesh, [Shard(1)])
        b = distribute_tensor(full_b, mesh, [Replicate()])
        torch.mm(a, b)
        entry = next(e for e in mesh.__dict__["_fast_plans"].values() if e.moves)
        before = native.MODULE.taken()
        ours = _outputs([lambda: torch.mm(a, b)] * 2)
        taken = native.MODULE.taken() - before
        with native.python_entry_only(DTensor):
            theirs = _outputs([lambda: torch.mm(a, b)] * 2)
        return entry.native is not None, taken >= 2, ours == theirs

    assert _world((2,), body) == [(True, True, True)] * 2


@needs_native
def test_an_error_of_the_local_op_is_raised_as_the_python_entry_raises_it():
    # the key holds a plain index's shape, not its values: a bad index reaches the kernel;
    # its cause names the op, as opdb_tests reads it from the dispatching frame
    def body(mesh):
        a = distribute_tensor(torch.ones(4, 3), mesh, [Shard(0)])
        torch.index_select(a, 1, torch.tensor([0, 2]))
        compiled = all(e.native is not None for e in mesh.__dict__["_fast_plans"].values())
        errors = []
        for python in (False, True):
            with native.python_entry_only(DTensor) if python else contextlib.nullcontext():
                with pytest.raises(Exception) as info:
                    torch.index_select(a, 1, torch.tensor([0, 7]))
            errors.append((type(info.value), str(info.value), of_exception(info.value)))
        return compiled, errors[0] == errors[1], "out of DATA bounds" in errors[0][1], \
            errors[0][2]

    cause = "RuntimeError in aten.index_select.default"
    assert _world((2,), body) == [(True, True, True, cause)] * 2


def test_overlapping_python_entry_blocks_on_ranks_restore_the_entry_once():
    import torch.distributed as dist

    installed = DTensor.__dict__["__torch_dispatch__"]

    def body(mesh):
        with native.python_entry_only(DTensor):
            dist.barrier()  # every rank inside at once
            inside = DTensor.__dict__["__torch_dispatch__"].__func__.__name__
            dist.barrier()
        return inside

    assert _world((3,), body) == ["torch_dispatch"] * 3
    assert DTensor.__dict__["__torch_dispatch__"] is installed
