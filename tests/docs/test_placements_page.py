"""docs/placements.md's pictures are what the layout gives: each picture, headed by a
``<!-- picture: shape mesh placements -->`` comment, is redrawn by
``dtensor.layout.layout_picture`` and must match character for character."""

from __future__ import annotations

import re

import pytest

from dtensor import Partial, Replicate, Shard  # noqa: F401  (the comments' placements)
from dtensor.layout import layout_picture
from tests.support.paths import ROOT

PAGE = (ROOT / "docs" / "placements.md").read_text()
PICTURES = re.findall(r"<!-- picture: (\([^)]*\)) (\([^)]*\)) (\[.*?\]) -->\n```\n(.*?)\n```",
                      PAGE, flags=re.S)


def test_the_page_has_pictures():
    assert len(PICTURES) >= 6


@pytest.mark.parametrize("shape, mesh, placements, drawn", PICTURES,
                         ids=[f"{s}{m}{p}" for s, m, p, _ in PICTURES])
def test_each_picture_is_the_layout(shape, mesh, placements, drawn):
    assert layout_picture(eval(shape), eval(mesh), eval(placements)) == drawn
