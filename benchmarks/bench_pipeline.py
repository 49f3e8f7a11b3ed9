"""Pipeline schedules, ours (dtensor.pipelining) and torch's (torch.distributed.pipelining),
side by side on the same model and simulated ranks: each schedule's bubble, modelled step
time and peak live bytes per stage, next to the textbook bubble.

    .venv/bin/python benchmarks/bench_pipeline.py                 # 4 stages, 8 micro-batches
    .venv/bin/python benchmarks/bench_pipeline.py --stages 2 --microbatches 4 --quick

Each rank's second step is recorded (``simpg.steprecorder``) and played on a modelled H100
with NVLink between stages (``simpg.overlap``; Note [point-to-point in the model]): a rank's
bubble is the share of the step its compute stream waits, the figure is the mean over ranks.
The textbook bubble is (p - 1) / (v m + p - 1) for p ranks of v stages each and m
micro-batches, when every stage does equal work (zero-bubble schedules: 0, when a forward, an
input backward and a weight backward take equal time); "slowest rank" applies it as if every rank
did the slowest rank's measured work, which bounds the unequal stages' bubble from above (on
this small model kernels sit at the device's per-kernel floor, so the last stage's loss and
the first stage's backward, which needs no input gradient, make the ranks unequal). "Transfers free" replays the step with instant messages: the schedule's own
bubble; the next column adds NVLink's latency and bandwidth. Ours runs with
``static_shapes=True`` (torch's assumption, one header per channel); the default (a header
with every micro-batch, for uneven micro-batches) is the ``ours, per-micro-batch headers``
rows. Both libraries' losses and gradients equal each other (tests/pipelining).
"""

from __future__ import annotations

import argparse
import copy
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import simpg  # noqa: E402
from opdb_tests import readme_figures  # noqa: E402
from simpg.costmodel import CostModel, LinkModel  # noqa: E402
from simpg.overlap import DEVICES, interconnect, model_step  # noqa: E402
from simpg.steprecorder import record_step  # noqa: E402

SCHEDULES = [("ScheduleGPipe", 1), ("Schedule1F1B", 1), ("ScheduleLoopedBFS", 2),
             ("ScheduleInterleaved1F1B", 2), ("ScheduleInterleavedZeroBubble", 2),
             ("ScheduleZBVZeroBubble", 2), ("ScheduleDualPipeV", 2)]
ZERO_BUBBLE = {"ScheduleInterleavedZeroBubble", "ScheduleZBVZeroBubble", "ScheduleDualPipeV"}
# stages r and 2 pp - 1 - r on rank r
V_SHAPED = {"ScheduleZBVZeroBubble", "ScheduleDualPipeV"}
LIBS = ("ours", "ours, per-micro-batch headers", "torch")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--stages", type=int, default=4, help="pp ranks")
    p.add_argument("--microbatches", type=int, default=8)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--rows", type=int, default=16, help="rows per micro-batch")
    p.add_argument("--quick", action="store_true", help="a small model (the smoke test)")
    p.add_argument("--write-readme", action="store_true",
                   help="write the report into the README's bench-pipeline block")
    args = p.parse_args(argv)
    if args.quick:
        args.dim, args.rows = 32, 4
    return args


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.up = nn.Linear(dim, 4 * dim)
        self.down = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(x)))


def _loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(out, target)


# every message instant: what is left of the bubble is the schedule's order and the stages'
# unequal work (the first stage's backward needs no input gradient, the last adds the loss)
FREE_TRANSFERS = CostModel(LinkModel(latency_s=0.0, bandwidth_Bps=1e30), name="free")


def _bubble(est) -> float:
    return sum(s.exposed_s / s.step_s for s in est.ranks) / len(est.ranks)


@dataclass
class Row:
    step_us: float
    bubble: float  # mean over ranks of the share of the step the compute stream waits
    schedule_bubble: float  # the same with transfers free: the schedule's own bubble
    stages_textbook: float  # the textbook bubble for the stages' measured, unequal work
    peaks: list[int]  # peak live bytes per rank
    losses: list[float]


