"""loss_parallel(): cross entropy on class-sharded logits equals single-device F.cross_entropy,
forward and backward, moves O(positions) bytes, and refuses logits it cannot take."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import simpg
from tests.support.mesh_world import run_on_mesh as _world
from dtensor import DTensor, Partial, Replicate, Shard, distribute_tensor, fallback_policy
from dtensor.parallel.loss import LossParallelError, loss_parallel

GRID = {"reduction": ["mean", "sum", "none"], "ignore_index": [-100, 2],
        "weighted": [False, True], "label_smoothing": [0.0, 0.25]}

# (mesh, logits shape, logits placements, target placements or None for a plain tensor)
CASES = [
    ((4,), (7, 10), [Shard(1)], None),  # 10 classes over 4: 3, 3, 3, 1
    ((4,), (5, 3), [Shard(1)], None),  # 3 classes over 4: rank 3 holds none
    ((2,), (7,), [Shard(0)], None),  # unbatched
    ((2,), (3, 5, 4), [Shard(1)], [Replicate()]),  # (N, C, d): nll_loss2d underneath
    ((2, 2), (6, 9), [Shard(0), Shard(1)], [Shard(0), Replicate()]),  # batch x classes
    ((2, 2), (5, 7), [Shard(1), Shard(0)], None),  # classes on mesh dim 0, uneven batch
    ((2, 2), (4, 5), [Replicate(), Shard(1)], [Replicate(), Replicate()]),
]


def _data(shape: tuple[int, ...], seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    c = shape[1] if len(shape) > 1 else shape[0]
    logits = torch.randn(shape, generator=gen) * 3
    target_shape = shape[:1] + shape[2:] if len(shape) > 1 else ()
    target = torch.randint(0, c, target_shape, generator=gen)
    if target.numel() > 1:
        target.view(-1)[::3] = 2  # class 2 often, so ignore_index=2 ignores real rows
    return logits, target, torch.rand(c, generator=gen) + 0.5


def _reference(logits: torch.Tensor, target: torch.Tensor, kwargs: dict
               ) -> tuple[torch.Tensor, torch.Tensor]:
    x = logits.clone().requires_grad_()
    loss = F.cross_entropy(x, target, **kwargs)
    loss.sum().backward()
    return loss.detach(), x.grad


def _check_one(mesh, logits, target, placements, target_placements, *, reduction,
               ignore_index, weighted, label_smoothing):
    weight = _data(tuple(logits.shape), 0)[2] if weighted else None
    kwargs = dict(reduction=reduction, ignore_index=ignore_index, label_smoothing=label_smoothing)
    want_loss, want_grad = _reference(logits, target, dict(kwargs, weight=weight))
    x = distribute_tensor(logits, mesh, placements).requires_grad_()
    t, w = target, weight
    if target_placements is not None:  # DTensor target: weight a DTensor too (see
        # test_dtensor_target_with_plain_weight_smoothing_mean)
        t = distribute_tensor(target, mesh, target_placements)
        w = distribute_tensor(weight, mesh, [Replicate()] * mesh.ndim) if weighted else None
    kwargs["weight"] = w
    with fallback_policy("error"):
        with loss_parallel():
            loss = F.cross_entropy(x, t, **kwargs)
        loss.sum().backward()  # outside the block, as training code does
    assert x.grad.placements == x.placements
    torch.testing.assert_close(loss.full_tensor(), want_loss, rtol=1e-5, atol=1e-6,
                               equal_nan=True)  # an unbatched ignored target: 0 / 0
    torch.testing.assert_close(x.grad.full_tensor(), want_grad, rtol=1e-5, atol=1e-6,
                               equal_nan=True)


@pytest.mark.parametrize("mesh_shape,shape,placements,target_placements", CASES,
                         ids=[f"{c[1]}{[str(p) for p in c[2]]}@mesh{c[0]}" for c in CASES])
def test_cross_entropy_matches_one_device(mesh_shape, shape, placements, target_placements):
    logits, target, _ = _data(shape, seed=len(shape) + shape[-1])

    def body(mesh):
        simpg.run_subtests(GRID, _check_one, mesh, logits, target, placements,
                           target_placements)

    _world(mesh_shape, body)


def test_backward_inside_the_block_and_3d_logits_flattened():
    """(B, S, V) logits flattened with view/flatten stay sharded on V; backward in the block."""
    logits = torch.randn(2, 3, 10, generator=torch.Generator().manual_seed(3))
    target = torch.randint(0, 10, (6,), generator=torch.Generator().manual_seed(4))
    x_ref = logits.clone().requires_grad_()
    F.cross_entropy(x_ref.view(-1, 10), target, label_smoothing=0.1).backward()

    def body(mesh):
        for flat in (lambda y: y.view(-1, 10), lambda y: y.flatten(0, 1),
                     lambda y: y.reshape(6, 10)):
            x = distribute_tensor(logits, mesh, [Shard(2)]).requires_grad_()
            with fallback_policy("error"), loss_parallel():
                flat_x = flat(x)
                assert flat_x.placements == (Shard(1),)
                loss = F.cross_entropy(flat_x, target, label_smoothing=0.1)
                loss.backward()
            assert x.grad.placements == (Shard(2),)
            torch.testing.assert_close(x.grad.full_tensor(), x_ref.grad)

    _world((4,), body)


def _bytes_per_rank(n: int, v: int, mesh_shape: tuple[int, ...], placements: list,
                    target_placements: list | None, kwargs: dict) -> list[int]:
    gen = torch.Generator().manual_seed(v)
    logits = torch.randn(n, v, generator=gen)
    target = torch.randint(0, v, (n,), generator=gen)
    want_loss, want_grad = _reference(logits, target, kwargs)

    def body(mesh):
        x = distribute_tensor(logits, mesh, placements).requires_grad_()
        t = target if target_placements is None else distribute_tensor(target, mesh,
                                                                       target_placements)
        with simpg.trace() as tr, fallback_policy("error"):
            with loss_parallel():
                loss = F.cross_entropy(x, t, **kwargs)
            loss.sum().backward()
            got = loss.full_tensor()
        torch.testing.assert_close(got, want_loss)
        torch.testing.assert_close(x.grad.full_tensor(), want_grad)
        return tr.bytes_received()[torch.distributed.get_rank()]

    return _world(mesh_shape, body)


@pytest.mark.parametrize("mesh_shape,placements,target_placements", [
    ((8,), [Shard(1)], None), ((2, 4), [Shard(0), Shard(1)], [Shard(0), Replicate()])],
    ids=["mesh(8,)", "mesh(2,4)"])
@pytest.mark.parametrize("kwargs", [dict(), dict(label_smoothing=0.1, ignore_index=3),
                                    dict(reduction="none")], ids=["mean", "smoothed", "none"])
def test_bytes_moved_do_not_grow_with_the_classes(kwargs, mesh_shape, placements,
                                                  target_placements):
    """Forward + backward + reading the loss (right values, 1000 classes over 8 included): the
    same bytes for 80 and 1000 classes, and far fewer than one gather of the logits."""
    n = 16
    args = (mesh_shape, placements, target_placements, kwargs)
    small, large = _bytes_per_rank(n, 80, *args), _bytes_per_rank(n, 1000, *args)
    assert small == large
    # an all-reduce of n floats receives < 2 * n * 4 bytes per rank: the forward has two
    # (max, sum of exp), the backward one (sum of the grad), reading the loss a few scalars;
    # the mean's Replicate target is gathered over the batch mesh dim (n int64)
    assert 0 < max(large) <= 4 * (2 * n * 4) + n * 8
    assert max(large) * 50 < n * 1000 * 4


def test_colwise_lm_head_end_to_end():
    """The use case: a ColwiseParallel lm-head keeps its (B, S, V) logits sharded on V, the
    loss is flattened and computed in the block, backward after it; the head's weight
    gradient equals the single-device one."""
    import copy

    from torch import nn

    from dtensor.parallel import ColwiseParallel, parallelize_module

    torch.manual_seed(0)
    head, h = nn.Linear(8, 50, bias=False), torch.randn(2, 3, 8)
    target = torch.randint(0, 50, (6,))
    ref = copy.deepcopy(head)
    want = F.cross_entropy(ref(h).view(-1, 50), target, label_smoothing=0.1)
    want.backward()

    def body(mesh):
        m = parallelize_module(copy.deepcopy(head), mesh, ColwiseParallel(use_local_output=False))
        with fallback_policy("error"):
            logits = m(h)
            assert logits.placements == (Shard(2),)
            with loss_parallel():
                loss = F.cross_entropy(logits.view(-1, 50), target, label_smoothing=0.1)
            loss.backward()
        torch.testing.assert_close(loss.full_tensor(), want.detach())
        torch.testing.assert_close(m.weight.grad.full_tensor(), ref.weight.grad)

    _world((4,), body)


EDGES = {  # name: (logits, target, cross_entropy kwargs, tolerance)
    "bf16": (torch.randn(6, 10).bfloat16(), torch.randint(0, 10, (6,)), {}, 2e-2),
    "f64": (torch.randn(5, 10, dtype=torch.float64), torch.randint(0, 10, (5,)), {}, 1e-10),
    "empty batch": (torch.randn(0, 10), torch.zeros(0, dtype=torch.long), {}, 1e-6),
    "5d none": (torch.randn(2, 10, 3, 2, 2), torch.randint(0, 10, (2, 3, 2, 2)),
                {"reduction": "none"}, 1e-6),
    "-inf logits": (torch.tensor([[0.0, -torch.inf, 1, 2, -torch.inf, 3, 0, 0, 0, 0]] * 3),
                    torch.tensor([0, 2, 3]), {"label_smoothing": 0.1}, 1e-6),
}


def test_edge_cases():
    """Reduced precision (normalized in float32), float64, no rows, 5-d (N, C, d1, d2, d3)
    logits, -inf logits (a rank whose max is -inf)."""
    def check(mesh, name):
        logits, target, kwargs, tol = EDGES[name]
        want_loss, want_grad = _reference(logits, target, kwargs)
        x = distribute_tensor(logits, mesh, [Shard(1)]).requires_grad_()
        with fallback_policy("error"):
            with loss_parallel():
                loss = F.cross_entropy(x, target, **kwargs)
            loss.sum().backward()
        assert loss.dtype == logits.dtype and x.grad.dtype == logits.dtype
        torch.testing.assert_close(loss.full_tensor(), want_loss, rtol=tol, atol=tol,
                                   equal_nan=True)  # the mean of no rows: 0 / 0
        torch.testing.assert_close(x.grad.full_tensor(), want_grad, rtol=tol, atol=tol)

    _world((4,), lambda mesh: simpg.run_subtests({"name": list(EDGES)}, check, mesh))


def test_class_probabilities_as_target():
    """Soft targets (N, V) are sharded like the logits: no rule needs the whole classes."""
    logits, _, _ = _data((6, 10), seed=5)
    probs = torch.rand(6, 10).softmax(1)
    x_ref = logits.clone().requires_grad_()
    F.cross_entropy(x_ref, probs, label_smoothing=0.2).backward()

    def body(mesh):
        x = distribute_tensor(logits, mesh, [Shard(1)]).requires_grad_()
        with fallback_policy("error"):
            with loss_parallel():
                loss = F.cross_entropy(x, probs, label_smoothing=0.2)
            loss.backward()
        torch.testing.assert_close(loss.full_tensor(), F.cross_entropy(logits, probs,
                                                                       label_smoothing=0.2))
        torch.testing.assert_close(x.grad.full_tensor(), x_ref.grad)

    _world((4,), body)


def test_dtensor_target_with_plain_weight_smoothing_mean():
    """A known limit: ATen's label-smoothed weighted mean, given a plain weight, computes its
    denominator with target.masked_select (a data-dependent shape: no rule, so it takes the
    gathering fallback, moving the target, O(N)). A DTensor weight (or a plain target) takes
    ATen's gather path instead, covered above."""
    logits, target, w = _data((4, 6), seed=6)

    def body(mesh):
        x = distribute_tensor(logits, mesh, [Shard(1)])
        t = distribute_tensor(target, mesh, [Replicate()])
        with fallback_policy("error"), loss_parallel():
            with pytest.raises(NotImplementedError, match=r"masked_select"):
                F.cross_entropy(x, t, weight=w, label_smoothing=0.1)
        with fallback_policy("silent"), loss_parallel():
            loss = F.cross_entropy(x, t, weight=w, label_smoothing=0.1)
        torch.testing.assert_close(loss.full_tensor(),
                                   F.cross_entropy(logits, target, weight=w, label_smoothing=0.1))

    _world((2,), body)


