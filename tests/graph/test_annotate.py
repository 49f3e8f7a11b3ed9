"""dtensor.graph annotations: ShardSpec, shard_hint, and the errors bad annotations get."""

from __future__ import annotations

import pytest
import torch

from dtensor import Partial, Replicate, Shard
from dtensor.graph import AnnotationError, ShardSpec, capture_fn, infer, shard_hint
from dtensor.graph.annotate import HINT_OP

R = Replicate()


@pytest.mark.parametrize("spec", [ShardSpec([Shard(0), R]), ShardSpec([Partial(), Shard(1)],
                                                                       mutable=True),
                                  ShardSpec([Partial("max")])])
def test_spec_str_parses_back_and_repr_evals_back(spec):
    assert ShardSpec.parse(str(spec)) == spec
    assert eval(repr(spec), {"ShardSpec": ShardSpec, "Shard": Shard, "Replicate": Replicate,
                             "Partial": Partial}) == spec


@pytest.mark.parametrize("text", ["S(0),R", "[S(x)]", "[Q]"])
def test_spec_parse_rejects_garbage(text):
    with pytest.raises(ValueError, match="ShardSpec.parse"):
        ShardSpec.parse(text)


def test_spec_rejects_non_placements():
    with pytest.raises(TypeError, match="not a placement"):
        ShardSpec([0, R])


def test_shard_hint_is_identity_in_eager_and_a_node_when_captured():
    x = torch.randn(4, 4)
    spec = ShardSpec([Shard(0)], mutable=True)
    assert shard_hint(x, spec) is x
    g = capture_fn(lambda a: shard_hint(a * 2, spec) + 1, x)
    hints = [n for n in g.gm.graph.nodes if n.target is HINT_OP]
    assert len(hints) == 1 and hints[0].args[1] == "[S(0)]~"
    torch.testing.assert_close(g(x)[0] if isinstance(g(x), tuple) else g(x), x * 2 + 1)


def test_shard_hint_needs_a_spec():
    with pytest.raises(TypeError, match="must be a ShardSpec"):
        shard_hint(torch.ones(2), [Shard(0)])


def _graph():
    return capture_fn(lambda x, w: torch.relu(x @ w), torch.randn(8, 4), torch.randn(4, 6),
                      names=["x", "w"])


@pytest.mark.parametrize("annotations, names, match", [
    ({"x": ShardSpec([Shard(2), R])}, ["x"], "Shard.2. is out of range for a 2-d tensor"),
    ({"w": ShardSpec([Shard(0)])}, ["w"], "1 placements .* for a 2-d mesh"),
    ({"y": ShardSpec([R, R])}, ["y"], "not a value of the graph"),
    ({"x": ShardSpec([Partial(), R])}, ["x"], "cannot be Partial"),
    ({"x": ShardSpec([Shard(0), R]), "x_1": ShardSpec([R, R])}, ["x", "x_1"],
     "annotated twice"),  # x_1: the placeholder's node name
    ({"x": [Shard(0), R]}, ["x"], "not a ShardSpec"),
    ({"mm": ShardSpec([Partial("max"), R])}, ["mm"], "no strategy of aten.mm"),
    ({"x": ShardSpec([Shard(0, sizes=(5, 3)), R])}, ["x"], r"torch.chunk pieces only, not S\(0\)"),
], ids=["shard-dim-beyond-rank", "wrong-placement-count", "unknown", "partial-input",
        "twice", "not-a-spec", "no-strategy", "split-rule"])
def test_impossible_annotations_raise_naming_the_values(annotations, names, match):
    assert [n.name for n in _graph().placeholders()] == ["x_1", "w_1"]
    with pytest.raises(AnnotationError, match=match) as info:
        infer(_graph(), (2, 2), annotations)
    assert info.value.values == names


def test_hint_beyond_rank_names_the_hint_node():
    g = capture_fn(lambda x: shard_hint(x + 1, ShardSpec([Shard(3)])), torch.randn(4, 4))
    with pytest.raises(AnnotationError, match="out of range") as info:
        infer(g, (2,))
    assert info.value.values == ["shard_hint"]
