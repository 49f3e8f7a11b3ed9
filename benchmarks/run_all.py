"""Rerun every generated block of the README in one go: each script that writes one, with
``--write-readme``, in a fixed order, each in its own process with a timeout.

    .venv/bin/python benchmarks/run_all.py --list            # the blocks and their commands
    .venv/bin/python benchmarks/run_all.py --quick           # all, --quick where a script has it
    .venv/bin/python benchmarks/run_all.py --only bench-dispatch bench-scale

The list is derived, not written by hand: every ``benchmarks/*.py`` that calls
``write_readme(...)`` (the block's name is the call's first argument: a string, or
``"a" if args.flag else "b"``, where ``--flag`` selects block ``a``), in file-name order, then
the op-coverage block that ``opdb_tests.coverage`` writes (its name and command are
``opdb_tests.coverage_readme``'s). ``tests/benchmarks/test_run_all.py`` checks that the list
covers every block of README.md.

Each block is rerun with the command its README begin marker records (how its figures were
made: ``bench_opdb.py --ops 2000``, ``bench_checkpoint.py --repeat 5``, ...); ``--quick`` adds
``--quick`` to the scripts that take it; the others (bench_opdb, the coverage sweep) run as
recorded, so leave them out with ``--only`` when time is short. A script's output goes to a
log file; this prints one line per block: ok or failed, seconds, the 1-minute load average
before and after, the log.
"""

from __future__ import annotations

import argparse
import ast
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
if str(ROOT) not in sys.path:  # run as a script: the root's packages are importable
    sys.path.insert(0, str(ROOT))

from opdb_tests import readme_figures  # noqa: E402  (after the sys.path line above)


@dataclass(frozen=True)
class Job:
    """One README block and the program that writes it.

    ``program`` is what follows the interpreter: a script path (relative to the root) and the
    flags that select this block, or ``-m module``."""

    block: str
    program: tuple[str, ...]
    takes_quick: bool
    takes_write_readme: bool = True
    excludes: tuple[str, ...] = ()  # flags that would select another block of the script


def _is_call_to(node: ast.AST, name: str) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    return (isinstance(f, ast.Name) and f.id == name) or (
        isinstance(f, ast.Attribute) and f.attr == name)


Selected = tuple[str, tuple[str, ...], tuple[str, ...]]  # block, flags it needs, flags it must lack


def _blocks(arg: ast.expr) -> list[Selected]:
    """(block, flags selecting it, flags selecting another) for a write_readme call's first
    argument."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return [(arg.value, (), ())]
    if isinstance(arg, ast.IfExp) and isinstance(arg.test, ast.Attribute):
        flag = "--" + arg.test.attr.replace("_", "-")
        return ([(b, (flag, *f), x) for b, f, x in _blocks(arg.body)]
                + [(b, f, (flag, *x)) for b, f, x in _blocks(arg.orelse)])
    raise ValueError(f"write_readme's block name {ast.unparse(arg)!r} is neither a string nor "
                     "'\"a\" if args.flag else \"b\"': run_all.py cannot tell which block "
                     "it writes")


def script_jobs(path: Path, root: Path = ROOT) -> list[Job]:
    """The blocks that the script at ``path`` writes (none if it never calls write_readme)."""
    tree = ast.parse(path.read_text(), str(path))
    calls = [n for n in ast.walk(tree) if _is_call_to(n, "write_readme") and n.args]
    quick = any(_is_call_to(n, "add_argument") and n.args
                and isinstance(n.args[0], ast.Constant) and n.args[0].value == "--quick"
                for n in ast.walk(tree))
    script = path.resolve().relative_to(root.resolve()).as_posix()
    try:
        return [Job(block, (script, *flags), quick, excludes=excludes)
                for call in calls for block, flags, excludes in _blocks(call.args[0])]
    except ValueError as e:
        raise ValueError(f"{script}: {e}") from None


def coverage_job() -> Job:
    from opdb_tests import coverage_readme

    argv = shlex.split(coverage_readme.COMMAND)[1:]  # without the interpreter
    return Job(coverage_readme.BLOCK, tuple(argv), takes_quick=False, takes_write_readme=False)


def jobs(directory: Path = BENCHMARKS, root: Path = ROOT) -> list[Job]:
    """Every block's job, in the order run_all runs them: scripts by file name, then coverage."""
    out = [job for path in sorted(directory.glob("*.py"))
           if path.name not in ("readme_figures.py", Path(__file__).name)
           for job in script_jobs(path, root)]
    return out + [coverage_job()]


