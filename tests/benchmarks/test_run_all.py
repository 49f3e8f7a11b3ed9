"""benchmarks/run_all.py: the list of README blocks it reruns is derived from the scripts and
covers every block of README.md; commands, selection and the runner, without running any
benchmark."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from opdb_tests import readme_figures as rf
from benchmarks import run_all

README = rf.README.read_text()


def test_derived_list_covers_every_readme_block() -> None:
    derived = [job.block for job in run_all.jobs()]
    assert len(derived) == len(set(derived)), f"a block is written twice: {derived}"
    in_readme = rf.names(README)
    missing = sorted(set(in_readme) - set(derived))
    assert not missing, f"README blocks no script of run_all's list writes: {missing}"
    stray = sorted(set(derived) - set(in_readme))
    assert not stray, f"scripts write blocks that README.md lacks: {stray}"


def test_every_script_that_writes_a_block_is_found() -> None:
    writers = {p.name for p in run_all.BENCHMARKS.glob("*.py")
               if "readme_figures.write_readme(" in p.read_text()}
    found = {Path(job.program[0]).name for job in run_all.jobs() if job.program[0] != "-m"}
    assert found == writers


def test_a_new_script_is_picked_up_with_its_flag_and_quick(tmp_path: Path) -> None:
    bench = tmp_path / "benchmarks"
    bench.mkdir()
    (bench / "bench_new.py").write_text(
        "import argparse\n"
        "p = argparse.ArgumentParser()\n"
        "p.add_argument('--quick', action='store_true')\n"
        "p.add_argument('--big_model', action='store_true')\n"
        "args = p.parse_args()\n"
        "readme_figures.write_readme('new-big' if args.big_model else 'new', 'x', 'cmd')\n")
    (bench / "helper.py").write_text("x = 1\n")
    jobs = run_all.jobs(bench, root=tmp_path)
    assert jobs[:2] == [
        run_all.Job("new-big", ("benchmarks/bench_new.py", "--big-model"), True),
        run_all.Job("new", ("benchmarks/bench_new.py",), True, excludes=("--big-model",))]
    assert jobs[2].block == "coverage"


def test_a_block_name_run_all_cannot_read_is_an_error(tmp_path: Path) -> None:
    script = tmp_path / "bench_odd.py"
    script.write_text("readme_figures.write_readme(NAME, 'x', 'cmd')\n")
    with pytest.raises(ValueError, match="bench_odd.py: write_readme's block name 'NAME'"):
        run_all.script_jobs(script, root=tmp_path)


def _job(block: str) -> run_all.Job:
    return next(j for j in run_all.jobs() if j.block == block)


def test_commands_are_the_recorded_ones_plus_quick_where_taken() -> None:
    def argv(block: str, quick: bool) -> list[str]:
        cmd = run_all.command(_job(block), quick, README)
        assert cmd[0] == sys.executable
        return cmd[1:]

    gloo, simulated = argv("bench-training-gloo", True), argv("bench-training", True)
    assert gloo[0] == simulated[0] == "benchmarks/bench_training.py"
    assert "--gloo" in gloo and "--gloo" not in simulated
    assert "--quick" in gloo and "--write-readme" in gloo
    assert "--quick" not in argv("bench-training", False)
    opdb = argv("bench-opdb", True)  # bench_opdb has no --quick: run as recorded
    assert opdb[0] == "benchmarks/bench_opdb.py" and "--quick" not in opdb
    assert argv("coverage", True) == ["-m", "opdb_tests.coverage"]
    for job in run_all.jobs():  # each reruns what its marker records
        _, meta = rf.read_block(README, job.block)
        recorded = meta.split("`")[1].split()[1:]
        assert argv(job.block, False) == recorded, job.block


def test_a_marker_naming_another_script_is_not_trusted() -> None:
    text = ("<!-- generated:bench-dispatch begin: `python benchmarks/other.py --write-readme` "
            "writes this block -->\nx\n<!-- generated:bench-dispatch end -->\n")
    job = _job("bench-dispatch")
    assert run_all.recorded_command(job, text) is None
    assert run_all.command(job, False, text)[1:] == ["benchmarks/bench_dispatch.py",
                                                     "--write-readme"]


def test_select_by_block_or_script_keeps_the_order() -> None:
    jobs = run_all.jobs()
    chosen = run_all.select(jobs, ["coverage", "bench_training", "bench-dispatch"])
    assert [j.block for j in chosen] == ["bench-dispatch", "bench-training-gloo",
                                         "bench-training", "coverage"]
    assert run_all.select(jobs, None) == jobs
    with pytest.raises(ValueError, match="no README block or script named nope"):
        run_all.select(jobs, ["nope"])


def test_list_runs_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_all.main(["--list", "--quick"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == [j.block for j in run_all.jobs()]


def test_run_reports_ok_failure_and_timeout(tmp_path: Path) -> None:
    ok = run_all.run([sys.executable, "-c", "print('figures')"], 60, tmp_path / "ok.log")
    assert ok.ok and (tmp_path / "ok.log").read_text() == "figures\n"
    bad = run_all.run([sys.executable, "-c", "raise SystemExit(3)"], 60, tmp_path / "bad.log")
    assert bad.status == "failed (exit 3)" and not bad.ok
    # a child that outlives the timeout is ended with its process group
    slow = run_all.run([sys.executable, "-c", "import time; time.sleep(600)"], 0.5,
                       tmp_path / "slow.log")
    assert slow.status == "timed out after 0.5 s"
