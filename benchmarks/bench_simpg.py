"""simpg vs torch's multithreaded process group vs gloo processes, on this machine.

    .venv/bin/python benchmarks/bench_simpg.py [--quick] [--loaded]

Prints one markdown table: world start+stop, 1 KB all_reduce and all_gather latency and 4 MB
all_reduce bandwidth at 4 and 8 ranks, and how close each backend's 4 MB all_reduce comes to
this machine's memory bound; then a world-size sweep (2..64 ranks) of the 1 KB all_reduce
for simpg and torch's threaded group; then, per op on an 8-rank world (add, 64x64 mm, S(0)->R,
1 KB all_reduce), our DTensor on simpg against torch's DTensor under its LocalTensorMode (one
thread, fake process group, every rank's op run in turn). ``--loaded`` keeps one busy process
per core running while it measures (a machine shared with other work). Each backend is
measured in its own fresh interpreter (this script re-run with --backend): importing simpg replaces
torch.distributed's module-level world with a per-rank proxy, and torch's threaded PG swaps
in its own thread-local world, so keeping them apart means neither figure pays for, or is
broken by, the other's patching.
Every measured path checks its result once: a wrong answer raises instead of giving a figure.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from opdb_tests import readme_figures

try:  # run as a script, benchmarks/ is on sys.path; loaded by the tests, the root is
    import conditions
except ImportError:
    from benchmarks import conditions

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = (4, 8)
SWEEP = (2, 4, 8, 16, 32, 64)
BACKENDS = ("simpg", "torch_mt", "gloo")
SMALL = 256  # float32 elements: 1 KB
LARGE = 1 << 20  # float32 elements: 4 MB
Figures = dict[str, float]
SPREAD = ":spread"  # a figure's key + SPREAD: its slowest round's mean over its fastest's


def repeats(quick: bool) -> dict[str, int]:
    """Loop counts; --quick keeps the whole run near a minute on 2 busy cores."""
    if quick:
        return dict(rounds=3, starts=10, gloo_starts=1, warmup=20, small=100, large=5)
    return dict(rounds=5, starts=20, gloo_starts=2, warmup=50, small=400, large=10)


# --- what every rank runs, whatever the backend ------------------------------------------

def _check(ok: bool, what: str) -> None:
    if not ok:
        raise RuntimeError(f"rank {dist.get_rank()}: wrong result from {what}")


def _rounds_s(loop: Callable[[int], Any], iters: int, rounds: int) -> list[float]:
    """Mean seconds per iteration of each of ``rounds`` timed loops of ``iters`` each."""
    means = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        loop(iters)
        means.append((time.perf_counter() - t0) / iters)
    return means


def _best_mean_s(loop: Callable[[int], Any], iters: int, rounds: int) -> float:
    """Best of ``rounds`` timed loops of ``iters`` each: other work shares these cores in
    bursts, and a round that a burst slowed tells nothing about the backend."""
    return min(_rounds_s(loop, iters, rounds))


def _worst_over_best(means: list[float]) -> float:
    return max(means) / min(means)


def _per_call_s(call: Callable[[], Any], iters: int, warmup: int, rounds: int) -> list[float]:
    """Seconds per call in each round (the figure is their best)."""
    for _ in range(warmup):
        call()

    def loop(k: int) -> None:
        dist.barrier()  # start together, so rank 0 does not time others' warm-up or lag
        for _ in range(k):
            call()

    return _rounds_s(loop, iters, rounds)


def _switches_per_call(call: Callable[[], Any], iters: int) -> tuple[float, float]:
    """(voluntary, involuntary) context switches of this process per call: a figure that a
    busy machine does not blur. Hand-overs are voluntary; involuntary ones are preemptions."""
    dist.barrier()
    before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(iters):
        call()
    dist.barrier()
    after = resource.getrusage(resource.RUSAGE_SELF)
    return ((after.ru_nvcsw - before.ru_nvcsw) / iters,
            (after.ru_nivcsw - before.ru_nivcsw) / iters)


def _cpu_per_call_s(call: Callable[[], Any], iters: int, rounds: int) -> float | None:
    """CPU seconds of this process (every thread) per call, best of ``rounds``: the work a
    collective costs, whatever share of the cores the machine's other work leaves it. Under
    load, wall time also measures that share: simpg runs one thread at a time and gets one
    thread's share, torch's threaded group keeps every rank's thread runnable. None for gloo,
    whose ranks are other processes."""
    if dist.get_backend() == "gloo":
        return None
    best = float("inf")
    for _ in range(rounds):
        dist.barrier()
        t0 = time.process_time()
        for _ in range(iters):
            call()
        dist.barrier()
        best = min(best, (time.process_time() - t0) / iters)
    return best


def rank_figures(reps: dict[str, int]) -> Figures | None:
    """The collective figures, as rank 0's loop wall time; None on other ranks."""
    rank, n = dist.get_rank(), dist.get_world_size()
    expected_sum = n * (n + 1) / 2  # rank r contributes r + 1
    warmup, rounds = reps["warmup"], reps["rounds"]

    small = torch.full((SMALL,), float(rank + 1))
    dist.all_reduce(small)
    _check(bool((small == expected_sum).all()), "all_reduce 1 KB")
    small.zero_()  # zeros stay zeros: repeated in-place sums cannot overflow to inf
    ar_small = _per_call_s(lambda: dist.all_reduce(small), reps["small"], warmup, rounds)
    switches = _switches_per_call(lambda: dist.all_reduce(small), reps["small"])
    ar_cpu = _cpu_per_call_s(lambda: dist.all_reduce(small), reps["small"], rounds)

    mine = torch.full((SMALL,), float(rank + 1))
    outs = [torch.empty(SMALL) for _ in range(n)]
    dist.all_gather(outs, mine)
    _check(all(bool((o == r + 1).all()) for r, o in enumerate(outs)), "all_gather 1 KB")
    ag_small = _per_call_s(lambda: dist.all_gather(outs, mine), reps["small"], warmup, rounds)

    large = torch.full((LARGE,), float(rank + 1))
    dist.all_reduce(large)
    _check(bool((large == expected_sum).all()), "all_reduce 4 MB")
    large.zero_()
    ar_large = _per_call_s(lambda: dist.all_reduce(large), reps["large"], 2, rounds)

    if rank != 0:
        return None
    return {
        "all_reduce_1k_us": min(ar_small) * 1e6,
        **({"all_reduce_1k_cpu_us": ar_cpu * 1e6} if ar_cpu is not None else {}),
        "all_reduce_1k_switches": switches[0],
        "all_reduce_1k_preempted": switches[1],
        "all_gather_1k_us": min(ag_small) * 1e6,
        "all_reduce_4m_gbps": LARGE * 4 / min(ar_large) / 1e9,
        # the least any all_reduce must do: read every rank's input once, write every output
        "all_reduce_4m_moved_gbps": 2 * n * LARGE * 4 / min(ar_large) / 1e9,
        "all_reduce_1k_us" + SPREAD: _worst_over_best(ar_small),
        "all_gather_1k_us" + SPREAD: _worst_over_best(ag_small),
        "all_reduce_4m_gbps" + SPREAD: _worst_over_best(ar_large),
    }


