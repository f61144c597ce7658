"""The instructor's kit: an autograder for the homework set of chapter 12, and the book without its solutions.

**Autograder.** A student's notebook in, a score and feedback out.
The student writes, in a notebook, one function per problem with the name the problem gives
(:data:`HOMEWORK`): a law is a function of the parameter dictionary ``{name: tensor}``, as
everywhere in the book. :func:`grade_notebook` runs the notebook's code cells, looks the
functions up and grades each with :func:`conslaw_lite.homework.grade_law`, the criterion
``⟨∇h(θ), ∇_θ f_i(x; θ)⟩ = 0`` at random θ and inputs, and with
:func:`conslaw_lite.counting.check_laws` for what a list of laws must add: that a new law is
independent of the laws it is asked to go beyond, or that a list is complete
(``N = D − dim Lie(W)`` independent laws). Run it from the command line:

    python -m conslaw_lite.autograde student.ipynb

The notebook runs in this Python process, like any code a grader executes: grade untrusted
notebooks in a sandbox.

**Problems.** :func:`problems_only` copies the book with every solution removed (the gated
``solution-start`` … ``solution-end`` blocks, the cells between them and any ``solution``
directive) and execution off; ``make problems`` builds that copy into ``_build/problems``.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from conslaw_lite.counting import check_laws
from conslaw_lite.homework import grade_law, how_many_laws


class Scalars(nn.Module):
    """Scalar parameters ``a, b, c, …`` and a formula ``f(p, x)`` in them: the small models of chapter 12."""

    def __init__(self, formula: Callable[[Mapping[str, torch.Tensor], torch.Tensor], torch.Tensor], **values: float):
        super().__init__()
        self.formula = formula
        for name, value in values.items():
            self.register_parameter(name, nn.Parameter(torch.tensor(value, dtype=torch.float64)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.formula(dict(self.named_parameters()), x)


class Leaky(nn.Module):
    """``f(x) = A leaky_relu(Bx)``, slope 0.1: parameters ``B.weight`` (r × d) and ``A.weight`` (m × r)."""

    def __init__(self, d: int = 2, r: int = 3, m: int = 2) -> None:
        super().__init__()
        self.B, self.A = nn.Linear(d, r, bias=False), nn.Linear(r, m, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.A(F.leaky_relu(self.B(x), 0.1))


class Bilinear(nn.Module):
    """``f(x) = A((Bx) ⊙ (Cx))``: parameters ``B.weight``, ``C.weight`` (r × d) and ``A.weight`` (m × r)."""

    def __init__(self, d: int = 3, r: int = 2, m: int = 2) -> None:
        super().__init__()
        self.B, self.C, self.A = nn.Linear(d, r, bias=False), nn.Linear(d, r, bias=False), nn.Linear(r, m, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.A(self.B(x) * self.C(x))


def _seeded(build: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    def make() -> nn.Module:
        torch.manual_seed(0)
        return build().double()

    return make


@dataclass(frozen=True)
class Problem:
    """One graded answer: the function ``answer`` the student defines, and what it must satisfy.

    ``kind`` is ``"law"`` (a conserved function of the parameters) or ``"count"`` (the number
    ``N`` of independent laws, an integer). A law must be conserved; with ``beyond`` it must be
    independent of those laws; with ``complete`` it must contain ``N`` independent laws.
    """

    answer: str
    statement: str
    model: Callable[[], nn.Module]
    input_shape: tuple[int, ...]
    points: int
    kind: str = "law"
    beyond: Mapping[str, Callable[[Mapping[str, torch.Tensor]], torch.Tensor]] = field(default_factory=dict)
    complete: bool = False


HOMEWORK: tuple[Problem, ...] = (
    Problem("leaky_laws", "the laws of A·leaky_relu(Bx), B ∈ R^(3×2), A ∈ R^(2×3), as one vector law",
            _seeded(Leaky), (2,), 2, complete=True),
    Problem("leaky_count", "how many independent laws A·leaky_relu(Bx) has", _seeded(Leaky), (2,), 1, kind="count"),
    Problem("two_paths_law", "the law of (ab + cd)x that the two rescalings do not give",
            lambda: Scalars(lambda p, x: (p["a"] * p["b"] + p["c"] * p["d"]) * x, a=1.2, b=0.7, c=-0.4, d=0.9),
            (1,), 2,
            beyond={"a²−b²": lambda p: p["a"] ** 2 - p["b"] ** 2, "c²−d²": lambda p: p["c"] ** 2 - p["d"] ** 2}),
    Problem("linear_path_law", "the second law of (ab + c)x, besides a² − b² (it is not a polynomial)",
            lambda: Scalars(lambda p, x: (p["a"] * p["b"] + p["c"]) * x, a=1.2, b=0.7, c=-0.4),
            (1,), 3, beyond={"a²−b²": lambda p: p["a"] ** 2 - p["b"] ** 2}),
    Problem("bilinear_laws", "every law of the bilinear GLU A((Bx) ⊙ (Cx)), B, C ∈ R^(2×3), A ∈ R^(2×2)",
            _seeded(Bilinear), (3,), 2, complete=True),
)


@dataclass(frozen=True)
class Mark:
    """The grade of one problem: points out of ``out_of``, and why."""

    answer: str
    points: int
    out_of: int
    feedback: str


@dataclass(frozen=True)
class Report:
    """The grades of a notebook; ``str(report)`` is the feedback a student reads."""

    notebook: str
    marks: tuple[Mark, ...]
    errors: tuple[str, ...]  # cells that raised, with their error

    @property
    def score(self) -> int:
        return sum(m.points for m in self.marks)

    @property
    def out_of(self) -> int:
        return sum(m.out_of for m in self.marks)

    def __str__(self) -> str:
        lines = [f"{self.notebook}: {self.score} / {self.out_of}"]
        lines += [f"  [{m.points}/{m.out_of}] {m.answer}: {m.feedback}" for m in self.marks]
        lines += [f"  a cell raised: {e}" for e in self.errors]
        return "\n".join(lines)


MAGIC = re.compile(r"^\s*[%!].*$", re.MULTILINE)  # IPython magics and shell lines are not Python


def run_notebook(path: str | os.PathLike) -> tuple[dict, list[str]]:
    """Execute the code cells of the notebook at ``path`` in order, in a fresh namespace, from its folder.

    A cell that raises is recorded (``"cell i: ErrorType: message"``) and the next cells still run.
    Returns the namespace and the errors.

    Examples
    ========
    >>> import tempfile, nbformat
    >>> nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 2"), nbformat.v4.new_code_cell("1 / 0")])
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     nbformat.write(nb, f"{folder}/student.ipynb")
    ...     namespace, errors = run_notebook(f"{folder}/student.ipynb")
    >>> namespace["x"], errors
    (2, ['cell 1: ZeroDivisionError: division by zero'])
    """
    import nbformat

    path = Path(path)
    cells = nbformat.read(path, as_version=4).cells
    namespace: dict = {"__name__": "__main__"}
    errors = []
    here = Path.cwd()
    os.chdir(path.parent)
    try:
        for i, cell in enumerate(cells):
            if cell.cell_type != "code":
                continue
            try:
                with contextlib.redirect_stdout(io.StringIO()):  # the student's printouts are not the grader's
                    exec(compile(MAGIC.sub("", cell.source), f"{path.name}, cell {i}", "exec"), namespace)
            except Exception as err:  # noqa: BLE001 - a student's cell may raise anything; it is reported, not fatal
                errors.append(f"cell {i}: {type(err).__name__}: {err}")
    finally:
        os.chdir(here)
    return namespace, errors


def grade_answer(problem: Problem, answer: object) -> Mark:
    """Grade one answer against its problem (see :class:`Problem`).

    Examples
    ========
    >>> leaky_count = next(p for p in HOMEWORK if p.answer == "leaky_count")
    >>> grade_answer(leaky_count, 3).points, grade_answer(leaky_count, 2).points
    (1, 0)
    """
    if answer is None:
        return Mark(problem.answer, 0, problem.points, f"not defined: write `{problem.answer}` ({problem.statement})")
    model = problem.model()
    if problem.kind == "count":
        expected = how_many_laws(model, problem.input_shape)
        if isinstance(answer, bool) or not isinstance(answer, int):
            return Mark(problem.answer, 0, problem.points, f"give N as an integer, not {type(answer).__name__}")
        right = answer == expected
        return Mark(problem.answer, problem.points if right else 0, problem.points,
                    "right: N = D − dim Lie(W)" if right else f"N = {answer} is not the number of independent laws")
    if not callable(answer):
        return Mark(problem.answer, 0, problem.points, "a law is a function of the parameter dict p")
    try:
        verdict = grade_law(model, answer, problem.input_shape, name=problem.answer)
    except Exception as err:  # noqa: BLE001 - the student's function may raise anything on the parameter dict
        raised = f"calling it on the parameters raised {type(err).__name__}: {err}"
        return Mark(problem.answer, 0, problem.points, raised)
    if not verdict.conserved:
        return Mark(problem.answer, 0, problem.points, verdict.message)
    if problem.beyond:
        check = check_laws(model, {**problem.beyond, problem.answer: answer}, problem.input_shape)
        if check.independent <= len(problem.beyond):
            known = ", ".join(problem.beyond)
            return Mark(problem.answer, problem.points // 2, problem.points,
                        f"conserved, but a function of {known}: find the law they do not give")
    if problem.complete and verdict.independent != verdict.num_laws:
        return Mark(problem.answer, problem.points // 2, problem.points,
                    f"conserved, but {verdict.independent} independent of the N = {verdict.num_laws} laws")
    return Mark(problem.answer, problem.points, problem.points, verdict.message)


def grade_notebook(path: str | os.PathLike, problems: Sequence[Problem] = HOMEWORK) -> Report:
    """Run a student's notebook and grade every problem's answer: the :class:`Report` holds score and feedback.

    Examples
    ========
    >>> import tempfile, nbformat
    >>> cell = "leaky_count = 3\\nleaky_laws = lambda p: (p['A.weight'] ** 2).sum(0) - (p['B.weight'] ** 2).sum(1)"
    >>> nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell)])
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     nbformat.write(nb, f"{folder}/student.ipynb")
    ...     report = grade_notebook(f"{folder}/student.ipynb", HOMEWORK[:2])
    >>> report.score, report.out_of
    (3, 3)
    """
    namespace, errors = run_notebook(path)
    marks = tuple(grade_answer(p, namespace.get(p.answer)) for p in problems)
    return Report(Path(path).name, marks, tuple(errors))


SOLUTION_START = re.compile(r"^(`{3,}|:{3,})\{solution-start\}.*", re.MULTILINE | re.DOTALL)  # to the end of the cell
SOLUTION_END = re.compile(r"\A.*?^(`{3,}|:{3,})\{solution-end\}[^\n]*\n\1[ \t]*$\n?", re.MULTILINE | re.DOTALL)
SOLUTION = re.compile(r"^(`{3,}|:{3,})\{solution\}.*?^\1[ \t]*$\n?", re.MULTILINE | re.DOTALL)


def strip_solutions(cells: list) -> list:
    """The notebook cells without solutions: gated blocks (the cells between included) and ``solution`` directives.

    Examples
    ========
    >>> import nbformat
    >>> md, code = nbformat.v4.new_markdown_cell, nbformat.v4.new_code_cell
    >>> cells = [md("```{exercise} ★ Q\\n:label: q\\n\\n1 + 1?\\n```\\n\\n```{solution-start} q\\n```\\n\\nTwo."),
    ...          code("print(1 + 1)"), md("```{solution-end}\\n```\\n\\nNext.")]
    >>> [c.source for c in strip_solutions(cells)]
    ['```{exercise} ★ Q\\n:label: q\\n\\n1 + 1?\\n```', 'Next.']
    """
    import nbformat

    kept, inside = [], False
    for cell in cells:
        source = cell.source
        if inside:
            if cell.cell_type != "markdown" or not SOLUTION_END.search(source):
                continue
            source, inside = SOLUTION_END.sub("", source, count=1), False
        source = SOLUTION.sub("", source)
        if cell.cell_type == "markdown" and SOLUTION_START.search(source):
            source, inside = SOLUTION_START.sub("", source), True
        if source.strip() or cell.cell_type == "code":
            text = source.strip() if cell.cell_type == "markdown" else source
            kept.append(nbformat.from_dict({**cell, "source": text}))
    return kept


def problems_only(root: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Copy the book at ``root`` (``_config.yml``, ``_toc.yml``, ``book/``) to ``out`` without solutions, execution off.

    Returns ``out``; ``jupyter-book build out`` then builds the problems. Raises ``ValueError``
    if a solution survives (a block the patterns do not know), so no answer leaks silently.
    """
    import nbformat
    import yaml

    root, out = Path(root), Path(out)
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(root / "book", out / "book", ignore=shutil.ignore_patterns("_build", ".ipynb_checkpoints"))
    shutil.copy(root / "_toc.yml", out / "_toc.yml")
    config = yaml.safe_load((root / "_config.yml").read_text())
    config["title"] = f"{config['title']}: problems"
    config["execute"]["execute_notebooks"] = "off"  # the problems need no outputs, and the solutions' cells are gone
    (out / "_config.yml").write_text(yaml.safe_dump(config, allow_unicode=True, sort_keys=False))
    for path in (out / "book").glob("*.ipynb"):
        nb = nbformat.read(path, as_version=4)
        nb.cells = strip_solutions(nb.cells)
        if any(re.search(r"\{solution", c.source) for c in nb.cells):
            raise ValueError(f"{path.name}: a solution survived stripping")
        nbformat.write(nb, path)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m conslaw_lite.autograde NOTEBOOK ...``: print each report; exit 0 when every score is full.

    ``python -m conslaw_lite.autograde --problems OUT`` writes the book without solutions to ``OUT``.
    """
    paths = list(sys.argv[1:] if argv is None else argv)
    if len(paths) == 2 and paths[0] == "--problems":
        print(f"the book without solutions: {problems_only(Path.cwd(), paths[1])}")
        return 0
    if not paths:
        print("usage: python -m conslaw_lite.autograde STUDENT.ipynb [...]  |  --problems OUT", file=sys.stderr)
        return 2
    full = True
    for path in paths:
        try:
            report = grade_notebook(path)
        except Exception:  # noqa: BLE001 - an unreadable notebook is reported, and the others are still graded
            print(f"{path}: could not be graded\n{traceback.format_exc()}")
            full = False
            continue
        print(report)
        full = full and report.score == report.out_of
    return 0 if full else 1


if __name__ == "__main__":
    raise SystemExit(main())
