"""A weight read by several laws, squared once: ``W ∘ W`` shared between the laws of one evaluation.

Most laws are sums of squared entries along rows or columns: a SwiGLU's ``‖C_{i,:}‖²`` and the RMSNorm
coupling's ``‖C_{:,j}‖²`` both read ``C ∘ C``. A law squares what it reads through :func:`squared`;
while :func:`shared_squares` is active (the monitor's record of one step) the square of one tensor is
computed once and handed to every law that asks, otherwise it is simply ``t.square()`` (autograd and
``torch.func`` see a plain operation).

The cache keys a tensor by ``id`` and keeps the tensor alive until the block ends, so no other tensor can
take its ``id`` meanwhile; the values must not change inside the block (the monitor copies θ before it).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch

_CACHE: ContextVar[dict[int, tuple[torch.Tensor, torch.Tensor]] | None] = ContextVar("squares", default=None)


def squared(t: torch.Tensor) -> torch.Tensor:
    """``t ∘ t``, computed once per tensor inside :func:`shared_squares`.

    Examples
    ========
    >>> W = torch.tensor([[1.0, -2.0]])
    >>> squared(W).tolist()
    [[1.0, 4.0]]
    >>> with shared_squares():
    ...     squared(W) is squared(W)
    True
    """
    cache = _CACHE.get()
    if cache is None:
        return t.square()
    hit = cache.get(id(t))
    if hit is None:
        hit = cache[id(t)] = (t, t.square())
    return hit[1]


@contextmanager
def shared_squares() -> Iterator[None]:
    """Within the block, :func:`squared` of one tensor is computed once (see the module docstring).

    Examples
    ========
    >>> W = torch.ones(2)
    >>> with shared_squares():
    ...     a = squared(W)
    >>> squared(W) is a
    False
    """
    token = _CACHE.set({})
    try:
        yield
    finally:
        _CACHE.reset(token)
