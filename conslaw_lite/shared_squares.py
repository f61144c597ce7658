"""A weight read by several laws, squared once: ``W ∘ W`` shared between the laws of one evaluation.

Most laws are sums of squared entries along rows or columns: a SwiGLU's ``‖C_{i,:}‖²`` and the RMSNorm
coupling's ``‖C_{:,j}‖²`` both read ``C ∘ C``. A law squares what it reads through :func:`squared`;
while :func:`shared_squares` is active (the monitor's record of one step) the square of one tensor is
computed once and handed to every law that asks, otherwise it is simply ``t.square()`` (autograd and
``torch.func`` see a plain operation).

The cache keys a tensor by ``id`` and keeps the tensor alive until the block ends, so no other tensor can
take its ``id`` meanwhile; the values must not change inside the block (the monitor copies θ before it).

Tensors evaluated block after block (the monitor's snapshots of θ) can also keep their squares' memory from one
block to the next (:class:`KeptSquares`): each square is then written in place instead of allocated, which on a
small model spares the page faults of memory handed back to the system between two blocks.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch

_CACHE: ContextVar[dict[int, tuple[torch.Tensor, torch.Tensor]] | None] = ContextVar("squares", default=None)


class KeptSquares:
    """The memory of the squares of ``tensors`` (the same tensor objects, block after block), kept between blocks.

    Examples
    ========
    >>> W = torch.tensor([1.0, -2.0])
    >>> kept = KeptSquares([W])
    >>> with shared_squares(kept):
    ...     first = squared(W)
    >>> _ = W.mul_(3.0)
    >>> with shared_squares(kept):
    ...     second = squared(W)
    >>> second is first, second.tolist()  # the same memory, rewritten
    (True, [9.0, 36.0])
    """

    def __init__(self, tensors: Iterable[torch.Tensor]) -> None:
        self._tensors = {id(t): t for t in tensors}  # holds them: their ids stay theirs
        self._squares: dict[int, torch.Tensor] = {}

    def square(self, t: torch.Tensor) -> torch.Tensor | None:
        """``t ∘ t`` written into the memory kept for ``t``; None for a tensor not given at the start."""
        if self._tensors.get(id(t)) is not t:
            return None
        kept = self._squares.get(id(t))
        if kept is None:
            kept = self._squares[id(t)] = t.square()
            return kept
        return torch.square(t, out=kept)


_KEPT: ContextVar[KeptSquares | None] = ContextVar("kept squares", default=None)


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
        kept = _KEPT.get()
        square = kept.square(t) if kept is not None else None
        hit = cache[id(t)] = (t, t.square() if square is None else square)
    return hit[1]


@contextmanager
def shared_squares(kept: KeptSquares | None = None) -> Iterator[None]:
    """Within the block, :func:`squared` of one tensor is computed once (see the module docstring), into the
    memory ``kept`` holds for it if any.

    Examples
    ========
    >>> W = torch.ones(2)
    >>> with shared_squares():
    ...     a = squared(W)
    >>> squared(W) is a
    False
    """
    token, kept_token = _CACHE.set({}), _KEPT.set(kept)
    try:
        yield
    finally:
        _CACHE.reset(token)
        _KEPT.reset(kept_token)