# -- errors and the outside of the block -----------------------------------------------------


def test_partial_logits_are_refused():
    def body(mesh):
        x = DTensor.from_local(torch.randn(4, 6), mesh, [Partial()])
        with loss_parallel(), pytest.raises(LossParallelError, match=r"Partial logits") as e:
            F.cross_entropy(x, torch.zeros(4, dtype=torch.long))
        assert e.value.placements == (Partial(),) and e.value.dim == 1

    _world((2,), body)


def test_logits_not_sharded_on_the_classes_are_refused():
    def body(mesh):
        x = distribute_tensor(torch.randn(4, 6), mesh, [Shard(0)])
        with loss_parallel(), pytest.raises(LossParallelError, match=r"class dim 1 is not "):
            F.cross_entropy(x, torch.zeros(4, dtype=torch.long))

    _world((2,), body)


def test_target_out_of_bounds_raises():
    def body(mesh):
        x = distribute_tensor(torch.randn(4, 6), mesh, [Shard(1)])
        with loss_parallel(), pytest.raises(RuntimeError, match=r"0 <= target < 6 classes"):
            F.cross_entropy(x, torch.tensor([0, 1, 6, 2]))

    _world((2,), body)


def test_outside_the_block_log_softmax_is_unchanged():
    """Without loss_parallel() the rule decides, as before: it must make the class dim whole
    (here by moving the logits to row shards), so the logits move."""
    def body(mesh):
        x = distribute_tensor(torch.randn(4, 6), mesh, [Shard(1)])
        with simpg.trace() as tr:
            y = torch.log_softmax(x, 1)
        assert Shard(1) not in y.placements and tr.records
        torch.testing.assert_close(y.full_tensor(), torch.log_softmax(x.full_tensor(), 1))

    _world((2,), body)
