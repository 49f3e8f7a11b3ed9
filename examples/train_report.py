"""What the main job prints: losses against one device, parameters, state bytes, and the
collectives per mesh dim with estimated times (simulated runs)."""

from __future__ import annotations

import argparse
import math
from typing import Any, Sequence


def report(args: argparse.Namespace, results: Sequence[Any], reference: list[float],
           elapsed: float, *, simulated: bool) -> bool:
    """Print everything; True when every step's loss matches the single device."""
    where = (f"{len(results)} simulated ranks (simpg)" if simulated
             else f"{len(results)} {'NCCL' if args.cuda else 'gloo'} processes")
    parallel = [p for p, on in (("fully sharded" if args.dp == "fsdp" else
                                 "replicated" if args.dp == "replicate" else "", args.dp != "none"),
                                ("tensor", not args.no_tp),
                                ("sequence", not args.no_tp and not args.no_sp),
                                ("loss", not args.no_tp and not args.no_loss_parallel)) if on]
    print(f"Llama-style '{args.model}' on a dp={args.dp_size} x tp={args.tp_size} mesh, "
          f"{where}; {' + '.join(parallel) or 'no'} parallel; {args.steps} steps in "
          f"{elapsed:.2f} s")
    ok = _losses(results[0].losses, reference, args.tolerance)
    if not args.quiet:
        _params(results)
        _state(results)
        if simulated:
            _collectives(args, results)
    print("PASS: every step's loss equals the single-device loss" if ok else
          f"FAIL: losses differ from the single device beyond --tolerance {args.tolerance}")
    return ok


def _losses(losses: list[float], reference: list[float], tolerance: float) -> bool:
    print(f"\n{'step':>4}  {'loss (sharded)':>14}  {'loss (1 device)':>15}  {'rel. diff':>9}")
    ok = len(losses) == len(reference)
    for step, (a, b) in enumerate(zip(losses, reference)):
        diff = abs(a - b) / max(abs(b), 1e-12)
        bad = not math.isfinite(a) or diff > tolerance
        ok &= not bad
        print(f"{step:>4}  {a:>14.6f}  {b:>15.6f}  {diff:>9.1e}{'  <-- differs' if bad else ''}")
    return ok


def _params(results: Sequence[Any]) -> None:
    print(f"\n{'parameter':<34} {'placements':<22} {'global shape':<14} "
          f"{'local (rank 0)':<14} {'bytes/rank (min-max)':>20}")
    for i, (name, placements, shape, local, _, _) in enumerate(results[0].params):
        sizes = [r.params[i][4] for r in results]
        span = f"{min(sizes)}" if min(sizes) == max(sizes) else f"{min(sizes)}-{max(sizes)}"
        print(f"{name:<34} {placements:<22} {str(shape):<14} {str(local):<14} {span:>20}")


def _state(results: Sequence[Any]) -> None:
    total = {k: max(r.state[k] for r in results) for k in results[0].state}
    # what one rank would hold without any sharding: every parameter whole, its gradient,
    # and AdamW's two moments
    whole = sum(math.prod(shape) * itemsize for _, _, shape, _, _, itemsize in results[0].params)
    print(f"\nper-rank state (largest rank): parameters {_kb(total['parameters'])}, gradients "
          f"{_kb(total['gradients'])}, optimizer {_kb(total['optimizer'])}; "
          f"{sum(total.values()) / max(4 * whole, 1):.3f} of a replicated run's "
          f"{_kb(4 * whole)} (parameters + gradients + 2 AdamW moments)")


def _kb(n: float) -> str:
    return f"{n / 1024:.1f} KiB"


def mesh_dim_of(ranks: Sequence[int], dp: int, tp: int) -> str:
    """Which dim of the row-major dp x tp mesh a group of global ranks spans (on a 1 x tp or
    dp x 1 mesh the whole world is that one dim)."""
    rs = sorted(ranks)
    rows = {r // tp for r in rs}
    cols = {r % tp for r in rs}
    if len(rows) == 1 and len(rs) == tp:
        return "tp"
    if len(cols) == 1 and len(rs) == dp:
        return "dp"
    if len(rs) == dp * tp:
        return "dp+tp"
    return "other"


def collective_summary(args: argparse.Namespace, records: Sequence[Any]) -> list[dict]:
    """Per mesh dim and per training step, as seen by the busiest rank: collectives it takes
    part in, bytes it receives, and their estimated time one after another."""
    import simpg

    world = args.dp_size * args.tp_size
    models = {"nvlink": simpg.CostModel.nvlink_node(max(8, world)),
              "infiniband": simpg.CostModel.infiniband_cluster(
                  ranks_per_node=args.tp_size if args.dp_size > 1 else args.tp_size * 2)}
    # dim -> rank -> totals
    per_rank: dict[str, dict[int, dict]] = {}
    for rec in records:
        dim = mesh_dim_of(rec.ranks, args.dp_size, args.tp_size)
        times = {key: model.estimate(rec) for key, model in models.items()}
        for rank, received in zip(rec.ranks, rec.bytes_received):
            row = per_rank.setdefault(dim, {}).setdefault(
                rank, {"count": 0, "bytes": 0, "ops": {}, "nvlink_s": 0.0, "infiniband_s": 0.0})
            row["count"] += 1
            row["bytes"] += received
            row["ops"][rec.op] = row["ops"].get(rec.op, 0) + 1
            for key, seconds in times.items():
                row[f"{key}_s"] += seconds
    steps = max(args.steps, 1)
    out = []
    for dim in sorted(per_rank):
        busiest = max(per_rank[dim].values(), key=lambda r: (r["bytes"], r["count"]))
        out.append({"dim": dim, "count": busiest["count"] / steps,
                    "bytes": busiest["bytes"] / steps,
                    "ops": {k: v / steps for k, v in busiest["ops"].items()},
                    "nvlink_s": busiest["nvlink_s"] / steps,
                    "infiniband_s": busiest["infiniband_s"] / steps})
    return out


def unique_records(results: Sequence[Any]) -> list[Any]:
    """Each rank traced the collectives it took part in: the union, once each, in order."""
    seen: dict[int, Any] = {}
    for r in results:
        for rec in r.records:
            seen.setdefault(id(rec), rec)
    return sorted(seen.values(), key=lambda rec: rec.seq)


def _collectives(args: argparse.Namespace, results: Sequence[Any]) -> None:
    import simpg

    records = unique_records(results)
    print("\ncollectives per training step and rank, by mesh dim (the busiest rank: what it "
          "takes part in, the bytes it receives, their time in simpg's cost model, serial)")
    print(f"{'mesh dim':<8} {'count':>6} {'bytes':>12}  {'NVLink node':>12} "
          f"{'IB cluster':>12}  ops")
    for row in collective_summary(args, records):
        ops = ", ".join(f"{k} x{v:g}" for k, v in sorted(row["ops"].items()))
        print(f"{row['dim']:<8} {row['count']:>6g} {row['bytes']:>12.0f}  "
              f"{row['nvlink_s'] * 1e6:>10.1f}us {row['infiniband_s'] * 1e6:>10.1f}us  {ops}")
    if args.trace_file:
        model = simpg.CostModel.nvlink_node(max(8, args.dp_size * args.tp_size))
        from simpg.timeline import write_chrome_trace

        write_chrome_trace(records, args.trace_file, cost_model=model)
        print(f"\nPerfetto trace of {len(records)} collectives: {args.trace_file} "
              f"(open in https://ui.perfetto.dev)")
