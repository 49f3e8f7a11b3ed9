"""The coverage report: ``.venv/bin/python -m opdb_tests.coverage``.

Runs the base sweep (``sweep.BASE``, the same cases the default test tier starts from) over
every OpInfo variant and writes, next to this file:

- ``coverage_matrix.txt``: one line per variant, one cell per (tier, placement kind): ``+``
  every case passed, ``x`` some failed, ``.`` no case of that kind, ``-`` tier not applicable.
  Its first line records ``inputs_hash()``; a test fails when the hash no longer matches.
- ``COVERAGE.md``: the counts (rule, sound for all placements, end to end forward, backward,
  variants with no case), overall and per op family, and a tally of the kinds of failure.
- the README's coverage block (between its ``generated:coverage`` markers): the same counts;
  a test fails when they differ from COVERAGE.md's.
- ``coverage.png``: heatmap of op families by placement kind (share of variants passing),
  drawn with matplotlib (the ``report`` extra: ``pip install -e '.[report]'``).

``--update-expected`` also rewrites ``expected_failures.py`` from the sweep: every kind of
failure and its reason as seen today (none kept from before), and the variants with no
case. ``--workers N`` (default: CPU count) runs entries in N processes; ``--only KEY...``
sweeps some variants and prints their failures.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import os
import sys
from pathlib import Path
from typing import Sequence

from opdb_tests.checks import GENERATION

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MATRIX = HERE / "coverage_matrix.txt"
MARKDOWN = HERE / "COVERAGE.md"
PICTURE = HERE / "coverage.png"
EXPECTED_FILE = HERE / "expected_failures.py"
# the sources that determine the matrix: the runtime and the sweep engine
ENGINE = ("cases.py", "causes.py", "checks.py", "sweep.py")
TIER_NAMES = {"sound": "sound", "forward": "fwd", "backward": "bwd", "inference": "inf"}


def inputs_hash() -> str:
    """sha256 over the torch version, every dtensor/ source an op's dispatch can run through
    (not the packages layered on top: checkpoint/, graph/) and the engine sources, each as
    its syntax tree without docstrings: a change to comments, docs or layout alone leaves
    the matrix fresh."""
    import torch

    h = hashlib.sha256(torch.__version__.encode())
    layered = {ROOT / "dtensor" / "checkpoint", ROOT / "dtensor" / "graph"}
    files = sorted(f for f in (ROOT / "dtensor").rglob("*.py")
                   if not layered.intersection(f.parents))
    files += [HERE / n for n in ENGINE]
    for f in files:
        code = _code_only(f.read_text())
        h.update(str(f.relative_to(ROOT)).encode() + b"\0" + code.encode() + b"\0")
    return h.hexdigest()[:16]


def _code_only(source: str) -> str:
    """The module's syntax tree with every docstring dropped (comments never reach it)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def recorded_hash() -> str | None:
    if not MATRIX.exists():
        return None
    first = MATRIX.read_text().split("\n", 1)[0]
    return first.split("inputs-hash:", 1)[1].split()[0] if "inputs-hash:" in first else None


# -- cells ------------------------------------------------------------------------------------


def cell(r, tier: str, kind: str) -> str:  # r: sweep.Result
    if (tier == "sound" and (r.random or not r.rule_level)) or (tier == "backward"
                                                                and not r.backward):
        return "-"
    if r.key in _skipped():  # uninitialized memory: its values pass or fail by chance
        return "s"
    failed = r.failed_kinds(tier)
    if "" in failed:  # no rule at all: every kind fails
        return "x"
    if kind in failed:
        return "x"
    return "+" if kind in r.tried[tier] else "."


def status(r) -> str:
    if r.failed(GENERATION):
        return "sample-error"
    if r.no_cases:
        return "no-cases"
    if not r.aten:
        return "no-aten-call"  # its first sample fails under the recording mode
    return ("rule" if r.has_rule else "no-rule") + ("" if r.rule_level else "/composite")


