"""A compiled tensor-parallel training step, ours against torch's DTensor, on simpg.

    .venv/bin/python benchmarks/bench_compile.py                  # tp=2, inductor
    .venv/bin/python benchmarks/bench_compile.py --tp 4 --backend aot_eager --steps 20

The model: a 2-layer MLP (``--dim`` -> ``--hidden`` -> ``--dim``), ``ColwiseParallel`` on
the first layer and ``RowwiseParallel`` on the second, ours from ``dtensor.parallel`` and
torch's from ``torch.distributed.tensor.parallel``, the same weights and batch. A step is
forward, a mean-square loss, backward and an SGD update. Each library runs it eagerly and
compiled (``torch.compile(model, backend=..., dynamic=False)``; the optimizer stays eager).
Both libraries live in one simpg world per mode (torch's ranks with per-rank meshes:
Note [per-rank process state] in simpg/isolation.py) and their steps alternate, so that the
load of a shared machine falls on both alike.

Figures: ``compile s`` is the first step (tracing and compiling, all ranks: dynamo's lock
makes the ranks compile one at a time); ``step ms`` is the median wall time of the later
steps, for a world (its ranks share the machine). ``max |loss - eager|`` compares each
compiled run's losses with its own library's eager losses.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import simpg  # noqa: E402
from benchmarks import conditions  # noqa: E402

LIBS = ("ours", "torch")


class MLP(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tp", type=int, default=2, help="ranks (tensor-parallel degree)")
    p.add_argument("--backend", default="inductor", choices=["aot_eager", "inductor"])
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=10, help="steps, the first a warm-up")
    return p.parse_args(argv)


def _fresh_torch_caches() -> None:
    """torch's DTensor caches per thread and per process, keyed by meshes; simpg reuses
    threads across worlds (as in bench_training)."""
    from torch.distributed.tensor._redistribute import (
        _gen_transform_infos,
        clear_redistribute_planner_cache,
    )
    from torch.distributed.tensor._sharding_prop import ShardingPropagator
    from torch.distributed.tensor.debug import _clear_sharding_prop_cache

    _clear_sharding_prop_cache()
    _gen_transform_infos.cache_clear()
    clear_redistribute_planner_cache()
    ShardingPropagator._propagate_tensor_meta_cached.cache_clear()


def _parallelize(lib: str, args: argparse.Namespace) -> nn.Module:
    torch.manual_seed(0)
    model = MLP(args.dim, args.hidden)
    if lib == "ours":
        from dtensor import init_device_mesh
        from dtensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import (
            ColwiseParallel,
            RowwiseParallel,
            parallelize_module,
        )
    mesh = init_device_mesh("cpu", (args.tp,))
    return parallelize_module(model, mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})


class _Side:
    """One library's model, compiled or not, with its optimizer and figures on this rank."""

    def __init__(self, lib: str, compiled: bool, args: argparse.Namespace) -> None:
        self.model = _parallelize(lib, args)
        self.run = (torch.compile(self.model, backend=args.backend, dynamic=False)
                    if compiled else self.model)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=1e-2)
        self.losses: list[float] = []
        self.times: list[float] = []

    def step(self, x: torch.Tensor) -> None:
        t0 = time.perf_counter()
        loss = self.run(x).pow(2).mean()
        loss.backward()
        self.opt.step()
        self.opt.zero_grad()
        self.times.append(time.perf_counter() - t0)
        self.losses.append(loss.detach().item())


def rank_body(compiled: bool, args: argparse.Namespace) -> dict[str, tuple[list, list]]:
    """Both libraries in one world, their steps alternating, so that the load of a shared
    machine falls on both alike."""
    _fresh_torch_caches()
    sides = {lib: _Side(lib, compiled, args) for lib in LIBS}
    x = torch.randn(args.batch, args.dim, generator=torch.Generator().manual_seed(1))
    for _ in range(args.steps):
        for side in sides.values():
            side.step(x)
    _fresh_torch_caches()
    return {lib: (side.losses, side.times) for lib, side in sides.items()}


def measure(compiled: bool, args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    torch._dynamo.reset()  # no graph of another run: each compiles from nothing
    ranks = simpg.run(rank_body, args.tp, compiled, args, timeout=1800)
    out = {}
    for lib in LIBS:
        steps = [max(r[lib][1][i] for r in ranks) for i in range(args.steps)]  # slowest rank
        out[lib] = {"losses": ranks[0][lib][0], "first_s": steps[0],
                    "step_ms": 1e3 * statistics.median(steps[1:]),
                    "steps_ms": [1e3 * s for s in steps[1:]]}
    return out


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    machine = conditions.Conditions()
    torch._dynamo.config.recompile_limit = max(8, 2 * args.tp)  # one graph per rank
    rows = {}
    for compiled in (False, True):
        for lib, row in measure(compiled, args).items():
            rows[lib, compiled] = row
    print(f"MLP {args.dim}->{args.hidden}->{args.dim}, batch {args.batch}, tp={args.tp} simpg "
          f"ranks, backend {args.backend}, {args.steps} steps (median of the last "
          f"{args.steps - 1}; ours and torch's alternate in one world)")
    print(f"{'library':8} {'mode':9} {'step ms':>9} {'first step s':>13} "
          f"{'max |loss - eager|':>19}")
    for lib in LIBS:
        for compiled in (False, True):
            r = rows[lib, compiled]
            diff = max(abs(a - b) for a, b in zip(r["losses"], rows[lib, False]["losses"]))
            print(f"{lib:8} {'compiled' if compiled else 'eager':9} {r['step_ms']:9.2f} "
                  f"{r['first_s']:13.2f} {diff:19.2e}")
    ours, theirs = rows["ours", True]["step_ms"], rows["torch", True]["step_ms"]
    print(f"compiled step, ours/torch: {ours / theirs:.2f}")
    spread = "; ".join(f"{lib} {'compiled' if compiled else 'eager'} "
                       f"{conditions.spread(rows[lib, compiled]['steps_ms'])}"
                       for lib in LIBS for compiled in (False, True))
    print(f"\n{machine.footer('step ms over the later steps: ' + spread)}")


if __name__ == "__main__":
    main()
