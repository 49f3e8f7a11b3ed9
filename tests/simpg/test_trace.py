"""simpg.trace(): what the ranks' collectives moved, its cost estimate and its timeline."""

from __future__ import annotations

import json

import torch
import torch.distributed as dist

import simpg


def _program():
    r = dist.get_rank()
    dist.all_reduce(torch.ones(256))  # 1 KB
    outs = [torch.empty(k + 1) for k in range(4)]
    dist.all_gather(outs, torch.ones(r + 1))  # uneven: ranks hold 4, 8, 12, 16 bytes
    pair = dist.new_group([0, 1])
    if r < 2:
        dist.broadcast(torch.ones(8, dtype=torch.float64), src=0, group=pair)
    if r == 2:
        dist.send(torch.ones(3, dtype=torch.int32), dst=3)
    if r == 3:
        dist.recv(torch.empty(3, dtype=torch.int32), src=2)


def test_trace_records_op_group_dtype_shapes_and_ring_bytes():
    with simpg.trace() as t:
        simpg.run(_program, 4)
    ops = sorted((r.op, r.group, r.ranks) for r in t.records)  # completion order may vary
    assert ops == sorted([
        ("all_reduce", "world", (0, 1, 2, 3)),
        ("all_gather", "world", (0, 1, 2, 3)),
        ("broadcast", "ranks(0,1)", (0, 1)),
        ("send", "world", (2, 3)),
    ])
    ar, ag, bc, p2p = sorted(t.records, key=lambda r: ["all_reduce", "all_gather", "broadcast",
                                                       "send"].index(r.op))
    assert ar.dtype == torch.float32 and ar.reduce_op == "sum"
    assert ar.shapes == (((256,),),) * 4
    assert ar.bytes_received == (2 * (1024 - 256),) * 4  # ring: 2 (n-1)/n of 1 KB
    assert ag.bytes_received == (40 - 4, 40 - 8, 40 - 12, 40 - 16)
    assert ag.bytes_sent == (40 - 8, 40 - 12, 40 - 16, 40 - 4)
    assert bc.root == 0 and bc.bytes_received == (0, 64)
    assert p2p.bytes_sent == (12, 0) and p2p.bytes_received == (0, 12)
    assert sum(t.bytes_received().values()) == sum(sum(r.bytes_sent) for r in t.records)


def test_trace_inside_a_rank_sees_only_its_collectives():
    def body():
        pair = dist.new_group([0, 1])
        other = dist.new_group([2, 3])
        with simpg.trace() as t:
            dist.all_reduce(torch.ones(1), group=pair if dist.get_rank() < 2 else other)
            dist.barrier()
        return [r.ranks for r in t.records]

    out = simpg.run(body, 4)
    assert out[0] == [(0, 1), (0, 1, 2, 3)]
    assert out[3] == [(2, 3), (0, 1, 2, 3)]


def test_cost_estimate_and_chrome_timeline(tmp_path):
    with simpg.trace() as t:
        simpg.run(_program, 4)
    one_node = t.estimate(simpg.CostModel.nvlink_node(8))
    cluster = t.estimate(simpg.CostModel.infiniband_cluster(ranks_per_node=2))
    assert 0 < one_node.total_s < cluster.total_s
    assert "all_reduce" in str(one_node)
    path = tmp_path / "trace.json"
    t.write_chrome_trace(str(path), cost_model=simpg.CostModel.nvlink_node(8))
    events = json.loads(path.read_text())["traceEvents"]
    tracks = {e["tid"] for e in events if e["ph"] == "X"}
    assert tracks == {0, 1, 2, 3}
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {"rank 0", "rank 1", "rank 2", "rank 3"}


def test_no_trace_open_records_nothing():
    with simpg.trace() as t:
        pass
    simpg.run(_program, 4)
    assert t.records == []
