"""Fixtures shared by the test files."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def one_thread():
    """Run the test on one torch thread (CI shares two cores among many jobs), then restore the count."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
