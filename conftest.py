"""pytest at the repository root: the doctests of ``conslaw_lite/`` need timm only in the modules that import it.

A timm that is installed but cannot be imported (a torchvision built for another torch) skips
those modules, and the report header says why; every other doctest still runs.
"""

from __future__ import annotations

from pathlib import Path

try:
    import timm  # noqa: F401

    TIMM_ERROR = None
except Exception as err:  # noqa: BLE001 - any import failure of an optional dependency
    TIMM_ERROR = f"{type(err).__name__}: {err}"

TIMM_MODULES = {Path("conslaw_lite/models/vit.py")}


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    relative = collection_path.relative_to(config.rootpath) if collection_path.is_relative_to(config.rootpath) else None
    return True if TIMM_ERROR and relative in TIMM_MODULES else None


def pytest_report_header(config) -> str | None:
    return f"timm cannot be imported ({TIMM_ERROR}): skipping {sorted(map(str, TIMM_MODULES))}" if TIMM_ERROR else None
