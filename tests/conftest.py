"""Fixtures shared by the test files."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch


def import_timm() -> ModuleType:
    """timm, or a skip that says why: ``pytest.importorskip`` skips only a missing timm, not one
    that is installed but fails to import (a torchvision built for another torch)."""
    try:
        import timm
    except Exception as err:  # noqa: BLE001 - any import failure of an optional dependency skips
        pytest.skip(f"timm cannot be imported ({type(err).__name__}: {err})")
    return timm


@pytest.fixture
def one_thread():
    """Run the test on one torch thread (CI shares two cores among many jobs), then restore the count."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(name="timm")
def timm_fixture() -> ModuleType:
    """timm for the tests that need it; the others run without it."""
    return import_timm()
