"""Smoke test of benchmarks/bench_training.py: ours and torch's parallel training on a 2x2
simulated mesh for 2 steps both match one device, and every row of the table is there."""

from __future__ import annotations

import pytest
from bench_loader import load_benchmark


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
                 "optimizer bytes/rank (max)", "max rel. loss diff vs 1 device"):
        ours, theirs = table[name]
        assert ours is not None and theirs is not None, name
    for name in ("bytes received/step, dp", "bytes received/step, tp",
                 "collectives/step, dp", "collectives/step, tp"):
        assert table[name][0] > 0 and table[name][1] > 0, name

    assert bench.print_report(args, sides, reference, simulated=True, command="test")
    out = capsys.readouterr().out
    assert "| bytes received/step, tp |" in out and "ours: PASS; torch: PASS" in out


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