def sweep_figures(reps: dict[str, int]) -> Figures | None:
    """1 KB all_reduce, µs per call on rank 0 (the sweep's one figure), and its spread."""
    small = torch.zeros(SMALL)
    iters = max(10, reps["small"] // dist.get_world_size())
    per_call = _per_call_s(lambda: dist.all_reduce(small), iters, 5, reps["rounds"])
    cpu = _cpu_per_call_s(lambda: dist.all_reduce(small), iters, reps["rounds"])
    if dist.get_rank() != 0:
        return None
    figures = {"sweep_us": min(per_call) * 1e6, "sweep_us" + SPREAD: _worst_over_best(per_call)}
    if cpu is not None:
        figures["sweep_cpu_us"] = cpu * 1e6
    return figures


def sweep_figure(reps: dict[str, int]) -> float | None:
    """1 KB all_reduce, µs per call on rank 0 (the sweep's one figure)."""
    figures = sweep_figures(reps)
    return None if figures is None else figures["sweep_us"]


def _noop() -> None:
    """A world that only starts and stops: init/destroy happen around it."""


def _start_stop_ms(run_world: Callable[[], Any], reps: dict[str, int]) -> Figures:
    for _ in range(5):
        run_world()

    def loop(k: int) -> None:
        for _ in range(k):
            run_world()

    means = _rounds_s(loop, reps["starts"], reps["rounds"])
    return {"start_stop_ms": min(means) * 1e3, "start_stop_ms" + SPREAD: _worst_over_best(means)}


# --- 1. simpg -------------------------------------------------------------------------------

def measure_simpg(reps: dict[str, int], quick: bool) -> dict[int, Figures]:
    sys.path.insert(0, REPO)  # this checkout's simpg, wherever the script is run from
    import simpg

    out = {}
    for n in SIZES:
        start = _start_stop_ms(lambda: simpg.run(_noop, n), reps)
        out[n] = {**start, **simpg.run(rank_figures, n, reps)[0]}
    for n in SWEEP:
        out[n] = {**out.get(n, {}), **simpg.run(sweep_figures, n, reps)[0]}
    return out


# --- 2. torch's multithreaded process group --------------------------------------------------

def _run_threaded(fn: Callable[..., Any], n: int, *args: Any) -> list[Any]:
    """What common_distributed.spawn_threads_and_init_comms does, returning results."""
    from torch.testing._internal.distributed import multi_threaded_pg as mtpg

    torch._C._distributed_c10d._set_thread_isolation_mode(True)
    mtpg._install_threaded_pg()
    store = dist.HashStore()  # fresh per world: init's store-based barrier counts arrivals
    results: list[Any] = [None] * n
    errors: list[BaseException] = []

    def worker(rank: int) -> None:
        try:
            dist.init_process_group("threaded", rank=rank, world_size=n, store=store)
            results[rank] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - re-raised by the caller below
            errors.append(e)
            mtpg.ProcessLocalGroup.exception_handle(e)  # wakes ranks waiting in a collective
        finally:
            if dist.is_initialized():  # per thread: the installed world is thread-local
                dist.destroy_process_group()

    try:
        threads = [threading.Thread(target=worker, args=(r,)) for r in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        mtpg._uninstall_threaded_pg()
        torch._C._distributed_c10d._set_thread_isolation_mode(False)
        mtpg.ProcessLocalGroup.reset()
    if errors:
        raise errors[0]
    return results


def measure_torch_mt(reps: dict[str, int], quick: bool) -> dict[int, Figures]:
    out = {}
    for n in SIZES:
        start = _start_stop_ms(lambda: _run_threaded(_noop, n), reps)
        out[n] = {**start, **_run_threaded(rank_figures, n, reps)[0]}
    for n in SWEEP:
        out[n] = {**out.get(n, {}), **_run_threaded(sweep_figures, n, reps)[0]}
    return out


# --- 3. gloo processes on 127.0.0.1 ----------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _gloo_rank(rank: int, n: int, reps: dict[str, int] | None, out_path: str | None) -> None:
    """One spawned process; reps None means start and stop only."""
    dist.init_process_group("gloo", rank=rank, world_size=n)
    try:
        figures = rank_figures(reps) if reps is not None else None
        if figures is not None and out_path is not None:
            with open(out_path, "w") as f:
                json.dump(figures, f)
        # a rank that destroys its group at once can close a socket that a slower peer is
        # still connecting on ("Connection closed by peer" in connectFullMesh, seen at 8
        # processes on 2 cores); a barrier ends only once every rank has finished init
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _spawn_gloo(n: int, reps: dict[str, int] | None, out_path: str | None) -> None:
    # children inherit the environment: the env:// rendezvous reads these
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    mp.spawn(_gloo_rank, args=(n, reps, out_path), nprocs=n, join=True)


def measure_gloo(reps: dict[str, int], quick: bool) -> dict[int, Figures]:
    out = {}
    for n in SIZES[:1] if quick else SIZES:  # 8 processes on 2 cores is slow to start
        # no warm-up: each world is new processes (interpreter and torch import included),
        # the cost a user of mp.spawn pays every time
        starts = _rounds_s(lambda _: _spawn_gloo(n, None, None), 1, reps["gloo_starts"])
        start = {"start_stop_ms": min(starts) * 1e3}
        if len(starts) > 1:  # one round has no spread
            start["start_stop_ms" + SPREAD] = _worst_over_best(starts)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "rank0.json")
            _spawn_gloo(n, reps, path)
            with open(path) as f:
                out[n] = {**start, **json.load(f)}
    return out


# --- 4. per op on a simulated 8-rank world: our DTensor on simpg, torch's on LocalTensorMode --

OPS_WORLD = 8
OP_NAMES = ("add", "mm 64x64", "S(0)->R", "all_reduce 1 KB")
OPS_BACKENDS = ("dtensor_simpg", "torch_local_tensor")


def _op_loops(mesh: Any, api: Any, reduce: Callable[[], Any]) -> dict[str, Callable[[], Any]]:
    """The measured ops, built from one DTensor API (ours or torch's) over ``mesh``; each
    result is checked once against the same op on full tensors."""
    torch.manual_seed(0)  # every rank (and LocalTensorMode's one thread) builds the same inputs
    full_a, full_b, full_r = torch.randn(64, 64), torch.randn(64, 64), torch.randn(64, 64)
    a = api.distribute_tensor(full_a, mesh, [api.Shard(0)])
    b = api.distribute_tensor(full_b, mesh, [api.Shard(0)])
    r = api.distribute_tensor(full_r, mesh, [api.Replicate()])
    loops = {"add": lambda: a + b, "mm 64x64": lambda: a @ r,
             "S(0)->R": lambda: a.redistribute(mesh, [api.Replicate()]),
             "all_reduce 1 KB": reduce}
    for name, want in (("add", full_a + full_b), ("mm 64x64", full_a @ full_r),
                       ("S(0)->R", full_a)):
        if not torch.allclose(loops[name]().full_tensor(), want, atol=1e-4):
            raise RuntimeError(f"wrong result from {name}")
    return loops


def _world_us_per_op(loop_on_ranks: Callable[[str, int], list[tuple[float, float]]],
                     reps: dict[str, int]) -> Figures:
    """µs per op for the whole world: from the first rank starting a timed loop to the last
    ending it, over the loop's length (ranks run one at a time on simpg, and LocalTensorMode
    runs every rank in turn on one thread: both spans hold every rank's work)."""
    out: Figures = {}
    iters = reps["small"]
    for name in OP_NAMES:
        loop_on_ranks(name, reps["warmup"])
        means = []
        for _ in range(reps["rounds"]):
            spans = loop_on_ranks(name, iters)
            means.append((max(e for _, e in spans) - min(s for s, _ in spans)) / iters)
        out[name] = min(means) * 1e6
        out[name + SPREAD] = _worst_over_best(means)
    return out


def _dtensor_rank(reps: dict[str, int]) -> Figures | None:
    import dtensor

    rank = dist.get_rank()
    mesh = dtensor.init_device_mesh("cpu", (OPS_WORLD,))
    small = torch.full((SMALL,), float(rank + 1))
    dist.all_reduce(small)
    _check(bool((small == OPS_WORLD * (OPS_WORLD + 1) / 2).all()), "all_reduce 1 KB")
    small.zero_()
    loops = _op_loops(mesh, dtensor, lambda: dist.all_reduce(small))

    def on_ranks(name: str, iters: int) -> list[tuple[float, float]]:
        loop = loops[name]
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            loop()
        t1 = time.perf_counter()
        gathered: list[Any] = [None] * OPS_WORLD
        dist.all_gather_object(gathered, (t0, t1))
        return gathered

    figures = _world_us_per_op(on_ranks, reps)
    return figures if rank == 0 else None


def measure_dtensor_simpg(reps: dict[str, int], quick: bool) -> dict[int, Figures]:
    sys.path.insert(0, REPO)  # this checkout's simpg and dtensor
    import simpg

    return {OPS_WORLD: simpg.run(_dtensor_rank, OPS_WORLD, reps)[0]}


def measure_torch_local_tensor(reps: dict[str, int], quick: bool) -> dict[int, Figures]:
    """torch's DTensor on one thread: LocalTensorMode runs each op once per rank over a fake
    process group (torch's own way to simulate a world in one process)."""
    import torch.distributed.tensor as torch_dtensor
    from torch.distributed._local_tensor import LocalTensor, LocalTensorMode
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", rank=0, world_size=OPS_WORLD, store=FakeStore())
    try:
        mesh = torch_dtensor.init_device_mesh("cpu", (OPS_WORLD,))
        with LocalTensorMode(OPS_WORLD):
            small = LocalTensor({r: torch.full((SMALL,), float(r + 1)) for r in range(OPS_WORLD)})
            dist.all_reduce(small)
            if not all(bool((t == OPS_WORLD * (OPS_WORLD + 1) / 2).all())
                       for t in small._local_tensors.values()):
                raise RuntimeError("wrong result from all_reduce 1 KB under LocalTensorMode")
            small.zero_()
            loops = _op_loops(mesh, torch_dtensor, lambda: dist.all_reduce(small))

            def on_ranks(name: str, iters: int) -> list[tuple[float, float]]:
                loop = loops[name]
                t0 = time.perf_counter()
                for _ in range(iters):
                    loop()
                return [(t0, time.perf_counter())]

            figures = _world_us_per_op(on_ranks, reps)
    finally:
        dist.destroy_process_group()
    return {OPS_WORLD: figures}


MEASURE = {"simpg": measure_simpg, "torch_mt": measure_torch_mt, "gloo": measure_gloo,
           "dtensor_simpg": measure_dtensor_simpg,
           "torch_local_tensor": measure_torch_local_tensor}


# --- the machine ------------------------------------------------------------------------------

def memcpy_gbps() -> float:
    """Bytes moved (read + written) per second by one thread copying 64 MB: the memory bound
    a reduction on one core can approach (simpg reduces on the one running rank's thread)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        src, dst = torch.ones(1 << 24), torch.empty(1 << 24)
        dst.copy_(src)
        best = _best_mean_s(lambda k: [dst.copy_(src) for _ in range(k)], 5, 5)
    finally:
        torch.set_num_threads(threads)
    return 2 * src.numel() * 4 / best / 1e9


def start_load() -> list[subprocess.Popen]:
    """One busy process per core, as a machine shared with other work (--loaded)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(cpus or 1)]


