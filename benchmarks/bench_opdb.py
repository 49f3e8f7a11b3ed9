"""Op-database sweep throughput: our opdb_tests vs a harness in the style of PyTorch's own
test/distributed/tensor/test_dtensor_ops.py, on the same OpInfos, on this machine.

- ours: ``opdb_tests.sweep.sweep_entry`` (soundness of every strategy on meshes (3,) and (2,2)
  without threads; forward and backward end to end on (2,) and (2,2) in one simpg world per
  mesh). A case is one (strategy or placement assignment, mesh, tier).
- torch-style (a subprocess that never imports simpg or dtensor): torch.distributed.tensor on
  4 threads over ``multi_threaded_pg`` (like ``DTensorOpTestBase``), each sample converted by
  ``DTensorConverter`` into every product of Replicate / even Shard placements, the op run on
  DTensors and ``full_tensor()`` compared with the single-device result. A case is one
  placement combination of one sample.

Both get the first sample of the same OpInfos (``--ops N``: every k-th variant of op_db so
that N are taken). Prints cases checked per second for each and the ratio.

    .venv/bin/python benchmarks/bench_opdb.py [--ops 60]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

try:  # run as a script, benchmarks/ is on sys.path; loaded by the tests, the root is
    import readme_figures
except ImportError:
    from benchmarks import readme_figures

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _keys(n: int) -> list[str]:
    from opdb_tests.cases import entries, samples

    usable = [e for e in entries() if samples(e, 1)]
    step = max(1, len(usable) // n)
    return [e.key for e in usable[::step][:n]]


def warm(keys: list[str]) -> None:
    """What a sweep of ``keys`` does before its first case, so that it is not timed: one
    intra-op thread, the samples generated and mapped to aten, the runtime's lazy imports."""
    import torch

    from opdb_tests.cases import entry, samples
    from opdb_tests.sweep import sweep_entry

    torch.set_num_threads(1)
    for k in keys:
        samples(entry(k), 1)
    sweep_entry(entry("add"))


def ours(keys: list[str]) -> dict:
    from opdb_tests.cases import entry
    from opdb_tests.sweep import sweep_entry

    warm(keys)
    t0 = time.perf_counter()
    results = [sweep_entry(entry(k)) for k in keys]
    secs = time.perf_counter() - t0
    placements = sum(len(r.tried["forward"]) for r in results)
    return {"cases": sum(r.cases for r in results), "seconds": secs,
            "kinds": placements / max(len(results), 1)}


_THEIRS = r'''
import json, sys, threading, time, warnings
warnings.simplefilter("ignore")
import torch
import torch.distributed as c10d
from torch.utils._pytree import tree_flatten
from torch.distributed.tensor import DTensor, init_device_mesh
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.distributed._tensor.common_dtensor import DTensorConverter
from torch.testing._internal.distributed.multi_threaded_pg import _install_threaded_pg

torch.set_num_threads(1)
keys = json.loads(sys.argv[1])
WORLD = 4
by_key = {}
for op in op_db:
    k = f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name
    by_key.setdefault(k, op)
work = []
for k in keys:
    op = by_key[k]
    dts = op.supported_dtypes("cpu")
    dt = torch.float32 if torch.float32 in dts else (torch.float64 if torch.float64 in dts
                                                      else sorted(dts, key=str)[0])
    for s in op.sample_inputs("cpu", dt, requires_grad=False):
        work.append((op, (s.input, *s.args), dict(s.kwargs)))
        break
counts = [0] * WORLD
errors = [0] * WORLD

def body(rank):
    mesh = init_device_mesh("cpu", (WORLD,))
    for op, args, kwargs in work:
        try:
            ref = op.op(*args, **kwargs)
        except Exception:
            continue
        conv = DTensorConverter(mesh, args, kwargs)
        for dargs, dkwargs in conv:       # the core loop of test_dtensor_ops.run_dtensor_crossref
            if not conv.successful():
                continue
            counts[rank] += 1
            try:
                out = op.op(*dargs, **dkwargs)
                flat, _ = tree_flatten(out)
                rflat, _ = tree_flatten(ref)
                for o, r in zip(flat, rflat):
                    if isinstance(o, DTensor):
                        torch.testing.assert_close(o.full_tensor(), r, check_stride=False)
            except Exception:
                errors[rank] += 1

world = _install_threaded_pg()
store = c10d.HashStore()
torch._C._distributed_c10d._set_thread_isolation_mode(True)
def worker(rank):
    c10d.init_process_group(backend="threaded", rank=rank, world_size=WORLD, store=store)
    try:
        body(rank)
    finally:
        c10d.destroy_process_group()
t0 = time.perf_counter()
threads = [threading.Thread(target=worker, args=(r,)) for r in range(WORLD)]
for t in threads: t.start()
for t in threads: t.join(timeout=1200)
secs = time.perf_counter() - t0
print(json.dumps({"cases": counts[0], "errors": errors[0], "seconds": secs,
                  "per_op": counts[0] / max(len(work), 1)}))
'''


def theirs(keys: list[str]) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", _THEIRS, json.dumps(keys)], capture_output=True,
                         text=True, env=env, cwd=ROOT, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"torch-style harness failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", type=int, default=60)
    ap.add_argument("--write-readme", action="store_true",
                    help="also rewrite this benchmark's block of README.md")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.path.insert(0, ROOT)
    keys = _keys(args.ops)
    t = theirs(keys)
    o = ours(keys)
    rate_t, rate_o = t["cases"] / t["seconds"], o["cases"] / o["seconds"]
    with readme_figures.tee() as report:
        print(f"op_db sweep, {len(keys)} OpInfos (first sample each), {os.cpu_count()} CPUs")
        print(f"{'harness':<44}{'cases':>8}{'seconds':>9}{'cases/s':>10}{'cases/op':>10}")
        print(f"{'torch-style (DTensorConverter, threaded pg)':<44}{t['cases']:>8}"
              f"{t['seconds']:>9.2f}{rate_t:>10.1f}{t['cases'] / len(keys):>10.1f}")
        print(f"{'ours (opdb_tests, simpg)':<44}{o['cases']:>8}{o['seconds']:>9.2f}"
              f"{rate_o:>10.1f}{o['cases'] / len(keys):>10.1f}")
        print(f"speed-up: {rate_o / rate_t:.1f}x cases/s; "
              f"{o['cases'] / max(t['cases'], 1):.1f}x "
              f"cases per op (torch-style: Replicate and even Shard on a 4-rank 1-D mesh, "
              f"forward; "
              f"ours: every rule strategy + R/S/uneven S/Partial on 1-D and 2-D meshes, forward "
              f"and backward)")
    if args.write_readme:  # a text table: fenced, so that markdown keeps its columns
        readme_figures.write_readme("bench-opdb", f"```text\n{report.getvalue().strip()}\n```",
                                    f".venv/bin/python benchmarks/bench_opdb.py --ops {args.ops} "
                                    "--write-readme")


if __name__ == "__main__":
    main()
