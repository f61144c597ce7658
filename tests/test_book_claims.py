"""Every numbered chapter backs its numbers: it has asserts on computed values or glued values.

The prose of a chapter may state a number or a comparison only if it is printed from
computed values (myst-nb ``glue``, or an f-string in an output) or followed by an
``assert`` that fails when it stops being true. This test counts, per chapter, the
``assert`` statements and the ``glue(...)`` calls in its code cells, prints the table
(``pytest -s tests/test_book_claims.py``), and fails for a chapter with neither.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest

from tests.notebooks import ROOT

CHAPTERS = sorted(p for p in (ROOT / "book").glob("*.ipynb") if re.match(r"\d\d_", p.name))
MAGIC = re.compile(r"^\s*[%!].*$", re.MULTILINE)  # IPython magics and shell lines are not Python


def _is_glue(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    return (isinstance(f, ast.Name) and f.id == "glue") or (isinstance(f, ast.Attribute) and f.attr == "glue")


def claims(path: Path) -> dict[str, int]:
    """The number of ``assert`` statements and ``glue(...)`` calls in a notebook's code cells."""
    asserts = glued = 0
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "code":
            continue
        tree = ast.parse(MAGIC.sub("", cell.source))  # a cell that does not parse fails here, as it would in the book
        nodes = list(ast.walk(tree))
        asserts += sum(isinstance(n, ast.Assert) for n in nodes)
        glued += sum(_is_glue(n) for n in nodes)
    return {"asserts": asserts, "glued": glued}


def test_claims_counts_asserts_and_glue(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell("%pip install x\nassert 1 + 1 == 2\nfor i in range(2):\n    assert i < 2"),
            nbformat.v4.new_code_cell("from myst_nb import glue\nglue('n', 3)\nimport myst_nb\nmyst_nb.glue('m', 4)"),
            nbformat.v4.new_markdown_cell("assert nothing: markdown is not code"),
        ]
    )
    path = tmp_path / "01_x.ipynb"
    nbformat.write(nb, path)
    assert claims(path) == {"asserts": 2, "glued": 2}


def test_the_chapters_are_numbered_from_01_without_a_gap() -> None:
    assert len(CHAPTERS) >= 13 and [p.name[:2] for p in CHAPTERS] == [f"{i:02d}" for i in range(1, len(CHAPTERS) + 1)]


def test_print_claims_table() -> None:
    table = {p.stem: claims(p) for p in CHAPTERS}
    print(f"\n{'chapter':<22} {'asserts':>7} {'glued':>5}")
    for name, row in table.items():
        print(f"{name:<22} {row['asserts']:>7} {row['glued']:>5}")
    assert sum(row["asserts"] + row["glued"] for row in table.values()) > 0


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_every_chapter_backs_its_numbers(path: Path) -> None:
    row = claims(path)
    assert row["asserts"] + row["glued"] > 0, f"{path.name}: no assert and no glued value"


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.name)
def test_every_chapter_ends_with_summary_and_graded_exercises(path: Path) -> None:
    cells = nbformat.read(path, as_version=4).cells
    text = "\n".join(c.source for c in cells if c.cell_type == "markdown")
    headings = [line.strip() for line in text.splitlines() if line.startswith("## ")]
    assert "## Summary" in headings and "## Exercises" in headings, f"{path.name}: {headings}"
    exercises = re.findall(r"```\{exercise\}([^\n]*)", text)
    assert exercises and all("★" in title for title in exercises), f"{path.name}: ungraded exercises {exercises}"
    solved = set(re.findall(r"\{solution(?:-start)?\} ([\w-]+)", text))
    labels = re.findall(r"```\{exercise\}[^\n]*\n:label: ([\w-]+)", text)
    assert set(labels) <= solved, f"{path.name}: exercises without a solution {set(labels) - solved}"
