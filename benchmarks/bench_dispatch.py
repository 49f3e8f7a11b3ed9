"""Eager dispatch overhead on tiny tensors: our DTensor vs torch.distributed.tensor.

    .venv/bin/python benchmarks/bench_dispatch.py [--quick]

Both libraries run in the same simpg world (4 ranks, a 1-D mesh), on the same 8x8 float32
tensors, with warm caches; the plain-tensor column is the same op on rank 0's local pieces.
"ours" dispatches through the compiled entry when it is built (Note [native fast path] in
dtensor.dispatch.native), and "ours, Python entry" through the pure-Python one, side by side.
Times are µs per op on rank 0, best of several rounds. A local op runs on rank 0 alone and is
timed in the thread's CPU time (the machine's 2 cores are shared; CPU time is what dispatch
costs, whatever else runs); a collective (a redistribute, the backward step's gradient
reduction) runs on every rank and is timed in wall time, every rank's turn included (the same
for both libraries). Intra-op parallelism is off (``torch.set_num_threads(1)``): on 8x8
tensors it only adds thread wake-ups (softmax took 8 ms with it on a loaded machine). Rows
alternate between the libraries over several passes so that both see the same conditions.
The "entry floor" column is the least any Python tensor subclass can pay for the row's op:
the same op on a wrapper subclass whose ``__torch_dispatch__`` does nothing (returns a tensor
made beforehand; torch's own dispatcher still packs the arguments into Python objects, calls
the entry and unpacks its result) plus the op on the plain local tensors. A row whose floor is above half
of torch's time cannot reach 0.5 with a Python-level subclass entry, however fast the entry is
(Note [the entry floor]). The last line measures a subclass that only unwraps, runs, rewraps.
"""

from __future__ import annotations

import argparse
import datetime
import os
import time
import warnings
from typing import Any, Callable

import torch
import torch.distributed as dist

import dtensor
import simpg
from dtensor.dispatch import native

from opdb_tests import readme_figures

try:  # run as a script, benchmarks/ is on sys.path; loaded by the tests, the root is
    import conditions
except ImportError:
    from benchmarks import conditions

warnings.filterwarnings("ignore")
N = 8


def _time(fn: Callable[[], Any], iters: int, rounds: int, collective: bool) -> list[float]:
    """µs per call in each of ``rounds`` (the figure is their best). A local op is timed in
    CPU time of the calling thread (what dispatch costs it, unmoved by other work on the
    shared cores); a collective in wall time, since it includes waiting for the other ranks."""
    clock = time.perf_counter_ns if collective else time.thread_time_ns
    for _ in range(20):
        fn()
    times = []
    for _ in range(rounds):
        if collective:
            dist.barrier()
        t0 = clock()
        for _ in range(iters):
            fn()
        times.append((clock() - t0) / iters / 1e3)
    return times


# rows whose op is a collective: every rank takes part; the others run on rank 0 alone
COLLECTIVE = {"redistribute S(0)->R", "backward step"}


