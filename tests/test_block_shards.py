"""Block shards (Note [block shards] in dtensor/layout.py): ``Shard(d, block=b)`` through the
layout, the planner (the exact byte lower bound between any two Shard/Replicate layouts),
redistribute, ``distribute_tensor`` / ``from_local`` / ``full_tensor``, views (Note [views of
block shards]), matmul, softmax and attention in the math form, autograd and checkpoints,
equal to one device and with no collective where one device would only view."""

from __future__ import annotations

import itertools
import pickle

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import dtensor.checkpoint as dcp
import simpg
from dtensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from dtensor.debug import CommDebugMode
from dtensor.layout import check_layout, lays_out, local_shape, mesh_coordinates, pieces, refine
from dtensor.ops.soundness import check_op
from dtensor.placements import PlacementError, PlacementTypeError, normalize_placements
from dtensor.redistribute.planner import plan, plan_bytes
from dtensor.redistribute.reference import local_index
from tests.redistribute.test_planner import integer_valued, run_plan
from tests.support.mesh_world import run_on_mesh

R = Replicate()
HEADS = Shard(0, block=4)


# -- the placement and the layout --------------------------------------------------------------

def test_a_block_shard_is_a_value_that_prints_and_pickles():
    a = Shard(0, block=4)
    assert a == HEADS and hash(a) == hash(HEADS) and a != Shard(0) and not a.is_plain
    assert eval(repr(a)) == a and str(a) == "S(0)[block 4]"
    b = Shard(1, "balanced", block=6)
    assert str(b) == "S(1)[balanced, block 6]" and pickle.loads(pickle.dumps(b)) == b
    assert a.with_dim(2) == Shard(2, block=4)
    assert normalize_placements([Shard(-2, block=4)], 2, 1) == (Shard(0, block=4),)


@pytest.mark.parametrize("bad", [1, 0, -3, 2.0, True, "4"])
def test_bad_blocks_are_refused_at_construction(bad):
    with pytest.raises(PlacementTypeError, match="run length >= 2"):
        Shard(0, block=bad)


def test_a_rank_holds_its_part_of_every_run():
    # (B=3, H=5) flattened, heads over 4 ranks: chunk's 2, 2, 1, 0 heads of each batch row
    got = [pieces((15,), (4,), (Shard(0, block=5),), (r,))[0] for r in range(4)]
    assert got == [((0, 2), (5, 7), (10, 12)), ((2, 4), (7, 9), (12, 14)),
                   ((4, 5), (9, 10), (14, 15)), ((0, 0),)]
    assert [local_shape((15, 2), (4,), (Shard(0, block=5),), (r,)) for r in range(4)] == [
        (6, 2), (6, 2), (3, 2), (0, 2)]
    # nested: dp takes whole batch rows, tp its heads of each (and the other way round)
    for pl in [(Shard(0), HEADS), (HEADS, Shard(0))]:
        held = sorted(i for c in mesh_coordinates((2, 2))
                      for a, b in pieces((16,), (2, 2), pl, c)[0] for i in range(a, b))
        assert held == list(range(16))
    assert refine((16,), (2, 2), [(HEADS, Shard(0))]).placements == ((Shard(1), Shard(0)),)


def test_cuts_inside_a_run_are_refused_naming_the_layout():
    with pytest.raises(PlacementError, match=r"not a whole number of runs of 4"):
        check_layout((10,), (2,), (HEADS,))
    with pytest.raises(PlacementError, match="extent 6 is not a whole number of runs of 4"):
        check_layout((12,), (2, 2), (Shard(0), HEADS))  # chunk's 6 rows of 12
    with pytest.raises(PlacementError, match="cuts inside a run"):  # 3 of each rank's 4 x 2
        check_layout((16,), (2, 3), (HEADS, Shard(0)))
    assert lays_out((16,), (2, 2), (Shard(0), HEADS))


# -- the planner: each rank receives exactly what it lacks ---------------------------------------

