"""Seeded construction that leaves the caller's random state as it was.

``nn.Linear`` and friends draw their initial weights from torch's default generator, so a
model seeded by ``seed`` must be built while that generator is seeded. :func:`seeded` does it
inside :func:`torch.random.fork_rng`, which restores the caller's state on exit: building a
model never changes what the caller draws next. Data and batches take a ``torch.Generator``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run the block with torch's default generator seeded by ``seed``; restore the caller's state after.

    Examples
    ========
    The same seed gives the same weights, and the caller's stream goes on as if nothing happened:

    >>> from torch import nn
    >>> state = torch.random.get_rng_state()
    >>> with seeded(0):
    ...     first = nn.Linear(2, 2).weight
    >>> with seeded(0):
    ...     second = nn.Linear(2, 2).weight
    >>> bool(torch.equal(first, second)), bool(torch.equal(torch.random.get_rng_state(), state))
    (True, True)
    """
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        yield