def _cases(lib: Any, mesh: Any, Shard: Any, Replicate: Any) -> dict[str, Callable[[], Any]]:
    full = torch.arange(N * N, dtype=torch.float32).reshape(N, N)
    a = lib.distribute_tensor(full, mesh, [Shard(0)])
    b = lib.distribute_tensor(full, mesh, [Shard(0)])
    r = lib.distribute_tensor(full, mesh, [Replicate()])
    acc = lib.distribute_tensor(torch.zeros(N, N), mesh, [Shard(0)])
    w = lib.distribute_tensor(torch.ones(N, N), mesh, [Replicate()]).requires_grad_()
    plain = torch.ones(N)

    def backward_step() -> None:
        torch.mm(a, w).sum().backward()

    return {
        "add S(0)+S(0)": lambda: a + b,
        "mm S(0)@R": lambda: torch.mm(a, r),
        "sum over S(0) -> P": lambda: a.sum(0),
        "view S(0)": lambda: a.view(N, 2, N // 2),
        "softmax(dim=1) S(0)": lambda: torch.softmax(a, 1),
        "in-place add_ S(0)": lambda: acc.add_(b),
        "S(0) * plain tensor": lambda: a * plain,
        "split (3 outputs) S(0)": lambda: a.split(3, 1),
        "backward step": backward_step,
        "redistribute S(0)->R": lambda: a.redistribute(mesh, [Replicate()]),
    }


def _plain_cases() -> dict[str, Callable[[], Any]]:
    a = torch.arange(2 * N, dtype=torch.float32).reshape(2, N)
    r = torch.ones(N, N)
    acc = torch.zeros(2, N)
    w = torch.ones(N, N, requires_grad=True)
    plain = torch.ones(N)

    def backward_step() -> None:
        torch.mm(a, w).sum().backward()

    return {
        "add S(0)+S(0)": lambda: a + a,
        "mm S(0)@R": lambda: torch.mm(a, r),
        "sum over S(0) -> P": lambda: a.sum(0),
        "view S(0)": lambda: a.view(2, 2, N // 2),
        "softmax(dim=1) S(0)": lambda: torch.softmax(a, 1),
        "in-place add_ S(0)": lambda: acc.add_(a),
        "S(0) * plain tensor": lambda: a * plain,
        "split (3 outputs) S(0)": lambda: a.split(3, 1),
        "backward step": backward_step,
        "redistribute S(0)->R": lambda: torch.cat([a] * 4),
    }


class _Floor(torch.Tensor):
    """The least a Python tensor subclass pays: unwrap, run, rewrap (no sharding at all)."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, local: torch.Tensor) -> "_Floor":
        r = torch.Tensor._make_wrapper_subclass(cls, local.shape, strides=local.stride(),
                                                dtype=local.dtype, device=local.device)
        r.local = local
        return r

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        return cls(func(*(x.local if type(x) is cls else x for x in args), **(kwargs or {})))


# Note [the entry floor]
# torch's C++ dispatcher reaches a Python subclass through its Python dispatch key: it builds
# an args tuple and kwargs dict from the op's stack, calls ``__torch_dispatch__``, and converts
# what it returns back to the stack (checking the schema's return types). Our compiled entry
# replaces only the Python function it calls, so this round trip, plus the local op itself, is
# a floor under every row; torch's DTensor pays it too, and its own work on top. Going below it
# needs the sharding step inside the dispatcher (a C++ subclass, or a backend fallback kernel
# registered for the DTensor's dispatch key), where no Python object is made per call.
class _NullEntry(torch.Tensor):
    """A wrapper subclass whose entry does no work: the dispatcher's round trip alone. It
    returns a tensor made beforehand (an in-place op its input), so the rows of view ops,
    whose outputs must be fresh tensors, have no floor here. Its one Python frame (~0.1 µs)
    is the only cost our compiled entry does not share."""

    __torch_function__ = torch._C._disabled_torch_function_impl
    results: dict[Any, Any] = {}

    @staticmethod
    def __new__(cls, shape: tuple[int, ...]) -> "_NullEntry":
        return torch.Tensor._make_wrapper_subclass(cls, shape, dtype=torch.float32)

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        made = cls.results[func]
        return args[0] if made is None else made


def _null_cases() -> dict[str, Callable[[], Any]]:
    """The non-view local rows' ops on :class:`_NullEntry` (the arguments of ``_cases``)."""
    a, acc, square = _NullEntry((N, N)), _NullEntry((N, N)), _NullEntry((N, N))
    plain = torch.ones(N)
    aten = torch.ops.aten
    _NullEntry.results.update({
        aten.add.Tensor: square, aten.mm.default: square, aten.mul.Tensor: square,
        aten._softmax.default: square, aten.sum.dim_IntList: _NullEntry((N,)),
        aten.add_.Tensor: None,  # in place: returns its input
    })
    return {
        "add S(0)+S(0)": lambda: a + a,
        "mm S(0)@R": lambda: torch.mm(a, a),
        "sum over S(0) -> P": lambda: a.sum(0),
        "softmax(dim=1) S(0)": lambda: torch.softmax(a, 1),
        "in-place add_ S(0)": lambda: acc.add_(a),
        "S(0) * plain tensor": lambda: a * plain,
    }


def _time_rows(cases: dict[str, Callable[[], Any]], iters: int, rounds: int,
               column: str, out: dict[str, dict[str, list[float]]],
               distributed: bool = True) -> None:
    """Append each row's round times (µs per call) for ``column`` to ``out``."""
    for name, fn in cases.items():
        collective = distributed and name in COLLECTIVE
        if collective or dist.get_rank() == 0:
            out.setdefault(name, {}).setdefault(column, []).extend(
                _time(fn, iters, rounds, collective=collective))


def body(iters: int, rounds: int, passes: int
         ) -> tuple[dict[str, dict[str, list[float]]], list[float]] | None:
    """Every row's round times (µs per call) by column, and the floor's, on rank 0."""
    from torch.distributed import device_mesh as torch_mesh
    from torch.distributed import tensor as torch_dt
    from torch.distributed.tensor.experimental import implicit_replication

    ours_mesh = dtensor.init_device_mesh("cpu", (4,))
    theirs_mesh = torch_mesh.init_device_mesh("cpu", (4,))
    ours = _cases(dtensor, ours_mesh, dtensor.Shard, dtensor.Replicate)
    theirs = _cases(torch_dt, theirs_mesh, torch_dt.Shard, torch_dt.Replicate)
    out: dict[str, dict[str, list[float]]] = {}
    for _ in range(passes):
        with dtensor.fallback_policy("silent"):
            _time_rows(ours, iters, rounds, "ours", out)
            with native.python_entry_only(dtensor.DTensor):
                _time_rows(ours, iters, rounds, "python", out)
        with implicit_replication():  # torch refuses a plain tensor beside a DTensor otherwise
            _time_rows(theirs, iters, rounds, "torch", out)
    if dist.get_rank() != 0:
        return None
    _time_rows(_plain_cases(), iters, rounds, "plain", out, distributed=False)
    _time_rows(_null_cases(), iters, rounds, "entry", out, distributed=False)
    floor = _Floor(torch.ones(2, N))
    return out, _time(lambda: floor + floor, iters, rounds, collective=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--write-readme", action="store_true",
                        help="also rewrite this benchmark's block of README.md")
    args = parser.parse_args()
    iters, rounds, passes = (50, 3, 2) if args.quick else (300, 3, 4)
    torch.set_num_threads(1)
    machine = conditions.Conditions()
    times, floor_times = simpg.run(body, 4, iters, rounds, passes, timeout=600)[0]
    figures = {name: {col: min(t) for col, t in row.items()} for name, row in times.items()}
    floor = min(floor_times)
    flag = " --quick" if args.quick else ""
    with readme_figures.tee() as report:
        print(f"command: .venv/bin/python benchmarks/bench_dispatch.py{flag}")
        print(f"torch {torch.__version__}, {os.cpu_count()} cores, "
              f"{datetime.datetime.now().isoformat(timespec='seconds')}, 4 simpg ranks, "
              "8x8 float32\n")
        entry = "compiled" if native.MODULE is not None else f"Python ({native.REASON})"
        print(f"ours: the {entry} entry\n")
        print("| op | plain (µs) | ours (µs) | ours, Python entry (µs) | torch DTensor (µs) | "
              "ours / torch | Python entry / torch | entry floor (µs) | floor / torch |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for name, f in figures.items():
            floor_row = "| – | – |"
            if "entry" in f:  # a local op: the dispatcher's round trip plus the plain op
                least = f["entry"] + f["plain"]
                floor_row = f"| {least:.1f} | {least / f['torch']:.2f} |"
            print(f"| {name} | {f['plain']:.1f} | {f['ours']:.1f} | {f['python']:.1f} | "
                  f"{f['torch']:.1f} | {f['ours'] / f['torch']:.2f} | "
                  f"{f['python'] / f['torch']:.2f} {floor_row}")
        print(f"\nA Python tensor subclass that only unwraps, runs and rewraps (no sharding) "
              f"pays {floor:.1f} µs per add here: the floor under any Python __torch_dispatch__ "
              f"(torch's DTensor dispatches in C++, and so does our compiled entry on a cached "
              f"call).\nLocal rows: CPU time of rank 0's thread; "
              f"collective rows: wall time; best of {passes} alternating passes x {rounds} "
              f"rounds x {iters} calls; torch.set_num_threads(1).")
        rounds_of = {f"{col} {name}": t for name, row in times.items() for col, t in row.items()}
        print(f"\n{machine.footer(conditions.worst_over_best(rounds_of))}")
    if args.write_readme:
        readme_figures.write_readme("bench-dispatch", report.getvalue(),
                                    f".venv/bin/python benchmarks/bench_dispatch.py{flag} "
                                    "--write-readme")


if __name__ == "__main__":
    main()
