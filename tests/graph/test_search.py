"""dtensor.graph search moves (Note [graph sharding search]): a move is priced by the edges
of the units it changed, exactly the whole cost's change; reshard repair finds chains of
changes no single-unit move can; group moves re-decide only what they reach. No threads."""

from __future__ import annotations

import importlib
import random

import pytest
import torch

from dtensor import Replicate, Shard
from dtensor.graph import Problem, ShardSpec, capture_train_step, solve
from examples.models import llama

search = importlib.import_module("dtensor.graph.infer")  # the package exports infer()
R = Replicate()


@pytest.fixture(scope="module")
def llama_problem() -> Problem:
    cfg = llama.config("tiny", dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_hidden=48,
                       vocab_size=256, max_seq_len=8)
    torch.manual_seed(0)
    tokens = torch.randint(0, cfg.vocab_size, (4, 8))
    g = capture_train_step(llama.Llama(cfg), llama.loss_fn, [tokens], [tokens.roll(-1, 1)])
    return Problem(g, (2, 2), {"input0": ShardSpec([Shard(0), R]),
                               "tok_embeddings.weight": ShardSpec([R, Shard(0)])})


def test_a_moves_price_is_the_change_of_the_whole_cost(llama_problem):
    p = llama_problem
    rng = random.Random(0)
    choice = search.greedy(p, {})
    free = [u.id for u in p.units if len(u.options) > 1]
    for _ in range(60):
        uid = rng.choice(free)
        move = {uid: rng.randrange(len(p.units[uid].options))}
        both = rng.random() < 0.5
        new, changed = search._redecide(p, choice, move, consumers_only=both, limit=None)
        assert all(new[i] == choice[i] for i in range(len(choice)) if i not in changed)
        delta = search._set_cost(p, new, changed) - search._set_cost(p, choice, changed)
        assert delta == pytest.approx(p.cost(new) - p.cost(choice), abs=1e-3)
        choice = new


def test_repair_finds_chains_that_single_unit_moves_miss(llama_problem):
    p = llama_problem
    stuck = search.improve(p, search.greedy(p, {}), max_sweeps=50)
    assert search.improve(p, stuck) == stuck, "no single-unit move improves it"
    stage: dict[int, str] = {}
    repaired = search.repair(p, stuck, stage)
    assert p.cost(repaired) < p.cost(stuck)
    assert "reshard repair" in stage.values()


def test_group_moves_decide_again_as_a_whole_greedy_pass_would(llama_problem):
    # a move's chain under consumers_only is what a greedy pass with the moved units fixed
    # (and every other input kept) decides, unit for unit
    p = llama_problem
    base = search.greedy(p, {})
    inputs = {u.id: base[u.id] for u in p.units if u.kind == "input"}
    for members in search.groups(p)[:6]:
        for o in range(len(p.units[members[0]].options)):
            move = {m: o for m in members}
            new, _ = search._redecide(p, base, move, consumers_only=True, limit=None)
            assert new == search.greedy(p, inputs | move)


def test_the_heuristic_keeps_no_move_that_raises_the_cost(llama_problem):
    p = llama_problem
    greedy = solve(p, method="greedy")
    best = solve(p, method="heuristic")
    assert best.cost <= greedy.cost
    assert p.cost(best.choice) == pytest.approx(best.cost)
