"""What a lecturer adopts the book for: every chapter opens with its goals, prerequisites and reading time.

The reading time is a number in the prose, so it is checked here against the chapter's own text:
the words of its markdown at 150 words a minute (technical prose with formulas), within a third or
five minutes, whichever is larger.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from tests.notebooks import ROOT

CHAPTERS = sorted(p for p in (ROOT / "book").glob("*.ipynb") if re.match(r"\d\d_", p.name))
WORDS_PER_MINUTE = 150
BOX = "```{admonition} Goals, prerequisites and time"


def reading_minutes(path: Path) -> float:
    """Minutes to read a notebook's markdown at :data:`WORDS_PER_MINUTE`."""
    cells = nbformat.read(path, as_version=4).cells
    return sum(len(c.source.split()) for c in cells if c.cell_type == "markdown") / WORDS_PER_MINUTE


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_chapter_opens_with_goals_prerequisites_and_time(path: Path) -> None:
    markdown = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "markdown"]
    assert markdown[0].startswith("# "), f"{path.name}: the first markdown cell is the title"
    box = markdown[1]
    assert box.startswith(BOX), f"{path.name}: the cell after the title is the goals box"
    assert "**After this chapter you can**" in box and "**Prerequisites:**" in box, path.name
    stated = int(re.search(r"\*\*Time:\*\* about (\d+) minutes to read", box).group(1))
    expected = reading_minutes(path)
    assert abs(stated - expected) <= max(5.0, expected / 3), f"{path.name}: {stated} min stated, {expected:.0f} counted"