def recorded_command(job: Job, readme: str) -> list[str] | None:
    """The command in the block's begin marker, without the interpreter, if it runs this
    job's program (a marker edited to name another script is not trusted)."""
    if job.block not in readme_figures.names(readme):
        return None
    _, meta = readme_figures.read_block(readme, job.block)
    start, end = meta.find("`"), meta.find("`", meta.find("`") + 1)
    if start < 0 or end < 0:
        return None
    argv = shlex.split(meta[start + 1:end])[1:]
    program = argv[:2] if job.program[0] == "-m" else argv[:1]
    if (tuple(program) != job.program[:len(program)] or not set(job.program) <= set(argv)
            or set(job.excludes) & set(argv)):
        return None
    return argv


def command(job: Job, quick: bool, readme: str) -> list[str]:
    """What run_all runs for ``job``: the recorded command (or the job's program with
    ``--write-readme``), plus ``--quick`` when asked and the script takes it."""
    argv = recorded_command(job, readme)
    if argv is None:
        argv = [*job.program] + (["--write-readme"] if job.takes_write_readme else [])
    if quick and job.takes_quick and "--quick" not in argv:
        argv.append("--quick")
    return [sys.executable, *argv]


def _load() -> str:
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "?"


@dataclass(frozen=True)
class Outcome:
    status: str  # "ok", "failed (exit N)", "timed out after S s"
    seconds: float
    load_before: str
    load_after: str

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def run(cmd: Sequence[str], timeout_s: float, log: Path, cwd: Path = ROOT) -> Outcome:
    """Run ``cmd`` with its output to ``log``; past ``timeout_s`` its whole process group (a
    benchmark's gloo workers and child interpreters too) is terminated, then killed."""
    before, t0 = _load(), time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(list(cmd), cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout_s)
            status = "ok" if rc == 0 else f"failed (exit {rc})"
        except subprocess.TimeoutExpired:
            status = f"timed out after {timeout_s:g} s"
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=10)
                    break
                except subprocess.TimeoutExpired:
                    continue
    return Outcome(status, time.monotonic() - t0, before, _load())


def select(all_jobs: list[Job], only: Sequence[str] | None) -> list[Job]:
    """The jobs named by block (``bench-dispatch``) or script (``bench_training``: all its
    blocks), in run_all's order; ValueError naming the choices for an unknown name."""
    if not only:
        return all_jobs
    known = {j.block for j in all_jobs} | {Path(j.program[0]).stem for j in all_jobs}
    unknown = [n for n in only if n not in known]
    if unknown:
        raise ValueError(f"no README block or script named {', '.join(unknown)}; blocks: "
                         f"{', '.join(j.block for j in all_jobs)}")
    return [j for j in all_jobs if j.block in only or Path(j.program[0]).stem in only]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="pass --quick to scripts that take it")
    p.add_argument("--only", nargs="+", metavar="NAME",
                   help="only these blocks (or scripts, e.g. bench_training)")
    p.add_argument("--list", action="store_true", help="list the blocks and commands, run none")
    p.add_argument("--timeout", type=float, default=3600, metavar="S",
                   help="seconds a script may run (default 3600)")
    p.add_argument("--logs", metavar="DIR", help="where each script's output goes "
                   "(default: a new temporary directory)")
    args = p.parse_args(argv)
    try:
        chosen = select(jobs(), args.only)
    except ValueError as e:
        p.error(str(e))
    readme = readme_figures.README.read_text()
    if args.list:
        for job in chosen:
            print(f"{job.block:<22} {shlex.join(command(job, args.quick, readme))}")
        return 0
    logs = Path(args.logs or tempfile.mkdtemp(prefix="run_all-"))
    logs.mkdir(parents=True, exist_ok=True)
    print(f"{len(chosen)} blocks, one at a time; logs in {logs}", flush=True)
    failed = []
    for job in chosen:
        # each rerun sees the README as the previous one left it
        cmd = command(job, args.quick, readme_figures.README.read_text())
        log = logs / f"{job.block}.log"
        o = run(cmd, args.timeout, log)
        if not o.ok:
            failed.append(job.block)
        print(f"{job.block:<22} {o.status:<20} {o.seconds:7.0f} s  load {o.load_before} -> "
              f"{o.load_after}  {log}", flush=True)
    print(f"{len(chosen) - len(failed)} of {len(chosen)} ok"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