def stop_load(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
        p.wait()


# --- the report ------------------------------------------------------------------------------

ROWS = (  # key, label, format
    ("start_stop_ms", "world start+stop (ms)", "{:.2f}"),
    ("all_reduce_1k_us", "all_reduce 1 KB (µs/call)", "{:.1f}"),
    ("all_reduce_1k_cpu_us", "all_reduce 1 KB: CPU µs/call, all threads", "{:.1f}"),
    ("all_reduce_1k_switches", "all_reduce 1 KB: voluntary context switches/call", "{:.1f}"),
    ("all_reduce_1k_preempted", "all_reduce 1 KB: involuntary (preemptions)/call", "{:.2f}"),
    ("all_gather_1k_us", "all_gather 1 KB (µs/call)", "{:.1f}"),
    ("all_reduce_4m_gbps", "all_reduce 4 MB (GB/s algbw)", "{:.2f}"),
    ("all_reduce_4m_moved_gbps", "all_reduce 4 MB: GB/s moved (read n + write n)", "{:.2f}"),
)


def print_table(results: dict[str, dict[int, Figures]], failed: list[str],
                argv: list[str], memcpy: float, loaded: bool) -> None:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"command: {' '.join(argv)}")
    print(f"torch {torch.__version__}, {cpus} cores, "
          f"{'one busy process per core (--loaded)' if loaded else 'no added load'}, "
          f"{datetime.datetime.now().isoformat(timespec='seconds')}")
    print()
    print("| metric | ranks | simpg | torch MT | gloo | simpg / torch MT | simpg / gloo |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for key, label, fmt in ROWS:
        for n in SIZES:
            vals = [results.get(b, {}).get(n, {}).get(key) for b in BACKENDS]
            cells = [fmt.format(v) if v is not None else "failed" if b in failed else "skipped"
                     for b, v in zip(BACKENDS, vals)]
            ratios = [f"{vals[0] / v:.3g}" if v and vals[0] is not None else "–"
                      for v in vals[1:]]
            print(f"| {label} | {n} | " + " | ".join(cells + ratios) + " |")
    print()
    print("Each figure is the best of several rounds' means (other work shares the cores); "
          "collectives are timed on rank 0. Context switches count the whole process (every "
          "rank of simpg and torch MT; rank 0's process for gloo).")
    print("Ratios are simpg's figure over the other's: below 1 is better for simpg in the "
          "time rows, above 1 in the GB/s rows.")
    print(f"Memory bound: one thread's memcpy moves {memcpy:.2f} GB/s (read + write); "
          "simpg's 4 MB all_reduce reaches " + ", ".join(
              f"{results['simpg'][n]['all_reduce_4m_moved_gbps'] / memcpy:.0%} of it at {n} "
              "ranks" for n in SIZES if "simpg" in results) + ".")


def spread_text(results: dict[str, dict[int, Figures]], reps: dict[str, int]) -> str:
    """The spread of every figure's rounds, as the children measured it."""
    labels = ({key: label.split(" (")[0] for key, label, _ in ROWS} | {"sweep_us": "sweep"}
              | {name: name for name in OP_NAMES})
    ratios = {f"{backend} {labels[key.removesuffix(SPREAD)]} at {n} ranks": figs[key]
              for backend, by_n in results.items() for n, figs in by_n.items()
              for key in figs if key.endswith(SPREAD)}
    if not ratios:
        return "no figure was measured"
    worst = max(ratios, key=ratios.__getitem__)
    per_backend = ", ".join(
        f"{b} {statistics.median(v for k, v in ratios.items() if k.startswith(b + ' ')):.3g}"
        for b in results if any(k.startswith(b + " ") for k in ratios))
    return (f"slowest round / fastest round per figure: median {per_backend}; max "
            f"{ratios[worst]:.3g} ({worst}); {reps['rounds']} rounds a figure, "
            f"{reps['gloo_starts']} for a gloo start")


def print_sweep(results: dict[str, dict[int, Figures]]) -> None:
    """Per-collective cost as the world grows: linear in ranks means a flat µs/rank column."""
    print()
    print("| ranks | simpg (µs/call) | simpg µs/rank | torch MT (µs/call) | torch MT µs/rank "
          "| simpg / torch MT | simpg / torch MT, CPU |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in SWEEP:
        s, t = (results.get(b, {}).get(n, {}).get("sweep_us") for b in ("simpg", "torch_mt"))
        sc, tc = (results.get(b, {}).get(n, {}).get("sweep_cpu_us")
                  for b in ("simpg", "torch_mt"))
        cells = [f"{v:.1f} | {v / n:.1f}" if v is not None else "– | –" for v in (s, t)]
        ratio = f"{s / t:.3g}" if s is not None and t else "–"
        cpu_ratio = f"{sc / tc:.3g}" if sc is not None and tc else "–"
        print(f"| {n} | " + " | ".join(cells) + f" | {ratio} | {cpu_ratio} |")
    print()
    print("1 KB all_reduce per call on rank 0 as the world grows (best of several rounds); the "
          "last column compares the CPU time of every thread of the process instead of wall "
          "time (under load, wall time also measures each backend's share of the cores).")


def print_ops(results: dict[str, dict[int, Figures]]) -> None:
    """Per op on a simulated world: our DTensor on simpg against torch's on LocalTensorMode."""
    ours, theirs = (results.get(b, {}).get(OPS_WORLD, {}) for b in OPS_BACKENDS)
    print()
    print(f"| op, {OPS_WORLD}-rank world | ours on simpg (µs/op) | torch on LocalTensorMode "
          "(µs/op) | ours / torch |")
    print("|---|---:|---:|---:|")
    for name in OP_NAMES:
        s, t = ours.get(name), theirs.get(name)
        cells = [f"{v:.1f}" if v is not None else "–" for v in (s, t)]
        ratio = f"{s / t:.3g}" if s is not None and t else "–"
        print(f"| {name} | " + " | ".join(cells) + f" | {ratio} |")
    print()
    print("Whole-world time per op, every rank's share included: from the first rank starting "
          "a timed loop to the last finishing it (best of several rounds).")


def main() -> None:
    machine = conditions.Conditions()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, no gloo at 8")
    parser.add_argument("--loaded", action="store_true",
                        help="measure with one busy process per core running")
    parser.add_argument("--backend", choices=BACKENDS + OPS_BACKENDS, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--write-readme", action="store_true",
                        help="also rewrite this benchmark's block of README.md")
    args = parser.parse_args()
    reps = repeats(args.quick)

    if args.backend:  # child: measure one backend, write its figures as JSON
        figures = MEASURE[args.backend](reps, args.quick)
        with open(args.out, "w") as f:
            json.dump(figures, f)
        return

    results: dict[str, dict[int, Figures]] = {}
    failed: list[str] = []
    memcpy = memcpy_gbps()  # before any load: the machine's own bound
    load = start_load() if args.loaded else []
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        stack.callback(stop_load, load)
        for backend in BACKENDS + OPS_BACKENDS:
            out = os.path.join(tmp, f"{backend}.json")
            cmd = [sys.executable, os.path.abspath(__file__), "--backend", backend, "--out", out]
            # a failed backend (its traceback is on stderr) costs its column, not the others
            if subprocess.run(cmd + (["--quick"] if args.quick else [])).returncode != 0:
                failed.append(backend)
                continue
            with open(out) as f:  # JSON keys are strings
                results[backend] = {int(n): figs for n, figs in json.load(f).items()}
    with readme_figures.tee() as report:
        print_table(results, failed, [os.path.relpath(sys.executable), *sys.argv], memcpy,
                    args.loaded)
        print_sweep(results)
        print_ops(results)
        print(f"\n{machine.footer(spread_text(results, reps))}")
    if args.write_readme and not failed:
        readme_figures.write_readme("bench-simpg", report.getvalue(), " ".join(
            [".venv/bin/python", "benchmarks/bench_simpg.py", *sys.argv[1:]]))
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
