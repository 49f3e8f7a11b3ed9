"""Whole-graph sharding (dtensor.graph) against eager propagation, the hand-written
tensor-parallel plan and plain replication: bytes per training step on a 2x4 mesh.

    .venv/bin/python benchmarks/bench_graph.py            # 2 layers each
    .venv/bin/python benchmarks/bench_graph.py --quick    # 1 layer each, shorter sequences
    .venv/bin/python benchmarks/bench_graph.py --layers 12 --infer-only   # inference time only
    .venv/bin/python benchmarks/bench_graph.py --llama7b                  # 32 layers, meta

A step is forward, loss, backward, with each gradient ending laid out like its parameter
(complete over the batch: as one device would have it). Only two values are annotated: the
token ids, batch-sharded over mesh dim 0 (``[S(0),R]``), and the token embedding,
vocabulary-sharded over mesh dim 1 (``[R,S(0)]``). Rows:

- replicated: every other parameter Replicate (data parallel over dim 0), the rest inferred;
- eager: our DTensors from the same annotations (other parameters Replicate), the model run
  op by op, each op choosing its cheapest strategy as it comes (the runtime's propagation);
  gradients then moved to their parameters' placements;
- hand TP: ``tp_plan`` (tensor + sequence + loss parallel) over mesh dim 1 and ``replicate``
  (gradient all-reduce) over mesh dim 0, each dim-0 rank its rows of the batch;
- inferred: ``dtensor.graph.infer`` on the captured training step, run by
  ``dtensor.graph.run``, with the default objective (bytes plus compute at
  ``COMPUTE_WEIGHT`` bytes per FLOP, Note [compute in the objective]);
- inferred, bytes only: the same with ``compute_weight=0``;
- inferred, applied eagerly: the inferred plan handed to the eager module
  (``plan.to_parallelize_plan().apply``): its parameter and input layouts, and each aten call
  of the step (forward, loss, backward) made with the plan's strategy inside
  ``with following(model):`` (Note [following a plan in eager code]); the note counts the
  calls matched to the plan and those that were not;
- inferred, applied eagerly, no following(): the same without the context manager: the
  module's forward and backward follow the plan, the loss between them is propagation's;
- inferred, applied eagerly, op by op: the same layouts with ``apply(..., follow=False)``,
  every intermediate chosen by propagation (what ``apply`` did before it followed calls).

"FLOPs/rank" is measured while each row runs: the matmul and attention FLOPs (the formulas
of ``dtensor.graph.compute``) of the local ops the most loaded rank runs, and in brackets
their share of one device's; 1/8 = 12.5% is a full split over the 8 ranks. "params/rank" is
the parameter bytes the most loaded rank holds (one device: the whole model).

Bytes are what simpg's trace records (bytes received, summed over all ranks, ring
algorithms); for the graph rows the plan's own figure (the planner's) is printed next to
them. "max rel. err" compares the loss and every gradient with one device. Inference time
is capture excluded (Problem + search), on this machine.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `examples` is not an installed package: run from anywhere
    sys.path.insert(0, str(ROOT))

import dtensor  # noqa: E402
import simpg  # noqa: E402
from dtensor import Replicate, Shard  # noqa: E402
from dtensor.graph import Problem, ShardSpec, ShardingPlan, capture_train_step, run, solve  # noqa: E402
from dtensor.graph.compute import FORMULAS, local_shape, op_flops  # noqa: E402
from examples.models import bert, llama  # noqa: E402

from opdb_tests import readme_figures  # noqa: E402

try:  # run as a script, benchmarks/ is on sys.path; loaded by the tests, the root is
    import conditions  # noqa: E402
except ImportError:
    from benchmarks import conditions  # noqa: E402

MESH = (2, 4)
# what the spread line says: bytes and FLOPs are counted; only inference is timed, once
NO_ROUNDS = ("none: bytes, FLOPs and parameter bytes are counted, the same on every run; "
             "inference seconds are one run each")
R = Replicate()


@dataclass
class Case:
    name: str
    model: torch.nn.Module
    loss_fn: Callable
    embedding: str
    tokens: torch.Tensor
    targets: torch.Tensor


def make_case(name: str, layers: int, seq: int, batch: int) -> Case:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    if name == "bert":  # BERT-base widths; a smaller vocabulary than BERT's 30522
        cfg = bert.BertConfig(vocab_size=8192, dim=768, n_layers=layers, n_heads=12,
                              ffn_hidden=3072, max_seq_len=seq)
        model = bert.Bert(cfg)
        tokens = torch.randint(0, cfg.vocab_size, (batch, seq), generator=g)
        inputs, labels = bert.mask_tokens(tokens, cfg, g)
        return Case(name, model, bert.mlm_loss, "embeddings.tok.weight", inputs, labels)
    cfg = llama.config("small", n_layers=layers, max_seq_len=seq)
    model = llama.Llama(cfg)
    tokens = torch.randint(0, cfg.vocab_size, (batch, seq + 1), generator=g)
    return Case(name, model, llama.loss_fn, "tok_embeddings.weight", tokens[:, :-1],
                tokens[:, 1:].contiguous())


def annotations(case: Case) -> dict[str, ShardSpec]:
    return {"input0": ShardSpec([Shard(0), R]), case.embedding: ShardSpec([R, Shard(0)])}


def flat_inputs(case: Case) -> list[torch.Tensor]:
    state = list(case.model.parameters()) + list(case.model.buffers())
    return [t.detach() for t in state] + [case.tokens, case.targets]


# -- graph rows ------------------------------------------------------------------------------------
def graph_plans(case: Case) -> tuple[Any, dict[str, ShardingPlan], float]:
    graph = capture_train_step(case.model, case.loss_fn, [case.tokens], [case.targets])
    start = time.perf_counter()
    problem = Problem(graph, MESH, annotations(case))
    inferred = ShardingPlan(problem, solve(problem, method="heuristic"))
    seconds = time.perf_counter() - start
    bytes_problem = Problem(graph, MESH, annotations(case), compute_weight=0)
    bytes_only = ShardingPlan(bytes_problem, solve(bytes_problem, method="heuristic"))
    fixed = annotations(case) | {n: ShardSpec([R, R]) for n, _ in case.model.named_parameters()
                                 if n != case.embedding}
    rep_problem = Problem(graph, MESH, fixed, compute_weight=0)
    replicated = ShardingPlan(rep_problem, solve(rep_problem, method="heuristic"))
    return graph, {"replicated": replicated, "inferred": inferred,
                   "bytes only": bytes_only}, seconds


def plan_param_bytes(case: Case, plan: ShardingPlan) -> int:
    return sum(math.prod(local_shape(p.shape, plan.placements(n), MESH)) * p.element_size()
               for n, p in case.model.named_parameters())


class FlopCount(TorchDispatchMode):
    """Matmul and attention FLOPs of the local ops this thread runs (its rank's): a DTensor
    call is declined (NotImplemented), so the mode sees the plain-tensor ops the runtime runs
    on each piece; shape inference on meta tensors is skipped."""

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any(t is not torch.Tensor for t in types):
            return NotImplemented
        kwargs = kwargs or {}
        if func in FORMULAS:
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            if all(t.device.type != "meta" for t in tensors):
                self.flops += op_flops(func, (), {}, [tuple(t.shape) for t in tensors], [])
        return func(*args, **kwargs)


def run_plan(plan: ShardingPlan, flat: list[torch.Tensor]
             ) -> tuple[int, int, list[torch.Tensor]]:
    def body():
        mesh = dtensor.init_device_mesh("cpu", MESH)
        with simpg.trace() as t, FlopCount() as fc:
            outs = run(plan, mesh, *flat)
        return _mine(t.records), fc.flops, [o.full_tensor() for o in outs]

    results = simpg.run(body, math.prod(MESH), timeout=600)
    return sum(r[0] for r in results), max(r[1] for r in results), results[0][2]


def _mine(records) -> int:
    import torch.distributed as dist

    rank = dist.get_rank()
    return sum(r.bytes_received[r.ranks.index(rank)] for r in records)


# -- eager row -------------------------------------------------------------------------------------
def run_eager(case: Case) -> tuple[int, list[torch.Tensor]]:
    from torch.func import functional_call

    def body():
        import copy

        mesh = dtensor.init_device_mesh("cpu", MESH)
        specs = annotations(case)
        model = copy.deepcopy(case.model)  # functional_call swaps a module's tensors in place
        state = {}
        for n, p in list(model.named_parameters()) + list(model.named_buffers()):
            pl = specs[n].placements if n in specs else (R, R)
            t = dtensor.distribute_tensor(p.detach(), mesh, pl, src_data_rank=None)
            state[n] = t.requires_grad_() if p.requires_grad else t
        tokens = dtensor.distribute_tensor(case.tokens, mesh, [Shard(0), R], src_data_rank=None)
        targets = dtensor.distribute_tensor(case.targets, mesh, [Shard(0), R],
                                            src_data_rank=None)
        params = [t for n, t in state.items() if t.requires_grad]
        with simpg.trace() as t, FlopCount() as fc:
            loss = case.loss_fn(functional_call(model, state, (tokens,)), targets)
            loss = loss.redistribute(mesh, [R, R])
            loss.to_local().backward()
            grads = [p.grad.redistribute(mesh, p.placements) for p in params]
        held = sum(p.to_local().numel() * p.element_size() for p in params)
        return (_mine(t.records), fc.flops, held,
                [loss.full_tensor()] + [g.full_tensor() for g in grads])

    return _gather(simpg.run(body, math.prod(MESH), timeout=600))


def _gather(results) -> tuple[int, int, int, list[torch.Tensor]]:
    """(bytes summed over ranks, the most loaded rank's FLOPs and parameter bytes, rank 0's
    outputs)."""
    return (sum(r[0] for r in results), max(r[1] for r in results),
            max(r[2] for r in results), results[0][3])


def run_eager_plan(case: Case, plan: ShardingPlan, follow: str = "step"
                   ) -> tuple[int, int, int, list[torch.Tensor], str]:
    """The inferred plan handed back to the eager module (``plan.to_parallelize_plan()``,
    Note [plans in eager code]): its parameter and input layouts, and ``follow``: "step"
    (every call as planned, ``following``), "module" (the module's forward and backward
    as planned) or "off" (op-by-op propagation). The last item: what the follower matched
    (rank 0)."""
    import contextlib

    from dtensor.graph import EagerPlan, following

    eager = plan.to_parallelize_plan()

    def body():
        import copy

        mesh = dtensor.init_device_mesh("cpu", MESH)
        model = eager.apply(copy.deepcopy(case.model), mesh, follow=follow != "off")
        targets = dtensor.distribute_tensor(case.targets, mesh, plan.placements("target0"),
                                            src_data_rank=None)
        step = following(model) if follow == "step" else contextlib.nullcontext()
        with simpg.trace() as t, FlopCount() as fc, step:
            loss = case.loss_fn(model(case.tokens), targets)
            loss = loss.redistribute(mesh, [R, R])
            loss.to_local().backward()
        params = list(model.parameters())
        held = sum(p.to_local().numel() * p.element_size() for p in params)
        report = EagerPlan.report(model) if follow != "off" else None
        followed = "" if report is None else (
            f"; {report.matched} of {len(eager.ops)} planned calls followed, "
            f"{sum(report.unplanned.values())} unplanned "
            f"({', '.join(sorted(report.unplanned)) or 'none'}), not run: "
            f"{', '.join(f'{k} x{n}' for k, n in sorted(report.not_run.items())) or 'none'}; "
            f"{sum(report.outputs_moved.values())} results moved")
        return (_mine(t.records), fc.flops, held,
                [loss.full_tensor()] + [p.grad.full_tensor() for p in params], followed)

    results = simpg.run(body, math.prod(MESH), timeout=600)
    return (*_gather(results), results[0][4])


# -- hand-written plan -----------------------------------------------------------------------------
def run_hand(case: Case) -> tuple[int, list[torch.Tensor]]:
    from dtensor.parallel import loss_parallel, parallelize_module, replicate

    models = {"bert": bert, "llama": llama}

    def body():
        import copy

        import torch.distributed as dist

        mesh = dtensor.init_device_mesh("cpu", MESH, mesh_dim_names=("dp", "tp"))
        model = copy.deepcopy(case.model)
        parallelize_module(model, mesh["tp"], models[case.name].tp_plan(model.config),
                           src_data_rank=None)
        replicate(model, mesh["dp"])
        dp, n = mesh.get_local_rank("dp"), MESH[0]
        rows = slice(dp * case.tokens.shape[0] // n, (dp + 1) * case.tokens.shape[0] // n)
        # the loss is a mean over the counted targets (BERT: the masked ones, which the dp
        # ranks hold different numbers of); ``replicate`` averages the dp ranks' gradients,
        # so each rank's mean is weighted by its share of the global count: the average of
        # the weighted means is the global mean
        counted = case.targets != bert.IGNORE if case.name == "bert" else case.targets >= 0
        scale = float(counted[rows].sum()) * n / float(counted.sum())
        with simpg.trace() as t, FlopCount() as fc:
            with loss_parallel():
                loss = case.loss_fn(model(case.tokens[rows]), case.targets[rows]) * scale
                loss.backward()
        loss = loss.full_tensor() if hasattr(loss, "full_tensor") else loss
        loss = loss.detach().reshape(1)
        dist.all_reduce(loss, group=mesh.get_group("dp"))
        grads = [p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad
                 for p in model.parameters()]
        held = sum((p.to_local() if hasattr(p, "to_local") else p).numel() * p.element_size()
                   for p in model.parameters())
        return _mine(t.records), fc.flops, held, [loss[0] / n] + grads

    return _gather(simpg.run(body, math.prod(MESH), timeout=600))


# -- table -----------------------------------------------------------------------------------------
def max_rel_err(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    worst = 0.0
    for a, b in zip(got, want, strict=True):
        a, b = a.detach().double(), b.detach().double()
        # a floor: some gradients are exactly 0 in exact arithmetic (a key bias under
        # softmax) and only rounding noise on one device
        worst = max(worst, float((a - b).abs().max() / (b.abs().max() + 1e-6)))
    return worst


Row = tuple[str, int, int, int, str, float]  # label, bytes, FLOPs/rank, params/rank, ...


def bench(case: Case) -> tuple[int, list[Row]]:
    """One device's matmul FLOPs, and the rows of the table."""
    graph, plans, seconds = graph_plans(case)
    flat = flat_inputs(case)
    with FlopCount() as fc:
        reference = list(graph(*flat))
    rows: list[Row] = []

    def graph_row(label: str, plan: ShardingPlan, note: str) -> None:
        got, flops, outs = run_plan(plan, flat)
        rows.append((label, got, flops, plan_param_bytes(case, plan),
                     f"plan {plan.total_bytes}{note}", max_rel_err(outs, reference)))

    graph_row("replicated", plans["replicated"], "")
    got, flops, held, outs = run_eager(case)
    rows.append(("eager propagation", got, flops, held, "", max_rel_err(outs, reference)))
    got, flops, held, outs = run_hand(case)
    rows.append(("hand TP (tp_plan + replicate)", got, flops, held, "",
                 max_rel_err(outs, reference)))
    graph_row("inferred, bytes only", plans["bytes only"], "")
    graph_row("inferred", plans["inferred"], f", inference {seconds:.1f} s")
    for follow, label in (("step", "inferred, applied eagerly"),
                          ("module", "inferred, applied eagerly, no following()"),
                          ("off", "inferred, applied eagerly, op by op")):
        got, flops, held, outs, followed = run_eager_plan(case, plans["inferred"], follow)
        rows.append((label, got, flops, held,
                     f"{got / max(plans['inferred'].total_bytes, 1):.2f}x the plan{followed}",
                     max_rel_err(outs, reference)))
    return fc.flops, rows


def infer_time(name: str, layers: int, seq: int, batch: int
               ) -> tuple[float, float, int, ShardingPlan]:
    case = make_case(name, layers, seq, batch)
    start = time.perf_counter()
    graph = capture_train_step(case.model, case.loss_fn, [case.tokens], [case.targets])
    captured = time.perf_counter() - start
    start = time.perf_counter()
    problem = Problem(graph, MESH, annotations(case))
    solution = solve(problem, method="heuristic")
    seconds = time.perf_counter() - start
    return captured, seconds, len(graph.gm.graph.nodes), ShardingPlan(problem, solution)


LLAMA_7B = dict(vocab_size=32000, dim=4096, n_heads=32, n_kv_heads=32, ffn_hidden=11008,
                max_seq_len=2048)


def llama7b(layers: int, batch: int, seq: int, budgets: list[float]) -> None:
    """A Llama-7B-shaped training step (meta tensors: shapes only) planned by
    ``infer_by_depth`` (Note [planning by depth]) with AdamW captured in the step (its two
    states per parameter placed by the plan and counted in the memory), free and under each
    budget (GB per rank)."""
    from dtensor.graph import AdamW, GraphShardingError, infer_by_depth

    def build(n: int) -> torch.nn.Module:
        with torch.device("meta"):
            return llama.Llama(llama.LlamaConfig(n_layers=n, **LLAMA_7B))

    tokens = torch.zeros(batch, seq, dtype=torch.long, device="meta")
    start = time.perf_counter()  # a process's first trace pays make_fx's one-time setup
    capture_train_step(build(1), llama.loss_fn, [tokens], [tokens])
    print(f"first capture in this process (1 layer, warm-up, not in the table): "
          f"{time.perf_counter() - start:.1f} s")
    ann = {"input0": ShardSpec([Shard(0), R]), "tok_embeddings.weight": ShardSpec([R, Shard(0)])}
    print(f"\n## Llama-7B shapes, {layers} layers, batch {batch} x {seq} tokens, mesh {MESH}, "
          "AdamW in the step\n")
    print("| memory budget / rank | capture + inference (wall, CPU) | bytes/step (plan) "
          "| FLOPs/rank | memory/rank: params+grads+AdamW, inputs, activations | params sharded |")
    print("|---|---:|---:|---:|---|---:|")
    for budget in [None, *budgets]:
        start, cpu = time.perf_counter(), time.process_time()
        try:
            plan = infer_by_depth(build, layers, llama.loss_fn, [tokens], [tokens], MESH, ann,
                                  memory_budget=None if budget is None else int(budget * 1e9),
                                  optimizer=AdamW())
        except GraphShardingError as e:  # a budget below what any layout reaches
            print(f"| {budget:g} GB | {time.perf_counter() - start:.1f} s | {e} | | | |")
            continue
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
        m = plan.memory
        sharded = sum(any(isinstance(p, Shard) for p in pl) for pl in plan.parameters.values())
        parts = ", ".join(f"{k} {v:.1f}" for k, v in plan.seconds.items())
        print(f"| {'none' if budget is None else f'{budget:g} GB'} | {seconds:.1f} s, "
              f"{cpu:.1f} s CPU ({parts}) "
              f"| {plan.total_bytes / 1e9:,.1f} GB | {plan.flops_per_rank / plan.whole_flops:.1%} "
              f"| {m.total / 1e9:.1f} GB: {m.parameters / 1e9:.1f}, {m.inputs / 1e9:.2f}, "
              f"{m.activations / 1e9:.1f} | {sharded} of {len(plan.parameters)} |")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="1 layer, sequences of 16")
    p.add_argument("--layers", type=int, help="layers per model (default 2; 1 quick)")
    p.add_argument("--seq", type=int, help="tokens per sequence (default 32; 16 quick)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--models", default="bert,llama")
    p.add_argument("--infer-only", action="store_true",
                   help="only time capture and inference (e.g. --layers 12)")
    p.add_argument("--llama7b", action="store_true",
                   help="plan a 32-layer Llama-7B-shaped step (meta tensors) by depth probes")
    p.add_argument("--budgets", default="",
                   help="with --llama7b: memory budgets in GB per rank, comma-separated")
    p.add_argument("--write-readme", action="store_true",
                   help="write the report into the README's bench-graph block")
    argv = sys.argv[1:] if argv is None else argv
    args = p.parse_args(argv)
    command = " ".join([".venv/bin/python", "benchmarks/bench_graph.py", *argv])
    machine = conditions.Conditions()
    with readme_figures.tee() as report:
        _report(args)
        print(f"\n{machine.footer(NO_ROUNDS)}")
    if args.write_readme:
        readme_figures.write_readme("bench-graph", report.getvalue().strip(), command)


