"""Split rules (Note [split rules] in dtensor/layout.py): ``Shard(d, sizes="balanced")`` and
``Shard(d, sizes=(3, 5, 0, 2))`` through the layout, the planner (at the brute-force byte
minimum), redistribute, ``distribute_tensor`` / ``from_local`` / ``full_tensor``, ops and
autograd, equal to one device, with clear errors for sizes that do not cut the tensor."""

from __future__ import annotations

import itertools
import pickle
import traceback

import pytest
import torch

import simpg
from dtensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from dtensor.debug import CommDebugMode
from dtensor.layout import check_layout, local_shape, split_bounds
from dtensor.placements import (PlacementError, PlacementTypeError, has_split_rule,
                                normalize_placements)
from dtensor.redistribute.planner import plan, plan_bytes
from tests.redistribute.test_planner import brute_force_edges, cheapest, integer_valued, run_plan
from tests.support.mesh_world import run_on_mesh

R = Replicate()
EXPLICIT = Shard(0, sizes=(3, 5, 0, 2))
BALANCED = Shard(0, sizes="balanced")


# -- the placement and the layout --------------------------------------------------------------

def test_a_split_rule_is_a_value_that_prints_and_pickles():
    a = Shard(0, sizes=[3, 5, 0, 2])
    assert a == EXPLICIT and hash(a) == hash(EXPLICIT) and a != Shard(0) and a.sizes == (3, 5, 0, 2)
    assert eval(repr(a)) == a and str(a) == "S(0)[3,5,0,2]" and str(BALANCED) == "S(0)[balanced]"
    assert pickle.loads(pickle.dumps(a)) == a and pickle.loads(pickle.dumps(Shard(1))) == Shard(1)
    assert normalize_placements([Shard(-2, sizes=(1, 2))], 2, 1) == (Shard(0, sizes=(1, 2)),)


@pytest.mark.parametrize("bad", [(1, -1), (1.5, 2), "even", (), (True, 1)])
def test_bad_sizes_are_refused_at_construction(bad):
    with pytest.raises(PlacementTypeError, match="one size >= 0 per rank"):
        Shard(0, sizes=bad)


def test_split_bounds_follow_each_rule():
    assert [split_bounds(5, 4, i) for i in range(4)] == [(0, 2), (2, 4), (4, 5), (5, 5)]
    assert [split_bounds(5, 4, i, "balanced") for i in range(4)] == [(0, 2), (2, 3), (3, 4),
                                                                       (4, 5)]
    assert [split_bounds(10, 4, i, (3, 5, 0, 2)) for i in range(4)] == [(0, 3), (3, 8), (8, 8),
                                                                          (8, 10)]
    # nested: the inner mesh dim cuts each piece the outer one left
    shapes = [local_shape((10, 4), (2, 2), (Shard(0, sizes=(6, 4)), Shard(0, sizes="balanced")),
                          (i, j)) for i in range(2) for j in range(2)]
    assert shapes == [(3, 4), (3, 4), (2, 4), (2, 4)]


def test_sizes_that_do_not_cut_the_extent_name_the_placement_and_the_extent():
    with pytest.raises(PlacementError, match=r"expected 4 sizes summing to 9"):
        local_shape((9, 4), (4,), (EXPLICIT,), (0,))
    # nested explicit sizes must fit every piece the outer mesh dim leaves (5 and 5 here)
    with pytest.raises(PlacementError, match="summing to 5"):
        local_shape((10,), (2, 2), (Shard(0), Shard(0, sizes=(4, 2))), (1, 0))


# -- the planner: the cheapest plan, proven against brute force --------------------------------

SIZED_UNIVERSES = [
    ((4,), (8, 4), [Shard(0), Shard(1), R, Partial(), Shard(0, sizes=(1, 4, 0, 3)),
                    Shard(0, sizes="balanced"), Shard(1, sizes=(0, 2, 1, 1))]),
    ((4,), (7, 5), [Shard(0), Shard(1), R, Partial(), Shard(0, sizes="balanced"),
                    Shard(1, sizes="balanced"), Shard(0, sizes=(4, 0, 0, 3))]),
    ((2, 2), (8, 4), [Shard(0), Shard(1), R, Partial(), Shard(0, sizes=(5, 3)),
                      Shard(1, sizes="balanced")]),
]


@pytest.mark.parametrize("mesh, shape, universe", SIZED_UNIVERSES,
                         ids=[f"mesh{m}-shape{s}" for m, s, _ in SIZED_UNIVERSES])