def passes(r, tier: str) -> bool:
    return bool(r.tried[tier]) and not r.failed(tier) and r.key not in _skipped()


def _skipped() -> dict[str, str]:
    """The variants the tests never compare (SKIP): counted as passing nowhere, so the
    figures do not move between two runs of the same code."""
    from opdb_tests.expected_failures import SKIP

    return SKIP


def matrix_text(results: Sequence, digest: str) -> str:
    from opdb_tests.cases import KINDS

    width = max(len(r.key) for r in results) + 2
    head = " | ".join(f"{TIER_NAMES[t]}: " + " ".join(f"{k:<3}" for k in KINDS)
                      for t in TIER_NAMES)
    lines = [f"# inputs-hash: {digest}  (regenerate: .venv/bin/python -m opdb_tests.coverage)",
             "# + all cases passed   x some failed   . no case of that kind   - not applicable"
             "   s never compared (SKIP)",
             f"{'variant':<{width}}{'status':<20}{head}"]
    for r in results:
        cells = " | ".join(f"{TIER_NAMES[t]}: " + " ".join(f"{cell(r, t, k):<3}" for k in KINDS)
                           for t in TIER_NAMES)
        lines.append(f"{r.key:<{width}}{status(r):<20}{cells}".rstrip())
    return "\n".join(lines) + "\n"


# -- counts -----------------------------------------------------------------------------------


def counts(results: Sequence) -> dict[str, int]:
    tested = [r for r in results if r.cases]
    return {
        "variants": len(results),
        "with cases": len(tested),
        "random (seeded alike, no soundness tier)": sum(bool(r.random) for r in tested),
        "no cases (skipped)": sum(bool(r.no_cases) for r in results),
        "sample generation errors": sum(r.failed(GENERATION) for r in results),
        "one aten op (rule level)": sum(r.rule_level for r in tested),
        "with a rule": sum(r.has_rule for r in tested),
        "sound for all placements": sum(r.rule_level and r.has_rule and passes(r, "sound")
                                        for r in tested),
        "end to end forward": sum(passes(r, "forward") for r in tested),
        "backward (of autograd float)": sum(passes(r, "backward") for r in tested),
        "autograd float": sum(r.backward for r in tested),
        "end to end under inference_mode": sum(passes(r, "inference") for r in tested),
    }


def tally(results: Sequence) -> dict[str, int]:
    """(variant, tier) pairs failing with each category of failure kind (causes.category),
    most common first; a pair failing in two ways counts in both. SKIP variants (random
    uninitialized memory, never compared) are left out."""
    from opdb_tests.causes import category
    from opdb_tests.expected_failures import SKIP

    out: dict[str, int] = {}
    for r in results:
        if r.key in SKIP:
            continue
        for c in {(f.tier, category(f.cause)) for f in r.failures}:
            out[c[1]] = out.get(c[1], 0) + 1
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


def family_rows(results: Sequence) -> tuple[list[str], list[str], list[list[float | None]]]:
    from opdb_tests.cases import KINDS

    fams = sorted({r.family for r in results})
    cols = [f"{TIER_NAMES[t]} {k}" for t in TIER_NAMES for k in KINDS]
    values = []
    for fam in fams:
        rs = [r for r in results if r.family == fam]
        row: list[float | None] = []
        for t in TIER_NAMES:
            for k in KINDS:
                cs = [cell(r, t, k) for r in rs]
                n = sum(c in "+x" for c in cs)
                row.append(sum(c == "+" for c in cs) / n if n else None)
        values.append(row)
    return fams, cols, values


# -- heatmap ----------------------------------------------------------------------------------

TIER_TITLES = {"sound": "sound (rule level)", "fwd": "end to end forward", "bwd": "backward"}