def _held(shape, mesh, placements, coord):
    dims = pieces(shape, mesh, placements, coord)
    return set(itertools.product(*[[i for a, b in iv for i in range(a, b)] for iv in dims]))


def _lower_bound(shape, mesh, a, b):
    """Elements every rank of ``b`` lacks under ``a``: what any plan must move."""
    return sum(len(_held(shape, mesh, b, c) - _held(shape, mesh, a, c))
               for c in mesh_coordinates(mesh))


BLOCK_UNIVERSES = [
    ((2,), (8, 6), [R, Shard(0), Shard(1), HEADS, Shard(0, block=2), Shard(1, block=3)]),
    ((4,), (15, 4), [R, Shard(0), Shard(1), Shard(0, block=5), Shard(0, "balanced", block=5)]),
    ((2, 2), (8, 6), [R, Shard(0), Shard(1), HEADS, Shard(1, block=3)]),
    ((2, 3), (12, 3), [R, Shard(0), Shard(1), HEADS, Shard(0, block=6)]),
]


@pytest.mark.parametrize("mesh, shape, universe", BLOCK_UNIVERSES,
                         ids=[f"mesh{m}-shape{s}" for m, s, _ in BLOCK_UNIVERSES])
def test_every_move_receives_exactly_what_each_rank_lacks(mesh, shape, universe):
    """Every pair of Shard/Replicate layouts with a block: correct on every rank (the
    reference executor) and at the byte lower bound, in a shared refined view or, where
    there is none, by one all_to_all of the pieces (Note [moves between block layouts])."""
    full = integer_valued(shape, torch.float32)
    lists = [pl for pl in itertools.product(universe, repeat=len(mesh))
             if lays_out(shape, mesh, pl)]
    above, shared, unshared = [], 0, 0
    for a, b in itertools.product(lists, repeat=2):
        if a == b or not any(p.block for p in a + b if type(p) is Shard):
            continue
        steps, _ = run_plan(full, list(a), list(b), mesh)  # checks every rank's piece
        got = plan_bytes(steps, mesh, shape, 1)
        if refine(shape, mesh, (a, b)) is not None:
            shared += 1
        else:
            unshared += 1
            assert [s.kind for s in steps] == ["all_to_all"], (a, b, steps)
        if got != _lower_bound(shape, mesh, a, b):
            above.append(f"{a}->{b}: {got} bytes, bound {_lower_bound(shape, mesh, a, b)}")
    assert shared and unshared and not above, "\n".join(above)


def test_a_move_with_no_shared_view_is_one_all_to_all_at_the_bound():
    # chunk cuts 12 rows at 6, inside a run of 4: no view holds both as boxes. Rank 0 holds
    # rows 0-1, 4-5, 8-9 and needs 0-5: it receives rows 2-3 only
    steps = plan([HEADS], [Shard(0)], (2,), (12, 4))
    assert [s.kind for s in steps] == ["all_to_all"]
    assert plan_bytes(steps, (2,), (12, 4), 1) == 2 * 2 * 4


def test_partial_and_block_shards_plan_correctly():
    full = integer_valued((8, 4), torch.float32)
    for a, b in [([Partial()], [HEADS]), ([HEADS], [Partial()]), ([Partial(), HEADS],
                                                                  [HEADS, R])]:
        mesh = (2,) * len(a)
        run_plan(full, a, b, mesh)


# -- the runtime -------------------------------------------------------------------------------