def test_plans_between_split_rules_cost_what_brute_force_finds(mesh, shape, universe,
                                                                monkeypatch):
    """Every pair, against brute force over chunk Shards, R, P and the pair's own split rules
    (the planner's universe: it does not search through a third rule)."""
    import tests.redistribute.test_planner as brute

    base = [p for p in universe if not has_split_rule([p])]
    rules = [p for p in universe if has_split_rule([p])]
    lists = brute.valid_lists

    def fitting(mesh):  # the lists whose explicit sizes cut the tensor everywhere
        out = []
        for ps in lists(mesh):
            try:
                check_layout(shape, mesh, ps)
            except PlacementError:
                continue
            out.append(ps)
        return out

    monkeypatch.setattr(brute, "valid_lists", fitting)
    full = integer_valued(shape, torch.float32)
    wrong, checked = [], 0
    for k in range(len(rules) + 1):
        for chosen in itertools.combinations(rules, k):
            if k > 2:
                continue  # a pair holds two rules at most on a 1-d mesh, two dims on 2-d
            monkeypatch.setattr(brute, "UNIVERSE", base + list(chosen))
            edges = brute_force_edges(mesh, shape)
            for src in edges:
                best = cheapest(edges, src)
                for dst in edges:
                    if set(_rules_of(src + dst)) != set(chosen):
                        continue  # checked under its own universe
                    checked += 1
                    steps, _ = run_plan(full, src, dst, mesh)  # checks every rank's piece
                    got = (plan_bytes(steps, mesh, shape), sum(s.is_collective for s in steps))
                    if got != best[dst]:
                        wrong.append(f"{src}->{dst}: planner {got} {[str(s) for s in steps]}, "
                                     f"brute force {best[dst]}")
    assert checked and not wrong, "\n".join(wrong)


def _rules_of(placements):
    return [p for p in placements if has_split_rule([p])]


def test_moving_between_rules_receives_only_the_missing_rows():
    # chunk (3, 3, 3, 1) -> (3, 5, 0, 2) of 10 x 6 float32: every rank receives exactly the
    # rows of its new piece it does not hold
    steps = plan([Shard(0)], [EXPLICIT], (4,), (10, 6))
    assert [s.kind for s in steps] == ["all_to_all"]
    # rank 1 needs rows 3..8 and holds 3..6 (3 rows), rank 3 needs 8..10 and holds 9 (1 row)
    assert plan_bytes(steps, (4,), (10, 6)) == (2 + 1) * 6 * 4
    assert [s.kind for s in plan([R], [EXPLICIT], (4,), (10, 6))] == ["local_slice"]


# -- the runtime on simulated ranks ------------------------------------------------------------

def _round_trips(mesh):
    torch.manual_seed(0)
    x = torch.randn(10, 6)
    d = distribute_tensor(x, mesh, [EXPLICIT])
    rank = mesh.get_coordinate()[0]
    assert d.to_local().shape == (EXPLICIT.sizes[rank], 6)
    assert torch.equal(d.to_local(), x[sum(EXPLICIT.sizes[:rank]):sum(EXPLICIT.sizes[:rank + 1])])
    assert torch.equal(d.full_tensor(), x)
    for target in ([Shard(1)], [Shard(0)], [BALANCED], [R], [Shard(1, sizes=(1, 2, 3, 0))]):
        e = d.redistribute(mesh, target)
        assert e.placements == tuple(target)
        assert torch.equal(e.full_tensor(), x), target
        assert torch.equal(e.redistribute(mesh, [EXPLICIT]).to_local(), d.to_local())
    # from_local: the global shape from the explicit sizes, or measured
    assert torch.equal(DTensor.from_local(d.to_local(), mesh, [EXPLICIT]).full_tensor(), x)
    measured = DTensor.from_local(d.to_local(), mesh, [Shard(0, sizes="measured")])
    assert measured.placements == (EXPLICIT,) and torch.equal(measured.full_tensor(), x)
    checked = DTensor.from_local(d.to_local(), mesh, [EXPLICIT], run_check=True)
    assert checked.shape == (10, 6)
    return True


def test_distribute_redistribute_from_local_and_full_tensor_round_trip():
    assert all(run_on_mesh((4,), _round_trips))


