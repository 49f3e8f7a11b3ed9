"""``opdb_tests.check`` (ask about one op) and ``opdb_tests.repro`` (rerun one case): names
resolved, arguments validated before anything runs (exit status 2), verdicts and exit
statuses of an op that holds (cumsum) and of one whose failures are listed (bincount: no
rule, XFAIL). Cheap ops on small meshes only: op_db loads once for the file."""

from __future__ import annotations

import doctest
import re

import pytest

from dtensor.placements import Partial, Replicate, Shard
from opdb_tests import check, repro
from opdb_tests.check import FAIL, OK, XFAIL, CheckArgumentError

# op_db samples trigger torch's own warnings (as in opdb_tests/test_opdb.py)
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


# -- names ------------------------------------------------------------------------------------


@pytest.mark.parametrize("query", ["cumsum", "aten.cumsum.default", "aten.cumsum",
                                   "torch.ops.aten.cumsum.default", "torch.cumsum",
                                   "torch.Tensor.cumsum"])
def test_every_spelling_of_cumsum_resolves_to_its_opinfo(query: str) -> None:
    assert [e.key for e in check.resolve(query).entries] == ["cumsum"]


def test_an_aten_query_names_its_overloads_and_an_opinfo_name_its_variants() -> None:
    assert [str(o) for o in check.resolve("aten.cumsum.default").overloads] \
        == ["aten.cumsum.default"]
    assert check.resolve("torch.cumsum").overloads == ()
    pad = [e.key for e in check.resolve("torch.nn.functional.pad").entries]
    assert "nn.functional.pad.constant" in pad and len(pad) > 1
    assert [e.key for e in check.resolve("nn.functional.pad.constant").entries] \
        == ["nn.functional.pad.constant"]


@pytest.mark.parametrize("query, close", [("cumsun", "cumsum"), ("torch.cumsun", "cumsum"),
                                          ("aten.cumsun.default", "aten.cumsum.default")])
def test_an_unknown_op_is_an_argument_error_with_close_names(query: str, close: str) -> None:
    with pytest.raises(CheckArgumentError, match="did you mean") as info:
        check.resolve(query)
    assert close in info.value.suggestions
    assert info.value.argument == "op" and info.value.value == query


def test_an_unknown_overload_lists_the_real_ones() -> None:
    with pytest.raises(CheckArgumentError, match="has no overload 'nope' .*default, out"):
        check.resolve("aten.cumsum.nope")


# -- argument errors: exit status 2, nothing run ------------------------------------------------


