"""pytest at the repository root: the doctests of ``conslaw_lite/`` need timm only in the modules that import it.

A timm that is installed but cannot be imported (a torchvision built for another torch) skips
those modules, and the report header says why; every other doctest still runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

try:
    import timm  # noqa: F401

    TIMM_ERROR = None
except Exception as err:  # noqa: BLE001 - any import failure of an optional dependency
    TIMM_ERROR = f"{type(err).__name__}: {err}"

TIMM_MODULES = {Path("conslaw_lite/models/vit.py")}  # imports timm: not even collected
TIMM_DOCTESTS = {"conslaw_lite.experiments.tasks.vit_task"}  # builds the ViT
# Doctests that count laws over several networks: marked ``slow`` (pyproject.toml) like the slow tests.
SLOW_DOCTESTS = {"conslaw_lite.marcotte.run_case", "conslaw_lite.marcotte.run_suite"}


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    relative = collection_path.relative_to(config.rootpath) if collection_path.is_relative_to(config.rootpath) else None
    return True if TIMM_ERROR and relative in TIMM_MODULES else None


def pytest_collection_modifyitems(config, items: list) -> None:
    for item in items:
        if item.name in SLOW_DOCTESTS:
            item.add_marker(pytest.mark.slow)
    if TIMM_ERROR:
        skip = pytest.mark.skip(reason=f"timm cannot be imported ({TIMM_ERROR})")
        for item in items:
            if item.name in TIMM_DOCTESTS:
                item.add_marker(skip)


def pytest_report_header(config) -> str | None:
    return f"timm cannot be imported ({TIMM_ERROR}): skipping {sorted(map(str, TIMM_MODULES))}" if TIMM_ERROR else None