def _matplotlib():
    """matplotlib's colormaps, Figure and Agg canvas, or an error naming the extra to install."""
    try:
        from matplotlib import colormaps
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as e:
        raise ModuleNotFoundError(
            "the coverage heatmap (opdb_tests/coverage.png) is drawn with matplotlib, which is "
            "not installed: install the 'report' extra (.venv/bin/python -m pip install -e "
            "'.[report]') or run  bash scripts/setup.sh", name="matplotlib") from e
    return colormaps, Figure, FigureCanvasAgg


def heatmap(path: str, rows: Sequence[str], cols: Sequence[str],
            values: Sequence[Sequence[float | None]], title: str = "") -> None:
    """Draw ``values`` (pass fractions in [0, 1], ``None`` = nothing tried) as a PNG.

    Rows are labelled on the left, columns at the bottom; a column named ``"tier kind"``
    (``"fwd S~"``) is labelled with its kind, and its tier names the group of columns above
    the plot. Each cell shows its percent; grey cells had no case. Uses the Agg canvas only
    (no pyplot, no window) and writes no version metadata: equal inputs give equal bytes
    with the same matplotlib.
    """
    import numpy as np

    colormaps, Figure, FigureCanvasAgg = _matplotlib()
    data = np.array([[np.nan if v is None else 100.0 * v for v in row] for row in values])
    groups = [c.split(" ", 1)[0] if " " in c else "" for c in cols]
    kinds = [c.split(" ", 1)[1] if " " in c else c for c in cols]

    fig = Figure(figsize=(1.6 + 0.62 * len(cols) + 0.075 * max(map(len, rows)),
                          1.9 + 0.42 * len(rows)), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    cmap = colormaps["RdYlGn"].with_extremes(bad="#e4e4e4")
    im = ax.imshow(np.ma.masked_invalid(data), cmap=cmap, vmin=0, vmax=100, aspect="auto")
    for i, row in enumerate(data):
        for j, v in enumerate(row):
            if np.isnan(v):
                continue
            r, g, b, _ = cmap(v / 100)
            dark = 0.299 * r + 0.587 * g + 0.114 * b < 0.5
            ax.text(j, i, f"{v:.0f}", ha="center", va="center", fontsize=9,
                    color="white" if dark else "black")
    ax.set_xticks(range(len(cols)), kinds)
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel("placement kind of the inputs: R all Replicate, S sharded evenly, "
                  "S~ some shard uneven, P some input Partial, 2-D on a 2-D mesh\n"
                  "(grey: no case of that kind)")
    ax.tick_params(length=0)
    for s in ax.spines.values():
        s.set_visible(False)
    # one labelled band per tier above the columns, white lines between the bands
    start = 0
    for j in range(1, len(cols) + 1):
        if j == len(cols) or groups[j] != groups[start]:
            if j < len(cols):
                ax.axvline(j - 0.5, color="white", linewidth=4)
            ax.text((start + j - 1) / 2, -0.6, TIER_TITLES.get(groups[start], groups[start]),
                    ha="center", va="bottom", fontsize=10, fontweight="bold")
            start = j
    cbar = fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02)
    cbar.set_label("variants passing (%)")
    if title:
        ax.set_title(title, pad=24)
    fig.savefig(path, dpi=110, metadata={"Software": None})


