"""Smoke test of benchmarks/bench_training.py: ours and torch's parallel training on a 2x2
simulated mesh for 2 steps both match one device, every row of the table is there (the
modelled step and exposed communication too), and rows of the feature table."""

from __future__ import annotations

import pytest
from tests.support.bench_loader import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_training")


def test_both_libraries_train_like_one_device_and_report_every_row(bench, capsys):
    args = bench.parse_args(["--quick", "--mesh", "2x2"])
    sides, reference = bench.compare(args)
    assert len(reference) == 2
    for lib in bench.LIBS:
        side = sides[lib]
        assert (side.config, side.mesh, side.error) == (bench.FULL, (2, 2), ""), lib
        assert len(side.ranks) == 4
        for r in side.ranks:
            assert r.losses == pytest.approx(reference, rel=1e-5), lib
            assert len(r.step_s) == 2
    # fully sharded over dp=2 and tensor parallel over tp=2: well under the whole model
    whole = sum(p.numel() * 4 for p in bench.build_model(args).parameters())
    for lib in bench.LIBS:
        assert 0 < max(r.state["parameters"] for r in sides[lib].ranks) < whole * 0.75, lib

    table = {name: (ours, theirs) for name, ours, theirs in bench.rows(sides, reference)}
    for name in ("step time (s, median)", "bytes received/step, dp",
                 "bytes received/step, tp", "collectives/step, dp", "collectives/step, tp",
                 "parameters bytes/rank (max)", "gradients bytes/rank (max)",
                 "optimizer bytes/rank (max)", bench.PEAK, "max rel. loss diff vs 1 device"):
        ours, theirs = table[name]
        assert ours is not None and theirs is not None, name
    for name in ("bytes received/step, dp", "bytes received/step, tp",
                 "collectives/step, dp", "collectives/step, tp"):
        assert table[name][0] > 0 and table[name][1] > 0, name

    # the peak (Note [peak live bytes] in simpg.steprecorder) holds at least the state at the
    # step's end: parameters and optimizer state counted from the start, gradients once made
    for lib in bench.LIBS:
        for r in sides[lib].ranks:
            assert r.peak_bytes >= sum(r.state.values()) > 0, (lib, r.rank)

    # the modelled rows (simpg.overlap): per preset, step = compute + exposed, all positive;
    # InfiniBand between the dp ranks is slower than one NVLink node
    for lib, i in (("ours", 0), ("torch", 1)):
        for preset in ("nvlink-node", "ib-cluster"):
            step, compute, exposed = (table[f"{kind}, {preset} (us)"][i] for kind in (
                "modelled step", "modelled compute", "exposed comm"))
            assert 0 < compute < step and exposed > 0, (lib, preset)
            assert step == pytest.approx(compute + exposed), (lib, preset)
            serial = table[f"modelled comm serial, {preset} (us)"][i]
            hidden = table[f"overlap (comm hidden), {preset}"][i]
            assert serial > 0 and 0 <= hidden <= 1, (lib, preset)
            assert hidden == pytest.approx(max(0.0, 1 - exposed / serial)), (lib, preset)
            # a program that waits before it uses a result (any correct one) waits at first
            # use no earlier than where it waits: no more exposed
            first_use = table[f"exposed comm at first use, {preset} (us)"][i]
            assert 0 <= first_use <= exposed * (1 + 1e-9), (lib, preset)
        assert (table["exposed comm, ib-cluster (us)"][i]
                > table["exposed comm, nvlink-node (us)"][i]), lib
        timeline = sides[lib].ranks[0].timeline
        issued = {e.collective for e in timeline.events if type(e).__name__ == "Issue"}
        assert issued == {r.seq for r in timeline.records} and len(issued) > 0, lib

    assert bench.print_report(args, sides, reference, simulated=True, command="test")
    out = capsys.readouterr().out
    assert "| bytes received/step, tp |" in out and "ours: PASS; torch: PASS" in out
    assert "| exposed comm, nvlink-node (us) |" in out and "modelled rows:" in out
    assert f"| {bench.PEAK} |" in out

    # two rows of the feature table (the fsdp+tp row reuses the run above)
    names = (bench.FULL, "hsdp", "fsdp accum x2")
    features, feature_reference = bench.compare_features(args, sides, names)
    assert features[bench.FULL] is sides
    table = {row["feature"]: row for row in bench.feature_rows(features, feature_reference)}
    for name in names:
        for lib in bench.LIBS:
            figures = table[name][lib]
            assert "error" not in figures, (name, lib, figures)
            assert figures["step_s"] > 0 and figures["exposed_s"] > 0, (name, lib)
            assert 0 <= figures["first_use_s"] <= figures["exposed_s"] * (1 + 1e-9)
            assert figures["state"] > 0 and all(b > 0 for b in figures["bytes"].values())
            assert figures["peak"] >= figures["state"], (name, lib)
    for lib in bench.LIBS:  # hsdp gathers over shard, all-reduces over replicate
        assert set(table["hsdp"][lib]["bytes"]) == {"replicate", "shard"}, lib
        # training like one device (the same global batch in two micro-batches)
        assert table["fsdp accum x2"][lib]["loss_diff"] < 1e-5, lib
        assert table["hsdp"][lib]["loss_diff"] < 1e-5, lib
    assert table["fsdp accum x2"]["ours"]["bytes"] == table["fsdp accum x2"]["torch"]["bytes"]
    bench.print_features(args, list(table.values()))
    out = capsys.readouterr().out
    assert "| hsdp |" in out and "| fsdp accum x2 |" in out
    assert "peak live bytes/rank ours / torch" in out


# slow tier: the benchmark's --gloo option (35 s of process start-up); training on gloo
# is checked by test_train's torchrun test
@pytest.mark.slow
@pytest.mark.gloo
def test_gloo_option_trains_both_libraries_on_two_processes(bench):
    argv = ["--quick", "--mesh", "1x2"]
    args = bench.parse_args(argv)
    sides = bench.run_gloo(args, argv, timeout_s=300)
    reference = bench.single_device_losses(args)
    for lib in bench.LIBS:
        assert sides[lib].error == "" and len(sides[lib].ranks) == 2, lib
        for r in sides[lib].ranks:
            assert r.losses == pytest.approx(reference, rel=1e-5), lib
            assert r.records == []  # real processes: nothing traced
    names = [name for name, _, _ in bench.rows(sides, reference, simulated=False)]
    assert names[0] == "step time (s, median)" and not any("collectives" in n for n in names)