def _round_trips(mesh):
    shape = (12, 6)
    full = torch.arange(72.0).reshape(shape)
    opts = [R, Shard(0), Shard(1), HEADS, Shard(0, block=6), Shard(1, block=3)]
    lists = [pl for pl in itertools.product(opts, repeat=mesh.ndim)
             if lays_out(shape, mesh.shape, pl)]
    coord = mesh.get_coordinate()
    for a in lists:
        d = distribute_tensor(full, mesh, list(a))
        assert torch.equal(d.to_local(), full[local_index(shape, mesh.shape, a, coord)])
        again = DTensor.from_local(d.to_local(), mesh, list(a), run_check=True)
        assert again.shape == d.shape and torch.equal(again.full_tensor(), full)
        for b in lists:
            e = d.redistribute(mesh, list(b))
            assert torch.equal(e.to_local(), full[local_index(shape, mesh.shape, b, coord)])
    return len(lists)


@pytest.mark.parametrize("mesh_shape", [(2,), (2, 2)])
def test_distribute_redistribute_from_local_and_full_tensor(mesh_shape):
    assert all(run_on_mesh(mesh_shape, _round_trips))


def _view_chain(mesh, B, H, S, D, placements):
    """(B, S, H, D) heads-sharded: to heads, flattened with batch, through matmul and
    softmax, unflattened and back, forward and backward, counted."""
    torch.manual_seed(0)
    x = torch.randn(B, S, H, D, dtype=torch.float64, requires_grad=True)
    w = torch.randn(B * H, D, D, dtype=torch.float64)

    def step(t, weight):
        flat = t.transpose(1, 2).reshape(B * H, S, D)
        y = torch.softmax(torch.bmm(flat, weight), dim=-1).relu() * 2
        return y.reshape(B, H, S, D).transpose(1, 2)

    want = step(x, w)
    (want * want).sum().backward()
    dx = distribute_tensor(x.detach(), mesh, placements).requires_grad_()
    dw = distribute_tensor(w, mesh, [R] * mesh.ndim)
    with CommDebugMode() as comm:
        got = step(dx, dw)
        (got * got).sum().backward()
    flat_placements = dx.transpose(1, 2).reshape(B * H, S, D).placements
    return (comm.get_total_counts(), flat_placements, got.placements,
            torch.allclose(got.full_tensor(), want), torch.allclose(dx.grad.full_tensor(),
                                                                     x.grad))


VIEW_CASES = [  # mesh, (B, H, S, D), x's placements, flattened, the output's (B, S, H, D)
    ((4,), (2, 4, 3, 5), [Shard(2)], (Shard(0, block=4),), (Shard(2),)),
    # uneven heads, 2, 2, 1, 0 of each batch row
    ((4,), (3, 5, 2, 4), [Shard(2)], (Shard(0, block=5),), (Shard(2),)),
    ((2,), (2, 3, 2, 4), [Shard(2)], (Shard(0, block=3),), (Shard(2),)),
    ((2, 2), (4, 4, 2, 3), [Shard(0), Shard(2)], (Shard(0), Shard(0, block=4)),
     (Shard(0), Shard(2))),
    ((2, 3), (2, 6, 2, 3), [Shard(0), Shard(2)], (Shard(0), Shard(0, block=6)),
     (Shard(0), Shard(2))),
]


@pytest.mark.parametrize("mesh_shape, sizes, placements, flat, out", VIEW_CASES,
                         ids=[f"mesh{c[0]}-{c[1]}" for c in VIEW_CASES])
def test_views_to_heads_and_back_move_nothing_and_equal_one_device(mesh_shape, sizes,
                                                                   placements, flat, out):
    counts, flat_got, out_got, same, same_grad = run_on_mesh(
        mesh_shape, lambda mesh: _view_chain(mesh, *sizes, placements))[0]
    assert (flat_got, out_got) == (flat, out) and same and same_grad
    assert counts == 0  # forward and backward: one device would only view


def _attention(mesh, B, H, S, D, placements):
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, S, H, D, dtype=torch.float64, requires_grad=True)
               for _ in range(3))
    with sdpa_kernel(SDPBackend.MATH):
        o = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)),
                                           is_causal=True)
        (o * o).sum().backward()
        dq, dk, dv = (distribute_tensor(t.detach(), mesh, placements).requires_grad_()
                      for t in (q, k, v))
        with CommDebugMode() as comm:
            od = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (dq, dk, dv)),
                                                is_causal=True)
            (od * od).sum().backward()
    return (comm.get_total_counts(), torch.allclose(od.full_tensor(), o)
            and all(torch.allclose(a.grad.full_tensor(), b.grad)
                    for a, b in ((dq, q), (dk, k), (dv, v))))