def markdown(results: Sequence, digest: str) -> str:
    c = counts(results)
    fams = sorted({r.family for r in results})
    out = ["# op_db coverage", "",
           "Generated by `.venv/bin/python -m opdb_tests.coverage` from the base sweep "
           f"(inputs-hash `{digest}`; first sample of each OpInfo, soundness on meshes (3,) and "
           "(2,2), end to end on (2,) and (2,2)). Per-variant cells: "
           "[`coverage_matrix.txt`](coverage_matrix.txt).", "",
           "![coverage heatmap](coverage.png)", "",
           "| | count |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in c.items()]
    out += ["", "## By family (OpInfo class)", "",
            "| family | variants | rule level | with rule | sound | forward | backward |",
            "|---|---|---|---|---|---|---|"]
    for fam in fams:
        fc = counts([r for r in results if r.family == fam])
        out.append(f"| {fam} | {fc['variants']} | {fc['one aten op (rule level)']} | "
                   f"{fc['with a rule']} | {fc['sound for all placements']} | "
                   f"{fc['end to end forward']} | {fc['backward (of autograd float)']}/"
                   f"{fc['autograd float']} |")
    out += ["", "## Kinds of failure", "",
            "(variant, tier) pairs failing with each kind (the error type and the aten op that "
            "raised it, wrong values, no rule...; per pair in "
            "`opdb_tests/expected_failures.py`):", "",
            "| kind of failure | (variant, tier) pairs |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in tally(results).items()]
    out += ["", "## Variants with no case", "",
            "Skipped, listed with their reason in `NO_CASES` of "
            "`opdb_tests/expected_failures.py`:", ""]
    out += [f"- `{r.key}`: {r.no_cases}" for r in results if r.no_cases]
    out += ["", "Placement kinds: `R` all Replicate; `S` sharded evenly; `S~` some shard uneven; "
            "`P` some input Partial; `2-D` any case on a 2-D mesh.", ""]
    return "\n".join(out)


# -- expected failures -------------------------------------------------------------------------


def update_expected(results: Sequence) -> int:
    """Rewrite expected_failures.py from this sweep: every reason is today's."""
    from opdb_tests import expectations
    from opdb_tests.checks import TIERS
    from opdb_tests.expected_failures import EXPLORATION

    new: dict[tuple[str, str], dict[str, str]] = {}
    skip: dict[str, str] = {}
    for r in results:
        if r.key in expectations.UNINITIALIZED:
            skip[r.key] = (f"uninitialized memory: {expectations.UNINITIALIZED[r.key]} returns "
                           "unspecified values, so no run can be compared with another")
            continue
        for t in (*TIERS, GENERATION):
            fs = [f for f in r.failures if f.tier == t]
            if fs:
                new[(r.key, t)] = expectations.reasons(fs)
    no_cases = {r.key: r.no_cases for r in results if r.no_cases}
    # found by hypothesis draws only, so kept (the slow tier fails when one passes)
    exploration = {kt: why for kt, why in EXPLORATION.items() if kt not in new}
    EXPECTED_FILE.write_text(expectations.render(new, skip, no_cases, exploration))
    return len(new)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m opdb_tests.coverage", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--update-expected", action="store_true")
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if not args.only:
        _matplotlib()  # fail before the sweep, not after it
    from opdb_tests.cases import entries
    from opdb_tests.sweep import BASE, sweep

    keys = args.only or [e.key for e in entries()]
    results = sweep(keys, BASE, workers=min(args.workers, len(keys)))
    if args.only:
        for r in results:
            print(f"{r.key}: {status(r)}, aten {', '.join(r.aten)}")
            for f in r.failures:
                print(f.report())
        return 0
    digest = inputs_hash()
    MATRIX.write_text(matrix_text(results, digest))
    MARKDOWN.write_text(markdown(results, digest))
    from opdb_tests.coverage_readme import write_readme

    write_readme(counts(results))
    fams, cols, values = family_rows(results)
    sizes = {f: sum(r.family == f for r in results) for f in fams}
    heatmap(str(PICTURE), [f"{f} ({sizes[f]})" for f in fams], cols, values,
            title="op_db coverage: percent of OpInfo variants passing, by family (count)")
    if args.update_expected:
        n = update_expected(results)
        print(f"wrote {EXPECTED_FILE.relative_to(ROOT)} ({n} entries)")
    slow = sorted(results, key=lambda r: -r.seconds)[:8]
    print("slowest: " + ", ".join(f"{r.key} {r.seconds:.1f}s" for r in slow))
    for k, v in counts(results).items():
        print(f"{k:>32}: {v}")
    print("kinds of failure, (variant, tier) pairs:")
    for k, v in tally(results).items():
        print(f"{k:>48}: {v}")
    print(f"wrote {MATRIX.relative_to(ROOT)}, {MARKDOWN.relative_to(ROOT)}, "
          f"{PICTURE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
