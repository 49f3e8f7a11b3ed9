"""What the main job prints: losses against one device, parameters, state bytes, and the
collectives per mesh dim with estimated times (simulated runs)."""

from __future__ import annotations

import argparse
import math
from typing import Any, Sequence

# Note [weight drift]
# The loss is a weak witness: one number per step, and at init attention barely moves it
# (attending to this rank's keys only, a broken context-parallel attention, changes the tiny
# model's loss by 2e-4 relative). So the trained weights are compared too: per parameter,
# |W - W_1dev| / |W_1dev - W_init| (Frobenius), the error relative to how far training moved
# it. Measured on the tiny model, 5 steps: f32 runs 6e-6 (tolerance 1e-3); bf16 runs 0.03 to
# 0.12, largest on the norm weights, whose gradients are small enough for bf16 rounding to flip
# AdamW's step direction on some elements (tolerance 0.3); the broken attention above 0.8.
WEIGHT_TOLERANCE = {"float32": 1e-3, "bfloat16": 0.3}


def report(args: argparse.Namespace, results: Sequence[Any], reference: list[float],
           elapsed: float, *, simulated: bool, drift: dict[str, float] | None = None) -> bool:
    """Print everything; True when every step's loss matches the single device (and, given
    ``drift``, the trained weights too)."""
    world = len(results)
    where = (f"{world} simulated ranks (simpg)" if simulated
             else f"{world} {'NCCL' if args.cuda else 'gloo'} processes")
    print(f"Llama-style '{args.model}' on a {describe_mesh(args)} mesh, {where}; "
          + "; ".join([f"{' + '.join(parallelisms(args)) or 'no'} parallel", *_extras(args),
                       f"{args.steps} steps in {elapsed:.2f} s"]))
    ok = _losses(results[0].losses, reference, args.tolerance)
    if drift:
        ok &= _drift(drift, weight_tolerance(args))
    if not args.quiet:
        _params(results)
        _state(results)
        if simulated:
            _collectives(args, results)
    print("PASS: every step's loss" + (" and every trained weight" if drift else "")
          + " equals the single device's" if ok else
          "FAIL: the run differs from the single device beyond the tolerance")
    return ok


def describe_mesh(args: argparse.Namespace) -> str:
    names, shape = mesh_dims(args)
    return " x ".join(f"{n}={s}" for n, s in zip(names, shape))


def mesh_dims(args: argparse.Namespace) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The mesh's dim names and sizes (a DPxTP mesh for callers that only set those two)."""
    names = tuple(getattr(args, "mesh_dim_names", ("dp", "tp")))
    shape = tuple(getattr(args, "mesh_shape", (args.dp_size, args.tp_size)))
    pp = getattr(args, "pp", 1)
    return (("pp", *names), (pp, *shape)) if pp > 1 else (names, shape)


def parallelisms(args: argparse.Namespace) -> list[str]:
    tp = not args.no_tp and args.tp_size > 1
    data = {"fsdp": "HSDP" if getattr(args, "rep_size", 1) > 1 else "fully sharded",
            "replicate": "replicated", "none": ""}[args.dp]
    pp = getattr(args, "pp", 1)
    schedule = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "interleaved 1F1B",
                "looped-bfs": "looped BFS", "zb": "interleaved zero bubble",
                "zbv": "zero-bubble V", "dualpipev": "DualPipeV"}.get(
        getattr(args, "pp_schedule", ""), "")
    if getattr(args, "pp_stages_per_rank", 1) > 1:
        schedule += f", {args.pp_stages_per_rank} stages a rank"
    return [p for p, on in ((f"pipeline ({schedule})", pp > 1), (data, args.dp != "none"),
                            ("context" + (" (ring)" if getattr(args, "cp_rotate", "") ==
                                          "alltoall" else ""), getattr(args, "cp_size", 1) > 1),
                            ("tensor", tp), ("sequence", tp and not args.no_sp),
                            ("loss", tp and not args.no_loss_parallel)) if on]


def _extras(args: argparse.Namespace) -> list[str]:
    """The dtype, accumulation and checkpointing, when not the plain f32 run."""
    out = []
    if getattr(args, "dtype", "float32") != "float32":
        out.append(f"{args.dtype} compute (f32 weights and reductions)")
    if getattr(args, "accumulate", 1) > 1:
        out.append(f"{args.accumulate} micro-batches a step")
    if getattr(args, "checkpoint_activations", False):
        out.append("checkpointed blocks")
    return [", ".join(out)] if out else []


def weight_tolerance(args: argparse.Namespace) -> float:
    """Note [weight drift]: --weight-tolerance, else the compute dtype's default."""
    given = getattr(args, "weight_tolerance", None)
    return given if given is not None else WEIGHT_TOLERANCE[getattr(args, "dtype", "float32")]


def _losses(losses: list[float], reference: list[float], tolerance: float) -> bool:
    print(f"\n{'step':>4}  {'loss (sharded)':>14}  {'loss (1 device)':>15}  {'rel. diff':>9}")
    ok = len(losses) == len(reference)
    for step, (a, b) in enumerate(zip(losses, reference)):
        diff = abs(a - b) / max(abs(b), 1e-12)
        bad = not math.isfinite(a) or diff > tolerance
        ok &= not bad
        print(f"{step:>4}  {a:>14.6f}  {b:>15.6f}  {diff:>9.1e}{'  <-- differs' if bad else ''}")
    print(f"(tolerance {tolerance:g})")
    return ok