@pytest.mark.parametrize("argv, message", [
    (["cumsum", "--placements", "S(0)", "R", "--mesh", "2"], "has 1 tensor argument"),
    (["cumsum", "--placements", "S(0)", "--mesh", "2,2"], "1 placement.* for a 2-d mesh"),
    # the placements of one tensor given as separate words: the error says how to write them
    (["cumsum", "--placements", "S(0)", "R", "--mesh", "2,2"], "as one word, 'S\\(0\\),R'"),
    (["cumsum", "--placements", "S(3)", "--mesh", "2"], "Shard\\(3\\) is out of range"),
    (["cumsum", "--placements", "X(0)", "--mesh", "2"], "expected R, S\\(d\\) or P\\(op\\)"),
    (["cumsum", "--placements", "S(0)", "--mesh", "2x2"], "sizes separated by commas"),
    (["cumsum", "--sample", "999", "--mesh", "2"], "no usable sample #999"),
    (["cumsun"], "did you mean cumsum"),
    # every sample is checked before any case runs: nothing is printed before the error
    (["cumsum", "--samples", "0", "--placements", "S(2)", "--mesh", "2"],
     "cumsum sample #2 \\(T\\(\\):float32, 0\\), tensor argument 0 .* is 0-d"),
])
def test_check_argument_errors_exit_2(argv: list[str], message: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert check.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert re.search(message, err), err


def test_partial_where_the_dtype_cannot_split_is_an_argument_error() -> None:
    import torch

    with pytest.raises(CheckArgumentError, match="P\\(max\\) cannot hold it"):
        check.fit_placements([(Partial("max"),)], [torch.zeros(3, dtype=torch.complex64)],
                             (2,), "x")
    assert check.fit_placements([(Shard(-1), Replicate())], [torch.zeros(2, 3)], (2, 2),
                                "x") == ((Shard(1), Replicate()),)


# -- verdicts -----------------------------------------------------------------------------------


def test_cumsum_holds_for_given_placements(capsys: pytest.CaptureFixture[str]) -> None:
    assert check.main(["cumsum", "--placements", "S(0),S(2)", "--mesh", "2,2"]) == 0
    out = capsys.readouterr().out
    assert "aten: aten.cumsum.default: rule dtensor.ops." in out
    assert "(picked, " in out  # the strategy the dispatcher picks for these inputs
    for tier in ("sound", "forward", "backward"):
        assert f"  {tier} " in out
    assert "0 FAIL, 0 XFAIL" in out.splitlines()[-1]


def test_the_report_is_data_a_tool_can_read() -> None:
    r = check.check("torch.cumsum", placements=[[Shard(0), Shard(2)]], mesh=(2, 2),
                    tiers=("sound", "forward"))
    assert r.exit_status == 0 and r.ok and r.keys == ("cumsum",)
    assert r.rules["aten.cumsum.default"] is not None
    assert {c.tier for c in r.cases} == {"sound", "forward"}
    assert all(c.verdict == OK for c in r.cases) and r.counts()[OK] == len(r.cases)
    picked = [c for c in r.cases if c.picked]
    assert len(picked) == 1 and picked[0] is r.cases[0] and picked[0].cost is not None
    fwd = [c for c in r.cases if c.tier == "forward"]
    assert [c.inputs for c in fwd] == [((Shard(0), Shard(2)),)]
    assert fwd[0].outputs is not None  # the rule's predicted output placements


def test_a_listed_failure_shows_as_xfail_and_exits_1(capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    # bincount has no rule: expected_failures.py lists it for the sound, forward and inference
    # tiers
    assert check.main(["bincount", "--mesh", "3"]) == 1
    out = capsys.readouterr().out
    assert "aten.bincount.default: NO RULE" in out
    assert "XFAIL" in out and "rerun: .venv/bin/python -m opdb_tests.repro" in out
    assert "0 ok, 0 FAIL, 7 XFAIL" in out.splitlines()[-1]  # sound, forward, inference


def test_a_failure_is_xfail_only_with_the_listed_kind() -> None:
    assert check._verdict("bincount", "sound", "no rule: aten.bincount.default") == XFAIL
    assert check._verdict("bincount", "sound", "wrong values") == FAIL
    assert check._verdict("cumsum", "sound", "no rule: aten.cumsum.default") == FAIL


def test_an_aten_op_no_opinfo_reaches_is_answered_by_its_rule() -> None:
    has = check.check("aten._cdist_forward.default")
    assert has.cases == () and has.exit_status == 0
    assert "nothing to run; every overload has a rule" in has.text()
    missing = check.check("aten._fused_adam.default")
    assert missing.rules == {"aten._fused_adam.default": None} and missing.exit_status == 1


def test_a_factory_has_nothing_to_run_and_says_why() -> None:
    r = check.check("arange", mesh=2)
    assert r.cases == () and r.exit_status == 0
    assert any("no tensor argument" in n for n in r.notes)
    assert r.text().endswith("nothing to run (see the notes)")


def test_check_docstring_example_runs() -> None:
    finder = doctest.DocTestFinder()
    [test] = finder.find(check.check, "check", globs={"check": check.check})
    result = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS).run(test)
    assert result.failed == 0 and result.attempted > 0


# -- repro: the listed defects ------------------------------------------------------------------


def test_repro_too_few_placements_is_an_argument_error(capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    # add's sample takes two tensors; one placement list used to raise StopIteration inside
    # the case and print FAIL
    assert repro.main(["forward", "add", "--mesh", "2,2", "--placements", "S(0),R"]) == 2
    assert "has 2 tensor argument(s)" in capsys.readouterr().err


def test_repro_shard_dim_out_of_range_is_an_argument_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert repro.main(["forward", "cumsum", "--mesh", "2", "--placements", "S(5)"]) == 2
    assert "Shard(5) is out of range" in capsys.readouterr().err


def test_repro_resolves_a_callable_and_prints_what_it_checked(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert repro.main(["forward", "torch.cumsum", "--mesh", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split()[:2] == ["forward", "cumsum[S(0)->S(1)]@mesh(2)"] for line in lines)
    assert lines[-1].startswith("5 case(s): 5 ok, 0 FAIL")


def test_repro_unknown_key_suggests(capsys: pytest.CaptureFixture[str]) -> None:
    assert repro.main(["sound", "cumsun", "--mesh", "2"]) == 2
    assert "did you mean cumsum" in capsys.readouterr().err


def test_repro_a_name_with_several_variants_asks_for_one(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert repro.main(["sound", "nn.functional.pad", "--mesh", "2"]) == 2
    assert "nn.functional.pad.constant" in capsys.readouterr().err