def _report(args: argparse.Namespace) -> None:
    layers = args.layers or (1 if args.quick else 2)
    seq = args.seq or (16 if args.quick else 32)
    logging.getLogger("torch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    if args.llama7b:
        print(f"# dtensor.graph at model scale\ntorch {torch.__version__}, {os.cpu_count()} "
              f"cores, {time.strftime('%Y-%m-%dT%H:%M:%S')}")
        budgets = [float(b) for b in args.budgets.split(",") if b]
        llama7b(args.layers or 32, args.batch, args.seq or 2048, budgets)
        return
    print(f"# dtensor.graph: bytes and compute per training step on mesh {MESH}, "
          f"{layers} layer(s), batch {args.batch} x {seq} tokens")
    print(f"torch {torch.__version__}, {os.cpu_count()} cores, "
          f"{time.strftime('%Y-%m-%dT%H:%M:%S')}")
    for name in args.models.split(","):
        if args.infer_only:
            cap, inf, nodes, plan = infer_time(name, layers, seq, args.batch)
            print(f"{name}: {nodes} graph nodes, capture {cap:.1f} s, inference {inf:.1f} s; "
                  f"plan {plan.total_bytes:,} bytes, the most loaded rank "
                  f"{plan.flops_per_rank / plan.whole_flops:.1%} of one device's FLOPs")
            continue
        case = make_case(name, layers, seq, args.batch)
        whole, rows = bench(case)
        params = sum(p.numel() * p.element_size() for p in case.model.parameters())
        print(f"\n## {name}: one device {whole:,} matmul FLOPs, {params:,} parameter bytes\n")
        print("| configuration | bytes/step (simpg) | FLOPs/rank (share) | params/rank | notes "
              "| max rel. err vs 1 device |")
        print("|---|---:|---:|---:|---|---:|")
        for label, got, flops, held, note, err in rows:
            print(f"| {label} | {got:,} | {flops:,} ({flops / whole:.1%}) | {held:,} | {note} "
                  f"| {err:.1e} |")


if __name__ == "__main__":
    main()