def run_schedule(args: argparse.Namespace, lib: str, name: str, v: int) -> Row:
    """One schedule of one library: the modelled second step."""
    import torch.distributed.pipelining as torch_pp

    import dtensor.pipelining as ours
    module = torch_pp if lib == "torch" else ours
    extra = {"static_shapes": True} if lib == "ours" else {}
    pp, m = args.stages, args.microbatches
    torch.manual_seed(0)
    blocks = [Block(args.dim) for _ in range(2 * pp)]  # the same model for every schedule
    per = 2 // v
    x, y = torch.randn(m * args.rows, args.dim), torch.randn(m * args.rows, args.dim)

    last_rank = 0 if name in V_SHAPED else pp - 1

    def rank() -> tuple:
        r, n = dist.get_rank(), pp * v
        mine = [r, n - 1 - r] if name in V_SHAPED else list(range(r, n, pp))
        stages = [module.PipelineStage(
            copy.deepcopy(nn.Sequential(*blocks[i * per:(i + 1) * per])), i, n,
            torch.device("cpu"), **extra) for i in mine]
        cls = getattr(module, name)
        schedule = cls(stages[0] if v == 1 else stages, m, loss_fn=_loss)
        losses: list = []

        def step() -> None:
            losses.clear()
            kwargs = {"target": y, "losses": losses} if r == last_rank else {}
            schedule.step(x, **kwargs) if r == 0 else schedule.step(**kwargs)

        step()  # torch infers shapes on its first step; both warm up
        with record_step(memory=True) as recorder:
            step()
            dist.barrier()  # every send delivered inside the block
        return recorder.timeline(), recorder.peak_live_bytes(), [float(t) for t in losses]

    results = simpg.run(rank, pp)
    timelines = [tl for tl, _, _ in results]
    est = model_step(timelines, DEVICES["h100"], interconnect("nvlink-node"))
    free = model_step(timelines, DEVICES["h100"], FREE_TRANSFERS)
    return Row(est.step_s * 1e6, _bubble(est), _bubble(free), textbook_for(free, pp, m, v),
               [p for _, p, _ in results],
               [v for _, _, ls in results for v in ls])


def textbook(pp: int, m: int, v: int) -> float:
    """The idle share of equal stages: (p - 1) / v slots of a rank's work against m busy."""
    return (pp - 1) / (v * m + pp - 1)


def textbook_for(est, pp: int, m: int, v: int) -> float:
    """The textbook step of the slowest rank's work, c_max (v m + p - 1) / (v m), and each
    rank's idle share of it: an upper bound on the bubble of these unequal stages."""
    c_max = max(r.compute_s for r in est.ranks)
    step = c_max * (v * m + pp - 1) / (v * m)
    return sum(1 - r.compute_s / step for r in est.ranks) / len(est.ranks)


def compare(args: argparse.Namespace) -> dict[tuple[str, str], Row]:
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's pipelining warns about its own internals
        return {(name, lib): run_schedule(args, lib, name, v)
                for name, v in SCHEDULES for lib in LIBS}


def print_report(args: argparse.Namespace, rows: dict[tuple[str, str], Row],
                 command: str) -> None:
    pp, m = args.stages, args.microbatches
    print(f"{pp} pp ranks (v stages each), {2 * pp} MLP blocks, {m} micro-batches of "
          f"{args.rows} rows, model dim {args.dim}; modelled on h100 + nvlink-node; "
          f"`{command}`\n")
    print("| schedule | v | textbook bubble, equal stages / slowest rank | bubble, transfers "
          "free, ours / torch | bubble ours / torch | step (us) ours / torch | ratio | step, "
          "per-micro-batch headers (us) | peak live bytes per rank, ours / torch |")
    print("|---|---:|---|---|---|---|---:|---:|---|")
    for name, v in SCHEDULES:
        a, h, t = rows[(name, "ours")], rows[(name, LIBS[1])], rows[(name, "torch")]
        peaks = ", ".join(f"{x:,} / {y:,}" for x, y in zip(a.peaks, t.peaks))
        ideal = 0.0 if name in ZERO_BUBBLE else textbook(pp, m, v)
        print(f"| {name} | {v} | {ideal:.3f} / {a.stages_textbook:.3f} | "
              f"{a.schedule_bubble:.3f} / "
              f"{t.schedule_bubble:.3f} | {a.bubble:.3f} / {t.bubble:.3f} | "
              f"{a.step_us:,.0f} / {t.step_us:,.0f} | {a.step_us / t.step_us:.2f} | "
              f"{h.step_us:,.0f} | {peaks} |")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    command = " ".join([".venv/bin/python", "benchmarks/bench_pipeline.py", *argv])
    rows = compare(args)
    with readme_figures.tee() as report:
        print_report(args, rows, command)
    if args.write_readme:
        readme_figures.write_readme("bench-pipeline", report.getvalue().strip(), command)


if __name__ == "__main__":
    main()
