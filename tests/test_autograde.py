"""The autograder on two submissions of chapter 12's homework: a correct one scores full, a wrong one below half."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from conslaw_lite.autograde import HOMEWORK, grade_notebook, main, problems_only

CORRECT = [
    "import torch",
    "leaky_laws = lambda p: (p['A.weight'] ** 2).sum(0) - (p['B.weight'] ** 2).sum(1)\nleaky_count = 3",
    "def two_paths_law(p):\n    return p['a'] * p['c'] - p['b'] * p['d']",
    "def linear_path_law(p):\n    return p['c'] - torch.log(torch.abs(p['a'] + p['b']))",
    "def bilinear_laws(p):\n"
    "    A, B, C = p['A.weight'], p['B.weight'], p['C.weight']\n"
    "    return torch.cat([(B ** 2).sum(1) - (A ** 2).sum(0), (C ** 2).sum(1) - (A ** 2).sum(0)])",
]
# Plausible mistakes: a sum of squares, the wrong count, a law the rescalings already give, a polynomial
# that is not conserved, half of the bilinear laws, and a cell that raises before an answer is defined.
WRONG = [
    "import torch",
    "leaky_laws = lambda p: (p['A.weight'] ** 2).sum(0) + (p['B.weight'] ** 2).sum(1)\nleaky_count = 0",
    "def two_paths_law(p):\n    return p['a'] ** 2 - p['b'] ** 2 + p['c'] ** 2 - p['d'] ** 2",
    "def linear_path_law(p):\n    return p['a'] ** 2 - p['b'] ** 2 + p['c'] ** 2",
    "def bilinear_laws(p):\n    return (p['C.weight'] ** 2).sum(1) - (p['A.weight'] ** 2).sum(0)",
    "raise RuntimeError('not finished')",
]


def _notebook(folder: Path, name: str, cells: list[str]) -> Path:
    path = folder / f"{name}.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), path)
    return path


def test_a_correct_submission_scores_full(tmp_path: Path) -> None:
    report = grade_notebook(_notebook(tmp_path, "correct", CORRECT))
    assert report.out_of == sum(p.points for p in HOMEWORK) and report.score == report.out_of, str(report)
    assert not report.errors and all("CONSERVED" in m.feedback or "right" in m.feedback for m in report.marks)


def test_a_wrong_submission_scores_below_half_and_says_why(tmp_path: Path) -> None:
    report = grade_notebook(_notebook(tmp_path, "wrong", WRONG))
    assert report.score < report.out_of / 2, str(report)
    feedback = {m.answer: m.feedback for m in report.marks}
    assert "NOT CONSERVED" in feedback["leaky_laws"] and "NOT CONSERVED" in feedback["linear_path_law"]
    assert "a function of a²−b², c²−d²" in feedback["two_paths_law"]  # conserved, but nothing new
    assert "2 independent of the N = 4" in feedback["bilinear_laws"]  # conserved, but half of the list
    assert report.errors == ("cell 5: RuntimeError: not finished",)
    assert "wrong.ipynb: " in str(report) and "a cell raised" in str(report)


def test_a_missing_answer_is_named(tmp_path: Path) -> None:
    report = grade_notebook(_notebook(tmp_path, "empty", ["x = 1"]))
    assert report.score == 0 and all(m.feedback.startswith("not defined: write") for m in report.marks)


def test_the_command_line_exits_nonzero_unless_every_score_is_full(tmp_path: Path, capsys) -> None:
    assert main([str(_notebook(tmp_path, "correct", CORRECT))]) == 0
    assert main([str(_notebook(tmp_path, "empty", ["x = 1"]))]) == 1
    assert main([]) == 2
    assert "correct.ipynb: 10 / 10" in capsys.readouterr().out


def test_the_problems_copy_keeps_every_exercise_and_no_solution(tmp_path: Path) -> None:
    from tests.notebooks import ROOT

    out = problems_only(ROOT, tmp_path / "problems")
    for path in sorted((ROOT / "book").glob("*.ipynb")):
        book, problems = (nbformat.read(p, as_version=4).cells for p in (path, out / "book" / path.name))
        exercises = [c.source.count("{exercise}") for c in book], [c.source.count("{exercise}") for c in problems]
        assert sum(exercises[0]) == sum(exercises[1]) > 0, path.name
        assert not any("{solution" in c.source for c in problems), path.name
    import yaml

    assert yaml.safe_load((out / "_config.yml").read_text())["execute"]["execute_notebooks"] == "off"


@pytest.mark.slow  # a jupyter-book build of every page, nothing executed
def test_make_problems_builds_a_book_with_exercises_and_no_solutions(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.notebooks import ROOT

    out = problems_only(ROOT, tmp_path / "problems")
    jb = Path(sys.executable).with_name("jupyter-book")
    done = subprocess.run([str(jb), "build", str(out), "--warningiserror"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    page = (out / "_build" / "html" / "book" / "12_homework.html").read_text()
    assert page.count('class="exercise') >= 5 and 'class="solution' not in page