@pytest.mark.parametrize("mesh_shape, sizes, placements", [
    ((4,), (2, 4, 8, 16), [Shard(2)]), ((4,), (3, 5, 4, 8), [Shard(2)]),
    ((2, 2), (4, 4, 4, 8), [Shard(0), Shard(2)])])
def test_attention_in_the_math_form_on_sharded_heads_moves_nothing(mesh_shape, sizes,
                                                                    placements):
    counts, same = run_on_mesh(mesh_shape, lambda mesh: _attention(mesh, *sizes,
                                                                  placements))[0]
    assert same and counts == 0


def _flattening_a_batch_dim_inside_a_sharded_one(mesh):
    # heads outer, batch inner: the shard is the run's outermost dim, a plain Shard(0)
    x = torch.randn(4, 3, 2)
    d = distribute_tensor(x, mesh, [Shard(0)])
    with CommDebugMode() as comm:
        y = d.reshape(12, 2)
    return comm.get_total_counts(), y.placements, torch.equal(y.full_tensor(), x.reshape(12, 2))


def test_a_shard_on_the_outermost_dim_of_a_run_stays_a_plain_shard():
    assert run_on_mesh((2,), _flattening_a_batch_dim_inside_a_sharded_one)[0] == (
        0, (Shard(0),), True)


# -- the rules, checked by the soundness harness ------------------------------------------------

@pytest.mark.parametrize("mesh", [(2,), (4,), (2, 2)])
def test_the_view_rule_and_lifted_rules_are_sound_on_block_inputs(mesh):
    aten = torch.ops.aten
    x = torch.randn(4, 4, 3, dtype=torch.float64)
    flat = torch.randn(16, 3, dtype=torch.float64)
    calls = [(aten.view.default, (x, [16, 3])), (aten.view.default, (flat, [4, 4, 3])),
             (aten._unsafe_view.default, (flat, [4, 2, 2, 3])),
             (aten.view.default, (flat, [48])),
             (aten.bmm.default, (torch.randn(16, 2, 3, dtype=torch.float64),
                                 torch.randn(16, 3, 2, dtype=torch.float64))),
             (aten._softmax.default, (flat, -1, False)), (aten.mul.Tensor, (flat, flat))]
    for op, args in calls:
        assert check_op(op, args, {}, mesh) == [], op


# -- checkpoints -------------------------------------------------------------------------------

def test_checkpoints_save_a_block_layout_and_load_it_into_any_other(tmp_path):
    x = torch.randn(12, 6, generator=torch.Generator().manual_seed(0))

    def save(mesh):
        dcp.save({"w": distribute_tensor(x, mesh, [Shard(0), Shard(0, block=3)])}, tmp_path)

    def load(mesh):
        out = []
        for placements in ([Shard(0, block=6)], [Shard(1)], [R], [Shard(1, block=3)]):
            t = distribute_tensor(torch.zeros(12, 6), mesh, placements)
            dcp.load({"w": t}, tmp_path)
            out.append(torch.equal(t.full_tensor(), x))
        return all(out)

    run_on_mesh((2, 2), save)
    assert all(run_on_mesh((2,), load))
    plain = {"w": torch.zeros(12, 6)}
    dcp.load(plain, tmp_path)
    assert torch.equal(plain["w"], x)