def _ops_keep_the_rule(mesh):
    torch.manual_seed(0)
    x, w = torch.randn(10, 6), torch.randn(6, 3)
    d = distribute_tensor(x, mesh, [EXPLICIT])
    dw = distribute_tensor(w, mesh, [R])
    with CommDebugMode() as comm:
        y = torch.softmax((d * 2 + 1).relu() @ dw, dim=-1)
        s = y.sum(1)
        t = y.t()
    assert comm.get_total_counts() == 0, comm.get_comm_counts()
    assert y.placements == (EXPLICIT,) and s.placements == (EXPLICIT,)
    assert t.placements == (Shard(1, sizes=EXPLICIT.sizes),)
    want = torch.softmax((x * 2 + 1).relu() @ w, dim=-1)
    assert torch.allclose(y.full_tensor(), want, atol=1e-6)
    assert torch.allclose(s.full_tensor(), want.sum(1), atol=1e-6)
    # a view's rule sees chunk pieces: the input moves, the answer is still one device's
    assert torch.equal(d.view(5, 2, 6).full_tensor(), x.view(5, 2, 6))
    assert torch.equal(torch.cat([d, d], 1).full_tensor(), torch.cat([x, x], 1))
    return True


def test_ops_keep_a_split_rule_without_communication_and_others_move_it():
    assert all(run_on_mesh((4,), _ops_keep_the_rule))


def _backward(mesh):
    torch.manual_seed(0)
    x = torch.randn(10, 6, requires_grad=True)
    w = torch.randn(6, 3, requires_grad=True)
    d = distribute_tensor(x.detach(), mesh, [EXPLICIT]).requires_grad_()
    dw = distribute_tensor(w.detach(), mesh, [R]).requires_grad_()
    (torch.tanh(d @ dw) * 3).sum().backward()
    (torch.tanh(x @ w) * 3).sum().backward()
    assert d.grad.placements == (EXPLICIT,)  # the gradient is laid out as its parameter
    assert torch.allclose(d.grad.full_tensor(), x.grad, atol=1e-5)
    assert torch.allclose(dw.grad.full_tensor(), w.grad, atol=1e-5)
    return True


def test_backward_equals_one_device_and_keeps_the_rule():
    assert all(run_on_mesh((4,), _backward))


def _two_d(mesh):
    torch.manual_seed(0)
    x = torch.randn(10, 7)
    layout = [Shard(0, sizes=(6, 4)), Shard(1, sizes="balanced")]
    d = distribute_tensor(x, mesh, layout)
    i, j = mesh.get_coordinate()
    rows = (0, 6) if i == 0 else (6, 10)
    cols = (0, 4) if j == 0 else (4, 7)
    assert torch.equal(d.to_local(), x[rows[0]:rows[1], cols[0]:cols[1]])
    assert torch.equal((d + d).full_tensor(), 2 * x)
    assert torch.equal(d.redistribute(mesh, [Shard(1), Shard(0)]).full_tensor(), x)
    return True


def test_a_2d_mesh_carries_a_rule_per_mesh_dim():
    assert all(run_on_mesh((2, 2), _two_d))


def _errors(mesh):
    x = torch.randn(10, 6)
    with pytest.raises(PlacementError, match=r"expected 4 sizes summing to 10"):
        distribute_tensor(x, mesh, [Shard(0, sizes=(1, 2))])
    d = distribute_tensor(x, mesh, [Shard(0)])
    with pytest.raises(PlacementError, match=r"expected 4 sizes summing to 10") as raised:
        d.redistribute(mesh, [Shard(0, sizes=(1, 2, 3, 5))])
    # raised from redistribute itself, one frame under the caller's line, not the planner's
    frames = [f for f in traceback.extract_tb(raised.tb) if "/dtensor/" in f.filename]
    assert [f.name for f in frames] == ["redistribute"], [f.name for f in frames]
    rank = mesh.get_coordinate()[0]
    with pytest.raises(ValueError, match=r"local shape \(2, 6\), expected \(3, 6\)"):
        DTensor.from_local(torch.randn(2, 6), mesh, [EXPLICIT], run_check=True)
    with pytest.raises(PlacementError, match="resolved by DTensor.from_local only"):
        distribute_tensor(x, mesh, [Shard(0, sizes="measured")])
    with pytest.raises(PlacementError, match="this rank's piece has shape"):
        DTensor.from_local(torch.randn(3 if rank else 4, 6), mesh, [EXPLICIT])
    return True


def test_sizes_that_do_not_fit_get_clear_errors():
    assert all(run_on_mesh((4,), _errors))


def _measured_groups_differ(mesh):
    i, j = mesh.get_coordinate()
    rows = [[1, 3], [2, 2]][i][j]  # the two groups of mesh dim 1 measure (1, 3) and (2, 2)
    with pytest.raises(ValueError, match="different sizes in its groups"):
        DTensor.from_local(torch.randn(rows, 2), mesh, [R, Shard(0, sizes="measured")])
    return True


def test_measured_sizes_must_be_one_rule():
    assert all(run_on_mesh((2, 2), _measured_groups_differ))


