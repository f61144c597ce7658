"""The book's wiring: every notebook is in the table of contents, has no outputs,
starts with the Colab install cell pointing at the repository of _config.yml."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
import yaml

from tests.test_notebooks import ROOT, toc_files

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


def test_build_fails_on_a_failing_cell() -> None:
    execute = CONFIG["execute"]
    assert execute["execute_notebooks"] == "force" and execute["raise_on_error"] is True
    assert execute["allow_errors"] is False
    assert "--warningiserror" in (ROOT / "Makefile").read_text()
