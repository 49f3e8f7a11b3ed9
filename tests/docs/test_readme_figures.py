"""The README's figures are the scripts' own: every generated block carries the checksum its
script wrote (an edit by hand fails), and the coverage block says what COVERAGE.md says."""

from __future__ import annotations

import re

import pytest

from opdb_tests import readme_figures as rf
from opdb_tests import coverage_readme

README = rf.README.read_text()
BENCHMARK_BLOCKS = ("bench-simpg", "bench-redistribute", "bench-training", "bench-training-gloo",
                    "bench-dispatch", "bench-opdb", "bench-checkpoint", "bench-scale",
                    "bench-graph")


@pytest.mark.parametrize("name", rf.names(README))
def test_generated_block_is_as_its_script_wrote_it(name: str) -> None:
    problem = rf.verify_block(README, name)
    assert problem is None, problem


def test_every_benchmark_table_is_a_generated_block() -> None:
    missing = [n for n in BENCHMARK_BLOCKS + ("coverage",) if n not in rf.names(README)]
    assert not missing, f"README lacks the generated blocks {missing}"


def test_a_figure_typed_over_is_detected() -> None:
    name = rf.names(README)[0]
    body, _ = rf.read_block(README, name)
    digit = re.search(r"\d", body)
    assert digit is not None, f"block {name!r} holds no figure"
    i = digit.start()
    edited_body = body[:i] + str((int(body[i]) + 1) % 10) + body[i + 1:]
    edited = README.replace(body, edited_body, 1)
    problem = rf.verify_block(edited, name)
    assert problem is not None and "edited by hand" in problem


def test_rewriting_a_block_touches_only_that_block() -> None:
    text = ("intro\n<!-- generated:a begin -->\nold a\n<!-- generated:a end -->\nmiddle\n"
            "<!-- generated:b begin -->\nold b\n<!-- generated:b end -->\nend\n")
    new = rf.replace_block(text, "a", "| 1 | 2 |", "python make_a.py --write-readme")
    assert rf.read_block(new, "a")[0] == "| 1 | 2 |"
    assert rf.read_block(new, "b")[0] == "old b"
    assert new.startswith("intro\n") and "\nmiddle\n" in new and new.endswith("end\n")
    assert rf.verify_block(new, "a") is None
    assert "no checksum" in (rf.verify_block(new, "b") or "")
    with pytest.raises(rf.BlockError, match="0 blocks named 'c'"):
        rf.replace_block(text, "c", "x", "cmd")


def test_readme_coverage_drift_from_coverage_md_is_detected() -> None:
    markdown = coverage_readme.MARKDOWN.read_text()
    counts = coverage_readme.parse_counts(markdown.split("\n## ", 1)[0])
    assert counts.get("variants", 0) > 0, "COVERAGE.md has no count table"
    good = rf.replace_block(README, "coverage", coverage_readme.block(counts), "cmd")
    assert coverage_readme.drift(good, markdown) is None
    drifted = dict(counts, **{"end to end forward": counts["end to end forward"] + 1})
    bad = rf.replace_block(README, "coverage", coverage_readme.block(drifted), "cmd")
    problem = coverage_readme.drift(bad, markdown)
    assert problem is not None and "differ from opdb_tests/COVERAGE.md" in problem


def test_tee_prints_and_keeps(capsys: pytest.CaptureFixture[str]) -> None:
    with rf.tee() as report:
        print("| a | 1 |")
    assert report.getvalue() == "| a | 1 |\n"
    assert capsys.readouterr().out == "| a | 1 |\n"
    assert rf.through_first_table("head\n\n| a |\n|---|\n| 1 |\n\nsteps\n") == \
        "head\n\n| a |\n|---|\n| 1 |"


def test_generated_blocks_add_no_headings_to_the_readme() -> None:
    # a heading in a block becomes a README section and a page title in the docs' navigation
    text = rf.README.read_text()
    for name in rf.names(text):
        body, _ = rf.read_block(text, name)
        assert rf.demote_headings(body) == body, f"block {name!r} has a markdown heading"
    report = "# title\n```text\n# a comment in a fence\n```\n## table: one device"
    assert rf.demote_headings(report) == ("**title**\n```text\n# a comment in a fence\n```\n"
                                          "**table: one device**")