def test_the_simulated_trace_moves_what_the_plan_says():
    def body(mesh):
        d = distribute_tensor(torch.randn(10, 6), mesh, [Shard(0)])
        d.redistribute(mesh, [EXPLICIT])

    with simpg.trace() as t:
        run_on_mesh((4,), body)
    moved = [r for r in t.records if r.op.startswith("all_to_all")]
    assert moved, [r.op for r in t.records]
    assert sum(sum(r.bytes_received) for r in moved) == plan_bytes(
        plan([Shard(0)], [EXPLICIT], (4,), (10, 6)), (4,), (10, 6))


def _compiled(mesh, backend="aot_eager"):
    torch.manual_seed(0)
    x, w = torch.randn(10, 6), torch.randn(6, 3)
    d = distribute_tensor(x, mesh, [EXPLICIT]).requires_grad_()
    dw = distribute_tensor(w, mesh, [R]).requires_grad_()

    def step(a, b):  # a split rule through matmul, then moved to chunk pieces
        return (torch.relu(a @ b) * 2).redistribute(mesh, [Shard(0)]).sum()

    compiled = torch.compile(step, backend=backend, dynamic=False)(d, dw)
    compiled.backward()
    grad = d.grad.full_tensor()
    assert d.grad.placements == (EXPLICIT,)
    d.grad = None
    eager = step(d, dw)
    eager.backward()
    assert torch.allclose(compiled.full_tensor(), eager.full_tensor())
    assert torch.allclose(grad, d.grad.full_tensor())
    return True


def test_torch_compile_carries_a_split_rule_forward_and_backward():
    assert all(run_on_mesh((4,), _compiled))


def _view_chain(mesh):
    torch.manual_seed(0)
    x = torch.randn(12, 4, requires_grad=True)  # (batch * heads, dim), 2 heads a batch row
    rows = Shard(0, sizes=(6, 2, 2, 2))  # whole batch rows: 3, 1, 1, 1 of 6
    d = distribute_tensor(x.detach(), mesh, [rows]).requires_grad_()
    with CommDebugMode() as comm:
        heads = d.view(6, 2, 4)          # unflatten (batch, heads)
        mixed = torch.softmax(heads, dim=1) * heads
        flat = mixed.reshape(12, 4)      # flatten back
        out = flat.flatten()             # and to one dim
    assert comm.get_total_counts() == 0, comm.get_comm_counts()
    assert heads.placements == (Shard(0, sizes=(3, 1, 1, 1)),)
    assert flat.placements == (rows,)
    assert out.placements == (Shard(0, sizes=(24, 8, 8, 8)),)
    want = (torch.softmax(x.view(6, 2, 4), dim=1) * x.view(6, 2, 4)).reshape(12, 4).flatten()
    assert torch.allclose(out.full_tensor(), want)
    out.sum().backward()
    want.sum().backward()
    assert d.grad.placements == (rows,)
    assert torch.allclose(d.grad.full_tensor(), x.grad, atol=1e-6)
    return True


def test_view_chains_keep_head_aligned_pieces_without_communication():
    assert all(run_on_mesh((4,), _view_chain))


@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_inductor_backward_is_rank_consistent_with_an_empty_piece():
    # rank 2 holds nothing; ranks 0, 1 and 3 receive nothing in the forward all_to_all, and
    # rank 0 sends nothing either: every rank's compiled backward still issues the reverse
    # exchange (Note [every rank's backward collective] in dtensor/redistribute/execute.py)
    assert all(run_on_mesh((4,), lambda mesh: _compiled(mesh, "inductor"), timeout=120))


def test_a_sharded_vector_norm_keeps_the_split_rule_of_a_kept_dim():
    # 2-norm over dim 1 cut (2, 3) by mesh dim 1, rows cut (2, 3) by mesh dim 0: the rows keep
    # their explicit sizes (found by the 2-D split-rule op-database tier: cosine_similarity)
    a, b = torch.randn(5, 5), torch.randn(5, 5)
    pl = [Shard(0, sizes=(2, 3)), Shard(1, sizes=(2, 3))]

    def body(mesh):
        x, y = distribute_tensor(a, mesh, pl), distribute_tensor(b, mesh, pl)
        norm = torch.linalg.vector_norm(x, dim=1)
        return (norm.placements, norm.full_tensor(),
                torch.nn.functional.cosine_similarity(x, y).full_tensor())

    for placements, norm, cos in run_on_mesh((2, 2), body):
        assert placements == (Shard(0, sizes=(2, 3)), Replicate())
        torch.testing.assert_close(norm, torch.linalg.vector_norm(a, dim=1))
        torch.testing.assert_close(cos, torch.nn.functional.cosine_similarity(a, b))
