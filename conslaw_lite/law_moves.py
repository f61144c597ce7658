"""A law found on one unit moved to the others: hidden units (and heads) are interchangeable.

The permutation of hidden units is a symmetry of most models, so a law found on the slice of unit u is, with u
exchanged for v, a law of the slice of v wherever the architecture treats them alike;
:func:`~conslaw_lite.find_laws.find_laws` keeps a moved law only where it is conserved. A unit of a *grouped* axis
(the K/V rows of grouped-query attention) owns rows of another, G times longer axis too (the query rows of the heads
that share it): they move with it.

Examples
========
>>> from conslaw_lite.polynomial_laws import Layout
>>> layout = Layout(("k", "q"), ((2, 1), (4, 1)))  # K/V row u feeds query rows u and u + 2 (one head of width 2)
>>> swapped({(0, 0): -1.0, (2, 2): 1.0, (4, 4): 1.0}, layout, 2, 0, 1, group=(2, 2))
{(1, 1): -1.0, (3, 3): 1.0, (5, 5): 1.0}
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from conslaw_lite.polynomial_laws import Layout

Group = tuple[int, int]  # (G, b): an axis of size G·n whose indices come in G blocks of b per block of b units


def group_rows(n: int, group: Group, u: int) -> list[int]:
    """The G indices of an axis of size G·n that unit u < n of an axis of size n goes with: ``(u // b)·G·b + t·b +
    u % b`` for t < G. b = n: u, u + n, … (tiled); b = the head width: the query heads sharing K/V head u // b.

    Examples
    ========
    >>> group_rows(4, (2, 4), 1), group_rows(4, (2, 2), 1), group_rows(4, (2, 1), 1)
    ([1, 5], [1, 3], [2, 3])
    """
    G, b = group
    return [(u // b) * G * b + t * b + u % b for t in range(G)]


def swapped(law: dict, layout: Layout, n: int, u: int, v: int, group: Group | None = None) -> dict:
    """The law with indices u and v exchanged along every axis of size n of its tensors, and with ``group``, their
    rows :func:`group_rows` exchanged along every axis of size G·n.

    Examples
    ========
    >>> layout = Layout(("W1", "W2"), ((2, 1), (1, 2)))  # W1[i, 0] W2[0, i]: unit 0 is (0, 2), unit 1 is (1, 3)
    >>> swapped({(0, 0): 1.0, (2, 2): -1.0}, layout, 2, 0, 1)
    {(1, 1): 1.0, (3, 3): -1.0}
    """
    perm = _permutation(layout, n, u, v, group)
    out: dict = {}
    for mono, c in law.items():
        moved = tuple(sorted(perm[j] for j in mono))
        out[moved] = out.get(moved, 0.0) + c
    return out


def swapped_pair(
    law: dict, layout: Layout, n: int, first: tuple[int, int], to: tuple[int, int], group: Group | None = None
) -> dict:
    """The law of the pair of units ``first = (u₀, v₀)`` moved to the pair ``to = (u, v)``: u₀ swapped with u, then
    where v₀ went swapped with v (a head's entry (0, 1) moved to (4, 5)).

    Examples
    ========
    >>> layout = Layout(("Q",), ((3, 1),))  # Q[0, 0] Q[1, 0] moved to Q[2, 0] Q[0, 0]
    >>> swapped_pair({(0, 1): 1.0}, layout, 3, (0, 1), (2, 0))
    {(0, 2): 1.0}
    """
    (u0, v0), (u, v) = first, to
    once = swapped(law, layout, n, u0, u, group)
    at = u0 if v0 == u else v0
    return swapped(once, layout, n, at, v, group) if at != v else once


@lru_cache(maxsize=4096)
def _permutation(layout: Layout, n: int, u: int, v: int, group: Group | None) -> tuple[int, ...]:
    """Where each coordinate of θ goes when u and v are exchanged (a search moves laws to thousands of pairs of units:
    one table per swap instead of an index computed per coordinate)."""
    swaps = {n: _exchange(np.arange(n), [u], [v])}
    if group is not None:
        swaps[group[0] * n] = _exchange(np.arange(group[0] * n), group_rows(n, group, u), group_rows(n, group, v))
    parts = []
    for t, shape in enumerate(layout.shapes):
        index = np.arange(math.prod(shape)).reshape(shape)
        for axis, size in enumerate(shape):
            if size in swaps:
                index = index.take(swaps[size], axis=axis)
        parts.append(layout.offset(t) + index.reshape(-1))
    return tuple(int(j) for j in np.concatenate(parts)) if parts else ()


def _exchange(order: np.ndarray, these: list[int], those: list[int]) -> np.ndarray:
    order[these + those] = order[those + these]
    return order
