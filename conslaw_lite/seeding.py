"""Seeded construction that leaves the caller's random state as it was.

``nn.Linear`` and friends draw their initial weights from torch's default generator, so a
model seeded by ``seed`` must be built while that generator is seeded. :func:`seeded` does it
inside :func:`torch.random.fork_rng`, which restores the caller's state on exit: building a
model never changes what the caller draws next. Data and batches take a ``torch.Generator``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from enum import IntEnum

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


SEED_STRIDE = 1_000_003  # a prime above every offset: the streams of two seeds never meet


class Stream(IntEnum):
    """Named offsets of :func:`generator`: the random streams of one seed that must stay apart.

    A count's k-th random θ and its inputs draw from ``THETA_DRAWS + k``, the check of its
    derivatives from ``DERIVATIVE_CHECK + k``, its saturation probe from ``SATURATION_PROBE``;
    :func:`~conslaw_lite.counting.check_laws` its j-th point from ``LAW_CHECK + j``,
    :func:`~conslaw_lite.find_laws.find_laws` its samples from ``LAW_SEARCH``, the check of a monitor's found laws
    on the whole model (:mod:`conslaw_lite.own_laws`) from ``MODEL_CHECK``, training its k-th
    batch from ``BATCHES + k``, and the fuzz oracle case c from ``FUZZ_ORACLE + c``.
    """

    THETA_DRAWS = 0
    BATCHES = 0
    DERIVATIVE_CHECK = 4999
    SATURATION_PROBE = 6007
    LAW_CHECK = 7919
    LAW_SEARCH = 31337
    MODEL_CHECK = 104_729
    FUZZ_ORACLE = 7_654_321


def generator(seed: int, stream: Stream = Stream.THETA_DRAWS, k: int = 0) -> torch.Generator:
    """A ``torch.Generator`` seeded ``SEED_STRIDE·seed + stream + k``: draw k of one stream of ``seed``.

    Examples
    ========
    >>> generator(1, Stream.LAW_CHECK, 2).initial_seed() == 1_000_003 + 7919 + 2
    True
    """
    return torch.Generator().manual_seed(SEED_STRIDE * seed + stream + k)
