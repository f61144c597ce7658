"""The book's wiring: every notebook is in the table of contents, has no outputs,
starts with the Colab install cell pointing at the repository of _config.yml."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import yaml

from tests.notebooks import ROOT, NotebookCellError, execute, execute_into_cache, slowest_cell, toc_files

CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text())
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))


def test_every_notebook_is_in_the_toc() -> None:
    listed = {str(ROOT / f) for f in toc_files(TOC)}
    missing = [nb.name for nb in NOTEBOOKS if str(nb.with_suffix("")) not in listed]
    assert not missing, f"notebooks not in _toc.yml (never executed by CI): {missing}"


def test_every_toc_entry_exists() -> None:
    for f in [TOC["root"], *toc_files(TOC)]:
        assert any((ROOT / f).with_suffix(s).exists() for s in (".ipynb", ".md")), f"_toc.yml names missing {f}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_committed_clean_and_installs_from_the_repository(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in code), f"{path.name} has outputs"
    first = code[0].source
    assert "import conslaw_lite" in first and "%pip install" in first
    assert f"git+{CONFIG['repository']['url']}" in first, "the install cell must point at _config.yml's repository"
    assert "remove-cell" in code[0].metadata.get("tags", []), "the install cell is for Colab, not for the web page"
    assert "conslaw_lite[book] @" in first, "the install cell installs what the chapters import (the book extra)"
    wants_gpu = path.name.startswith(("08_", "09_"))
    assert f"runtime_summary({'wants_gpu=True' if wants_gpu else ''})" in first, "the first cell says what runs where"


def _makefile_flags() -> list[str]:
    return re.search(r"jupyter-book build \. ((?:--[\w-]+ ?)*)", (ROOT / "Makefile").read_text()).group(1).split()


@pytest.mark.slow  # jupyter-book build
def test_book_builds_without_warnings(tmp_path: Path) -> None:
    """The Sphinx side of the whole book (labels, references, citations, toc), with execution off.

    The executed build is ``make book``; here every page is parsed as it is committed.
    """
    config = dict(CONFIG, execute=dict(CONFIG["execute"], execute_notebooks="off"))
    (tmp_path / "_config.yml").write_text(yaml.safe_dump(config, allow_unicode=True))
    jb = Path(sys.executable).with_name("jupyter-book")
    args = [str(jb), "build", str(ROOT), "--config", str(tmp_path / "_config.yml"), "--path-output", str(tmp_path)]
    done = subprocess.run([*args, *_makefile_flags()], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert (tmp_path / "_build" / "html" / "book" / "01_toy.html").exists()


def _write_book(book: Path, cell: str, timeout: int | None = None) -> Path:
    """A one-chapter book with the project's _config.yml; the chapter runs ``cell``. Returns the chapter.

    ``timeout`` replaces the book's per-cell timeout (seconds).
    """
    (book / "book").mkdir(parents=True)
    config = dict(CONFIG, execute=dict(CONFIG["execute"], timeout=timeout or CONFIG["execute"]["timeout"]))
    (book / "_config.yml").write_text(yaml.safe_dump(config, allow_unicode=True))
    shutil.copy(ROOT / "book" / "references.bib", book / "book" / "references.bib")
    (book / "book" / "intro.md").write_text("# Intro\n\n```{tableofcontents}\n```\n")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Chapter"), nbformat.v4.new_code_cell(cell)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, book / "book" / "chapter.ipynb")
    (book / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nchapters:\n  - file: book/chapter\n")
    return book / "book" / "chapter.ipynb"


def _jupyter_book(book: Path) -> subprocess.CompletedProcess:
    """``jupyter-book build`` of ``book`` with the Makefile's flags."""
    jb = Path(sys.executable).with_name("jupyter-book")
    args = [str(jb), "build", str(book), *_makefile_flags()]
    return subprocess.run(args, capture_output=True, text=True, timeout=300)


def _build(book: Path, cell: str, timeout: int | None = None) -> subprocess.CompletedProcess:
    """Build a one-chapter book whose chapter runs ``cell``, Jupyter Book executing it (nothing cached)."""
    _write_book(book, cell, timeout)
    return _jupyter_book(book)


@pytest.mark.slow  # jupyter-book build
def test_the_build_reads_what_make_book_executed_into_the_cache(tmp_path: Path) -> None:
    """``make book`` executes the chapters first, several at once; Jupyter Book then shows their outputs."""
    chapter = _write_book(tmp_path / "cached", "print('made by', 'the cache run')")
    cache = tmp_path / "cached" / "_build" / ".jupyter_cache"
    seconds = execute_into_cache([chapter], cache, jobs=2)
    assert execute_into_cache([chapter], cache, jobs=2) == {}, "an unchanged chapter is not executed again"
    done = _jupyter_book(tmp_path / "cached")
    log = done.stdout + done.stderr
    assert done.returncode == 0 and list(seconds) == [chapter], log[-3000:]
    assert "Using cached notebook" in log and "Executed notebook" not in log, log[-3000:]
    assert "made by the cache run" in (tmp_path / "cached" / "_build" / "html" / "book" / "chapter.html").read_text()


@pytest.mark.slow  # jupyter-book build
def test_a_failing_cell_fails_the_build(tmp_path: Path) -> None:
    good = _build(tmp_path / "good", "print(1 + 1)")
    assert good.returncode == 0, good.stdout[-2000:] + good.stderr[-2000:]
    bad = _build(tmp_path / "bad", "raise ValueError('this cell fails')")
    assert bad.returncode != 0
    assert "this cell fails" in bad.stdout + bad.stderr


SLEEPER = "import time\ntime.sleep(60)  # the stalled cell"


@pytest.mark.slow  # jupyter-book build
def test_a_cell_past_the_timeout_fails_the_build_by_name(tmp_path: Path) -> None:
    """A stalled or slow cell fails ``make book`` within the timeout, naming the notebook and the cell."""
    done = _build(tmp_path / "slow", SLEEPER, timeout=3)
    log = done.stdout + done.stderr
    assert done.returncode != 0, "a cell past the timeout must fail the build"
    assert "chapter.ipynb" in log and "time.sleep(60)" in log and "timed out" in log, log[-3000:]


def test_a_cell_past_the_timeout_fails_the_notebook_test_by_name(tmp_path: Path) -> None:
    path = tmp_path / "slow.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(SLEEPER)]), path)
    with pytest.raises(NotebookCellError, match=r"slow.ipynb: cell 0 \('import time'\) timed out after 2 s"):
        execute(path, timeout=2)


def test_the_slowest_cell_is_measured_and_named(tmp_path: Path) -> None:
    """tests/test_notebooks.py holds each chapter's slowest cell to a tenth of the timeout: the timing is real."""
    path = tmp_path / "timed.ipynb"
    cells = [nbformat.v4.new_markdown_cell("# a chapter"), nbformat.v4.new_code_cell("x = 1"),
             nbformat.v4.new_code_cell("import time\ntime.sleep(0.5)"), nbformat.v4.new_code_cell("x + 1")]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), path)
    times = execute(path, timeout=30)
    seconds, cell = slowest_cell(path, times)
    assert len(times) == 3 and 0.5 <= seconds < 30 and max(times[0], times[2]) < seconds
    assert cell == "timed.ipynb: cell 2 ('import time')"