def _save_torch_strided(path, x):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor as TorchDTensor
    from torch.distributed.tensor import Shard as TorchShard
    from torch.distributed.tensor.placement_types import _StridedShard

    # FSDP2 over tensor parallel: tp cuts dim 0 first, dp cuts each tp piece (torch's own
    # right-to-left layout), read back through torch's placements
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dp, tp = mesh.get_coordinate()
    rows = x.chunk(2)[tp].chunk(2)[dp]
    t = TorchDTensor.from_local(rows, mesh, [_StridedShard(0, split_factor=2), TorchShard(0)],
                                run_check=False, shape=x.shape, stride=x.stride())
    dcp.save({"w": t}, path)


def test_torchs_strided_shard_saves_as_a_block_shard_and_loads_into_any_layout(tmp_path):
    x = torch.randn(8, 3, generator=torch.Generator().manual_seed(0))
    simpg.run(lambda: _save_torch_strided(tmp_path, x), 4)

    def load(mesh):
        t = distribute_tensor(torch.zeros(8, 3), mesh, [Shard(0, block=4)])
        dcp.load({"w": t}, tmp_path)
        return torch.equal(t.full_tensor(), x)

    assert all(run_on_mesh((2,), load))
    plain = {"w": torch.zeros(8, 3)}
    dcp.load(plain, tmp_path)
    assert torch.equal(plain["w"], x)


@pytest.mark.parametrize("mesh_shape, a, b", [
    ((2,), [HEADS], [Shard(0)]),
    ((2, 2), [Shard(0, block=4), Shard(1, block=3)], [Shard(0), Shard(0)]),
])
def test_a_move_with_no_shared_view_moves_what_the_plan_says_forward_and_back(mesh_shape, a, b):
    """The executor's all_to_all on pieces (Note [moves between block layouts]): the trace's
    bytes are the plan's, the pieces and the gradient are right."""
    shape = (12, 6)
    full = torch.arange(72.0).reshape(shape)

    def body(mesh):
        d = distribute_tensor(full, mesh, a).requires_grad_()
        e = d.redistribute(mesh, b)
        (e * e).sum().backward()
        coord = mesh.get_coordinate()
        return (torch.equal(e.to_local(), full[local_index(shape, mesh_shape, b, coord)]),
                d.grad.placements == tuple(a) and torch.equal(
                    d.grad.to_local(), 2 * full[local_index(shape, mesh_shape, a, coord)]))

    with simpg.trace() as t:
        results = run_on_mesh(mesh_shape, body)
    assert all(x and y for x, y in results)
    moved = [r for r in t.records if r.op.startswith("all_to_all")]
    steps = plan(a, b, mesh_shape, shape)
    assert [s.kind for s in steps] == ["all_to_all"]
    # forward and backward: the reverse move is the same size
    assert sum(sum(r.bytes_received) for r in moved) == plan_bytes(steps, mesh_shape, shape) \
        + plan_bytes(plan(b, a, mesh_shape, shape), mesh_shape, shape)


def _compiled_block_step(mesh, backend):
    torch.manual_seed(0)
    x, w = torch.randn(12, 6), torch.randn(6, 5)
    d = distribute_tensor(x, mesh, [HEADS]).requires_grad_()
    dw = distribute_tensor(w, mesh, [R]).requires_grad_()

    def step(a, b):  # a block shard through matmul, then moved by the pieces' all_to_all
        return (torch.relu(a @ b) * 2).redistribute(mesh, [Shard(0)]).sum()

    compiled = torch.compile(step, backend=backend, dynamic=False)(d, dw)
    compiled.backward()
    grads = d.grad.to_local().clone(), dw.grad.to_local().clone()
    d.grad = dw.grad = None
    step(d, dw).backward()
    return (d.grad.placements == (HEADS,) and torch.allclose(compiled.to_local(),
                                                              step(d, dw).to_local())
            and torch.allclose(grads[0], d.grad.to_local())
            and torch.allclose(grads[1], dw.grad.to_local()))


@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_of_a_block_shard_step_equals_eager(backend):
    assert all(run_on_mesh((2,), lambda mesh: _compiled_block_step(mesh, backend),
                           timeout=120))