def _drift(drift: dict[str, float], tolerance: float) -> bool:
    name, worst = max(drift.items(), key=lambda kv: kv[1])
    ok = math.isfinite(worst) and worst <= tolerance
    print(f"trained weights vs one device's: largest |W - W_1dev| / |W_1dev - W_init| = "
          f"{worst:.1e} ({name}; tolerance {tolerance:g}){'' if ok else '  <-- differs'}")
    return ok


def _by_name(results: Sequence[Any]) -> dict[str, list[tuple]]:
    """Each parameter's rows from the ranks that hold it (under --pp, its stage's), in model
    order."""
    rows: dict[str, list[tuple]] = {}
    for r in results:
        for row in r.params:
            rows.setdefault(row[0], []).append(row)
    return rows


def _params(results: Sequence[Any]) -> None:
    print(f"\n{'parameter':<34} {'placements':<22} {'global shape':<14} "
          f"{'local (first)':<14} {'bytes/rank (min-max)':>20}")
    for name, rows in _by_name(results).items():
        _, placements, shape, local, _, _ = rows[0]
        sizes = [row[4] for row in rows]
        span = f"{min(sizes)}" if min(sizes) == max(sizes) else f"{min(sizes)}-{max(sizes)}"
        print(f"{name:<34} {placements:<22} {str(shape):<14} {str(local):<14} {span:>20}")


def _state(results: Sequence[Any]) -> None:
    total = {k: max(r.state[k] for r in results) for k in results[0].state}
    # what one rank would hold without any sharding: every parameter whole, its gradient,
    # and AdamW's two moments
    whole = sum(math.prod(rows[0][2]) * rows[0][5] for rows in _by_name(results).values())
    print(f"\nper-rank state (largest rank): parameters {_kb(total['parameters'])}, gradients "
          f"{_kb(total['gradients'])}, optimizer {_kb(total['optimizer'])}; "
          f"{sum(total.values()) / max(4 * whole, 1):.3f} of a replicated run's "
          f"{_kb(4 * whole)} (parameters + gradients + 2 AdamW moments)")


def _kb(n: float) -> str:
    return f"{n / 1024:.1f} KiB"


def mesh_dim_of(ranks: Sequence[int], shape: Sequence[int],
                names: Sequence[str] = ("dp", "tp")) -> str:
    """Which dims of the row-major mesh of ``shape`` a group of global ranks spans: the dims
    along which its ranks' coordinates differ, joined by '+' ("dp", "tp", "dp+cp"); "none"
    for a group of one rank."""
    coords = [_coordinate(r, shape) for r in ranks]
    spanned = [n for m, n in enumerate(names) if len({c[m] for c in coords}) > 1]
    return "+".join(spanned) or "none"


def _coordinate(rank: int, shape: Sequence[int]) -> tuple[int, ...]:
    out = []
    for size in reversed(shape):
        rank, c = divmod(rank, size)
        out.append(c)
    return tuple(reversed(out))


def collective_summary(args: argparse.Namespace, records: Sequence[Any]) -> list[dict]:
    """Per mesh dim and per training step, as seen by the busiest rank: collectives it takes
    part in, bytes it receives, and their estimated time one after another."""
    import simpg

    names, shape = mesh_dims(args)
    world = math.prod(shape)
    models = {"nvlink": simpg.CostModel.nvlink_node(max(8, world)),
              "infiniband": simpg.CostModel.infiniband_cluster(
                  ranks_per_node=_ranks_per_node(args))}
    # dim -> rank -> totals
    per_rank: dict[str, dict[int, dict]] = {}
    for rec in records:
        dim = mesh_dim_of(rec.ranks, shape, names)
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


def _ranks_per_node(args: argparse.Namespace) -> int:
    """tp and cp inside a node, the data-parallel dims across nodes (a world that fits one
    node is given two)."""
    in_node = args.tp_size * getattr(args, "cp_size", 1)
    world = math.prod(mesh_dims(args)[1])
    return in_node if world > in_node else in_node * 2


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
    summary = collective_summary(args, records)
    width = max([8] + [len(row["dim"]) for row in summary])
    print(f"{'mesh dim':<{width}} {'count':>6} {'bytes':>12}  {'NVLink node':>12} "
          f"{'IB cluster':>12}  ops")
    for row in summary:
        ops = ", ".join(f"{k} x{v:g}" for k, v in sorted(row["ops"].items()))
        print(f"{row['dim']:<{width}} {row['count']:>6g} {row['bytes']:>12.0f}  "
              f"{row['nvlink_s'] * 1e6:>10.1f}us {row['infiniband_s'] * 1e6:>10.1f}us  {ops}")
    timelines = [r.timeline for r in results if getattr(r, "timeline", None) is not None]
    if len(timelines) == len(results):
        from simpg.overlap import summary as modelled_step

        print("\nthe last step on a modelled device (simpg.overlap, Note [exposed communication]): "
              "compute and communication streams per rank, communication the compute does "
              "not hide is exposed; the slowest rank")
        print(modelled_step(timelines, ranks_per_node=_ranks_per_node(args)))
    if args.trace_file:
        model = simpg.CostModel.nvlink_node(max(8, math.prod(mesh_dims(args)[1])))
        from simpg.timeline import write_chrome_trace

        write_chrome_trace(records, args.trace_file, cost_model=model)
        print(f"\nPerfetto trace of {len(records)} collectives: {args.trace_file} "
              f"(open in https://ui.perfetto.dev)")
