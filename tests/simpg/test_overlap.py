"""simpg.overlap (the two-stream device model) on hand-built event lists whose answers are
worked out by hand, and simpg.steprecorder (what a rank's step records) on simpg ranks, with
our DTensor and torch's."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import simpg
from simpg.costmodel import CostModel, LinkModel
from simpg.overlap import (DEVICES, Compute, DeviceModel, Issue, RankTimeline, Use, Wait,
                           interconnect, model_step, schedule)
from simpg.records import CollectiveRecord
from simpg.steprecorder import price_op, record_step

US = 1e-6


def kernel(us: float) -> Compute:
    """A kernel lasting ``us`` microseconds under UNIT_DEVICE."""
    return Compute("k", flops=round(us * 1e6))


# 1 FLOP per microsecond... per 1e-12 s: flops=us*1e6 at 1e12 FLOP/s lasts us microseconds
UNIT_DEVICE = DeviceModel("unit", {"float32": 1e12}, hbm_Bps=1e12, kernel_floor_s=0.0)


def run(events: dict, durations_us: dict[int, float], ranks_of: dict | None = None,
        waits: str = "program"):
    ranks_of = ranks_of or {seq: tuple(sorted(events)) for seq in durations_us}
    return schedule(events, UNIT_DEVICE.op_s, {k: v * US for k, v in durations_us.items()},
                    ranks_of, waits)


def us(x: float) -> float:
    return round(x / US, 6)


# -- the schedule, by hand ---------------------------------------------------------------------
def test_gather_fully_hidden_behind_a_longer_matmul():
    # gather issued at 0, runs 0..2; the matmul runs 0..5; the wait at 5 finds it done
    step = run({0: [Issue(0), kernel(5), Wait(0)]}, {0: 2})
    assert (us(step.step_s), us(step.compute_s), us(step.comm_s), us(step.exposed_s)) == (
        5, 5, 2, 0)
    assert step.overlap == 1.0


def test_synchronous_collective_is_fully_exposed():
    # compute 0..3, all_reduce 3..7 waited at once, compute 7..9
    step = run({0: [kernel(3), Issue(0), Wait(0), kernel(2)]}, {0: 4})
    assert (us(step.step_s), us(step.compute_s), us(step.exposed_s)) == (9, 5, 4)
    assert step.overlap == 0.0
    assert tuple(map(us, step.collectives[0])) == (3, 7)
    assert [(what, us(a), us(b)) for _, what, a, b in step.compute_spans] == [
        ("k", 0, 3), ("wait #0", 3, 7), ("k", 7, 9)]


def test_modelled_step_as_a_chrome_trace_has_both_streams_of_every_rank():
    from simpg.timeline import modelled_chrome_trace

    step = run({0: [kernel(1), Issue(0), Wait(0)], 1: [kernel(5), Issue(0), Wait(0)]}, {0: 2})
    slices = [(e["pid"], e["tid"], e["name"], round(e["ts"], 6), round(e["dur"], 6))
              for e in modelled_chrome_trace(step)["traceEvents"] if e["ph"] == "X"]
    assert sorted(slices) == [(0, 0, "k", 0, 1), (0, 0, "wait #0", 1, 6), (0, 1, "#0", 5, 2),
                              (1, 0, "k", 0, 5), (1, 0, "wait #0", 5, 2), (1, 1, "#0", 5, 2)]


def test_the_slower_rank_delays_the_collective_for_both():
    # rank 0 issues at 1, rank 1 at 5: the collective runs 5..7 on both
    step = run({0: [kernel(1), Issue(0), Wait(0)], 1: [kernel(5), Issue(0), Wait(0)]}, {0: 2})
    r0, r1 = step.ranks
    assert tuple(map(us, step.collectives[0])) == (5, 7)
    assert (us(r0.step_s), us(r0.compute_s), us(r0.exposed_s)) == (7, 1, 6)  # skew counts
    assert (us(r1.step_s), us(r1.compute_s), us(r1.exposed_s)) == (7, 5, 2)
    assert step.slowest.rank == 0  # equal steps: the lower rank
    assert r0.overlap == 0.0 and r1.overlap == 0.0


def test_communication_stream_runs_collectives_in_issue_order():
    # c0 runs 0..3, c1 queues behind it 3..7; the kernel 0..1 hides 1 us of 7
    step = run({0: [Issue(0), Issue(1), kernel(1), Wait(0), Wait(1)]}, {0: 3, 1: 4})
    assert tuple(map(us, step.collectives[1])) == (3, 7)
    assert (us(step.step_s), us(step.comm_s), us(step.exposed_s)) == (7, 7, 6)
    assert step.overlap == pytest.approx(1 / 7)


def test_a_collective_waits_for_the_kernels_issued_before_it():
    # its input is the 4 us kernel's output: it runs 4..6, not 0..2
    step = run({0: [kernel(4), Issue(0), Wait(0)]}, {0: 2})
    assert tuple(map(us, step.collectives[0])) == (4, 6)
    assert us(step.exposed_s) == 2


def test_communication_still_running_at_the_end_is_exposed():
    # never waited: the step ends when the comm stream drains, at 1 + 3
    step = run({0: [kernel(1), Issue(0)]}, {0: 3})
    assert (us(step.step_s), us(step.exposed_s)) == (4, 3)


def test_disjoint_groups_overlap_and_ranks_run_independently():
    # ranks 0,1 and 2,3 in separate all-reduces; rank 0's later kernel does not wait for 2,3
    events = {0: [Issue(0), kernel(10), Wait(0)], 1: [Issue(0), Wait(0)],
              2: [kernel(2), Issue(1), Wait(1)], 3: [Issue(1), Wait(1)]}
    step = run(events, {0: 4, 1: 4}, {0: (0, 1), 1: (2, 3)})
    got = {r.rank: (us(r.step_s), us(r.exposed_s)) for r in step.ranks}
    assert got == {0: (10, 0), 1: (4, 4), 2: (6, 4), 3: (6, 6)}
    assert step.slowest.rank == 0


def test_waits_at_first_use_instead_of_where_the_program_waits():
    # a synchronous gather (0..3) whose result the program first uses after a 5 us kernel:
    # waited where the program waits, all 3 us are exposed; at first use, none
    events = {0: [Issue(0), Wait(0), kernel(5), Use(0), kernel(1)]}
    program, first_use = run(events, {0: 3}), run(events, {0: 3}, waits="first_use")
    assert (us(program.step_s), us(program.exposed_s)) == (9, 3)
    assert (us(first_use.step_s), us(first_use.exposed_s)) == (6, 0)
    # used before it ends: the compute stream waits from 1 to 3 there
    late = run({0: [Issue(0), kernel(1), Use(0), kernel(1), Wait(0)]}, {0: 3},
               waits="first_use")
    assert (us(late.step_s), us(late.exposed_s)) == (4, 2)
    with pytest.raises(ValueError, match="expected one of program, first_use"):
        run(events, {0: 3}, waits="never")


def test_at_first_use_a_collective_waits_only_for_the_kernel_that_produced_its_input():
    # kernel 0 (0..4) produces the input, kernel 1 (4..9) is unrelated
    events = {0: [kernel(4), kernel(5), Issue(0, after=0), Use(0), kernel(1)]}
    program, first_use = run(events, {0: 2}), run(events, {0: 2}, waits="first_use")
    assert tuple(map(us, program.collectives[0])) == (9, 11)  # after every earlier kernel
    assert (us(program.step_s), us(program.exposed_s)) == (11, 1)  # 1 us still running
    assert tuple(map(us, first_use.collectives[0])) == (4, 6)  # beside kernel 1
    assert (us(first_use.step_s), us(first_use.exposed_s)) == (10, 0)
    with pytest.raises(ValueError, match="issued after kernel 5, but only 2 ran"):
        run({0: [kernel(1), kernel(1), Issue(0, after=5)]}, {0: 1}, waits="first_use")


def test_schedule_errors_say_what_is_wrong():
    with pytest.raises(ValueError, match="waits for collective 0 before issuing it"):
        run({0: [Wait(0), Issue(0)]}, {0: 1})
    with pytest.raises(ValueError, match=r"ranks \[1\] have no events"):
        run({0: [Issue(0), Wait(0)]}, {0: 1}, {0: (0, 1)})
    # opposite issue orders on one communication stream can never both start
    with pytest.raises(ValueError, match="cannot progress"):
        run({0: [Issue(0), Issue(1)], 1: [Issue(1), Issue(0)]}, {0: 1, 1: 1})
    with pytest.raises(ValueError, match="never issued by all"):
        run({0: [Issue(0)], 1: []}, {0: 1})


# -- pricing -----------------------------------------------------------------------------------
def test_device_roofline_floor_and_dtype():
    d = DeviceModel("d", {"float32": 1e12, "bfloat16": 4e12}, hbm_Bps=1e9, kernel_floor_s=1e-6)
    assert d.op_s(Compute("mm", flops=10**7)) == pytest.approx(10e-6)  # compute bound
    assert d.op_s(Compute("mm", flops=10**7, dtype="bfloat16")) == pytest.approx(2.5e-6)
    assert d.op_s(Compute("add", nbytes=10**5)) == pytest.approx(100e-6)  # memory bound
    assert d.op_s(Compute("add", nbytes=10)) == 1e-6  # the floor
    assert d.op_s(Compute("view")) == 0.0  # no kernel
    assert d.op_s(Compute("mm", flops=10**7, dtype="int64")) == pytest.approx(10e-6)
    with pytest.raises(ValueError, match="expected a 'float32' entry"):
        DeviceModel("bad", {"bfloat16": 1.0}, hbm_Bps=1.0, kernel_floor_s=0.0)
    with pytest.raises(ValueError, match="hbm_Bps > 0"):
        DeviceModel("bad", {"float32": 1.0}, hbm_Bps=0.0, kernel_floor_s=0.0)


def test_model_step_prices_collectives_with_the_cost_model():
    # 1000 bytes at 1e9 B/s (1 us) + 1 hop of 1 us for a 2-rank all_gather
    net = CostModel(LinkModel(latency_s=1e-6, bandwidth_Bps=1e9))
    rec = CollectiveRecord(seq=5, op="all_gather", group="world", ranks=(0, 1),
                           dtype=torch.float32, shapes=(((250,),), ((250,),)),
                           bytes_sent=(1000, 1000), bytes_received=(1000, 1000))
    tls = [RankTimeline(r, (Issue(5), Compute("mm", flops=10**6), Wait(5)), (rec,))
           for r in (0, 1)]
    step = model_step(tls, UNIT_DEVICE, net)
    assert (us(step.comm_s), us(step.compute_s), us(step.exposed_s)) == (2, 1, 1)


def test_interconnect_presets():
    assert interconnect("nvlink-node") == CostModel.nvlink_node(8)
    ib = interconnect("ib-cluster", ranks_per_node=2)
    assert ib.node_of(1) == 0 and ib.node_of(2) == 1
    with pytest.raises(ValueError, match="expected one of nvlink-node, ib-cluster"):
        interconnect("ethernet")


def test_price_op_flops_bytes_and_free_ops():
    aten = torch.ops.aten
    a, b = torch.ones(4, 3), torch.ones(3, 5)
    op = price_op(aten.mm.default, (a, b), {}, a @ b)
    assert (op.flops, op.nbytes, op.dtype) == (2 * 4 * 3 * 5, (12 + 15 + 20) * 4, "float32")
    assert price_op(aten.t.default, (a,), {}, a.t()) is None  # a view
    assert price_op(aten.empty.memory_format, ([4],), {}, torch.empty(4)) is None
    x = torch.ones(8, dtype=torch.bfloat16)
    op = price_op(aten.add.Tensor, (x, x), {}, x + x)
    assert (op.flops, op.nbytes, op.dtype) == (0, 48, "bfloat16")


# -- recording on simpg ranks ------------------------------------------------------------------
def test_async_collective_issue_and_wait_points_are_recorded_in_program_order():
    def body():
        x = torch.ones(16, 16)
        with record_step() as rec:
            y = x @ x
            work = dist.all_reduce(y, async_op=True)
            z = x @ x
            work.wait()
            dist.all_reduce(z)  # synchronous: an Issue followed at once by its Wait
        return rec.timeline()

    tls = simpg.run(body, 2)
    for tl in tls:
        kinds = [type(e).__name__ for e in tl.events]
        assert kinds == ["Compute", "Issue", "Compute", "Wait", "Issue", "Wait"], tl.rank
        assert [r.op for r in tl.records] == ["all_reduce", "all_reduce"]
        first, second = (r.seq for r in tl.records)
        assert [e.collective for e in tl.events if not isinstance(e, Compute)] == [
            first, first, second, second]
        assert tl.events[0].flops == 2 * 16 ** 3
    # the last rank to arrive moved every rank's data: none of that is its compute
    assert tls[0].events == tls[1].events


def test_first_use_is_the_first_kernel_touching_the_collectives_storage():
    def body():
        out = torch.zeros(4, 4)
        with record_step() as rec:
            dist.all_reduce(out)  # waited at once, used later
            _ = torch.ones(3) + 1  # unrelated
            _ = out.view(16)[:2] * 2  # a view of the output: its first use
            _ = out.sum()  # a later use: no second Use
        return [type(e).__name__ + (f":{e.op}" if isinstance(e, Compute) else "")
                for e in rec.timeline().events]

    events = simpg.run(body, 2)[0]
    assert events == ["Issue", "Wait", "Compute:ones.default", "Compute:add.Tensor", "Use",
                      "Compute:mul.Tensor", "Compute:sum.default"]


def test_issue_names_the_last_kernel_that_touched_the_collectives_tensors():
    def body():
        a = torch.ones(4, 4)
        with record_step() as rec:
            x = a @ a  # kernel 0: x's producer
            _ = a * 2  # kernel 1: unrelated
            dist.all_reduce(x)
            dist.all_reduce(torch.zeros(4) + 1)  # zeros (kernel 2), then add (3) make it
        return [e for e in rec.timeline().events if isinstance(e, Issue)]

    for issues in simpg.run(body, 2):
        assert [i.after for i in issues] == [0, 3]


def test_functional_collectives_wait_tensor_is_the_wait_point():
    import torch.distributed._functional_collectives as funcol

    def body():
        with record_step() as rec:
            out = funcol.all_reduce(torch.ones(4), "sum", dist.group.WORLD)
            _ = torch.ones(4) * 2
            out = out + 1  # first use: wait_tensor
        return [type(e).__name__ for e in rec.timeline().events]

    kinds = simpg.run(body, 2)[0]
    assert kinds.index("Issue") < kinds.index("Wait")
    assert kinds[kinds.index("Issue") + 1] == "Compute"  # the ones * 2 ran in between


@pytest.mark.parametrize("lib", ["ours", "torch"])
def test_dtensor_local_kernels_are_recorded_with_local_shapes(lib):
    def body():
        if lib == "ours":
            import dtensor as D
        else:
            import torch.distributed.tensor as D
        mesh = D.init_device_mesh("cpu", (2,))
        a = D.distribute_tensor(torch.ones(8, 4), mesh, [D.Shard(0)])
        b = D.distribute_tensor(torch.ones(4, 6), mesh, [D.Replicate()])
        with record_step() as rec:
            c = (a @ b).redistribute(mesh, [D.Replicate()])
        assert c.to_local().shape == (8, 6)
        tl = rec.timeline()
        return [e.flops for e in tl.events if isinstance(e, Compute) and e.flops], [
            r.op for r in tl.records]

    results = simpg.run(body, 2)
    for flops, ops in results:
        assert flops == [2 * 4 * 4 * 6]  # the local (4, 4) @ (4, 6), once
        assert len(ops) == 1 and "all_gather" in ops[0]


def test_record_step_outside_a_rank_says_where_to_open_it():
    with pytest.raises(RuntimeError, match="open it inside a simpg rank"):
        with record_step():
            pass


def test_recorded_sync_collective_models_as_fully_exposed():
    def body():
        with record_step() as rec:
            dist.all_reduce(torch.ones(1024))
        return rec.timeline()

    tls = simpg.run(body, 2)
    net = interconnect("nvlink-node")
    step = model_step(tls, DEVICES["h100"], net)
    (record,) = tls[0].records
    assert step.exposed_s == pytest.approx(net.estimate(record))
    assert step.overlap == 0.0


def test_recording_ranks_leave_no_process_wide_dispatch_flag():
    """Ranks enter and leave record_step() in the same order (the first to enter leaves
    first): TorchDispatchMode.__enter__'s process-wide flags, each restored by its own exit,
    would be left set by the last to leave; the recorder uses the thread's mode stack only."""
    from torch.utils._python_dispatch import is_in_torch_dispatch_mode

    def body():
        world, me = dist.get_world_size(), dist.get_rank()
        recorder = record_step()
        for r in range(world):  # enter in rank order
            if r == me:
                recorder.__enter__()
                torch.ones(2).sum()
            dist.barrier()
        for r in range(world):  # leave in the same order
            if r == me:
                recorder.__exit__(None, None, None)
            dist.barrier()
        return recorder.timeline() is not None

    assert all(simpg.run(body, 4))
    assert not is_in_torch_dispatch_mode()
