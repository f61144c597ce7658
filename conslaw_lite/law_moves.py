"""A law found on one unit moved to the others: hidden units (and heads) are interchangeable.

The permutation of hidden units is a symmetry of most models, so a law found on the slice of unit u is, with u
exchanged for v, a law of the slice of v wherever the architecture treats them alike;
:func:`~conslaw_lite.find_laws.find_laws` keeps a moved law only where it is conserved (or, choosing its basis, where
it lies in the span of the laws found: :func:`with_moved_laws`). A unit of a *grouped* axis
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

from conslaw_lite.law_basis import NOISE_FACTOR, SPAN_TOL, reduced_basis
from conslaw_lite.polynomial_laws import Layout, Monomial

MOVED_TOL = 1e-9  # relative residual under which a law moved to another unit is kept

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


def moved_laws(laws: list[dict], layout: Layout) -> list[dict]:
    """Every law with its unit exchanged for each other unit, along each axis size of its tensors, those already among
    ``laws`` left out: a law's unit u is the index of its first coordinate along the first axis of that size.

    A law across several layers may come out of a search as a mix of the laws of one unit (a ResNet stream's channel 0
    plus every law of the convolution reading it) while its neighbours' come out alone: a neighbour moved to unit 0 is
    the law alone, which :func:`~conslaw_lite.find_laws.find_laws` takes where it lies in the span of the laws found.

    Examples
    ========
    >>> layout = Layout(("W1", "W2"), ((2, 1), (1, 2)))  # W1[i, 0] W2[0, i]: units 0 and 1
    >>> moved_laws([{(1, 1): 1.0, (3, 3): -1.0}, {(0, 0): 1.0, (1, 1): 1.0, (2, 2): -1.0, (3, 3): -1.0}], layout)
    [{(0, 0): 1.0, (2, 2): -1.0}]
    """
    seen = {_key(law) for law in laws}
    moved = []
    for law in laws:
        t, index = layout.where(min(j for mono in law for j in mono))
        for axis, n in enumerate(layout.shapes[t]):
            if n < 2 or n in layout.shapes[t][:axis]:
                continue
            for v in range(n):
                other = swapped(law, layout, n, index[axis], v)
                if _key(other) not in seen:
                    seen.add(_key(other))
                    moved.append(other)
    return moved


def with_moved_laws(
    basis: list[dict], vectors: np.ndarray, columns: list[Monomial], layout: Layout, degree: int, gap: float
) -> list[dict]:
    """The basis chosen again (:func:`~conslaw_lite.law_basis.reduced_basis`) with the laws moved to other units
    (:func:`moved_laws`) among the candidates, those within ``MOVED_TOL`` (``NOISE_FACTOR / gap`` where larger, up to
    ``SPAN_TOL``) of the span of the null vectors ``vectors`` (over the monomials ``columns``, from a search with
    ``gap``): a law found as a mix comes out alone, as its neighbours do.

    Laws of one unit, those whose moves lie in the span, are chosen first: a sum of every unit's laws of two layers
    (a ResNet block's ``‖bn1.weight‖² + ‖bn1.bias‖² − ‖bn2.weight‖²``, the sum over i of ``bn1.weight[i]² +
    bn1.bias[i]² − ‖conv2.weight[:, i]‖²`` and of ``‖conv2.weight[i]‖² − bn2.weight[i]²``) has fewer terms than one
    unit's law, which it would otherwise replace.

    Examples
    ========
    >>> layout = Layout(("W1", "W2"), ((2, 1), (1, 2)))
    >>> mix, alone = [1.0, 1.0, -1.0, -1.0], [0.0, 1.0, 0.0, -1.0]  # units 0 + 1, and unit 1
    >>> columns = [(0, 0), (1, 1), (2, 2), (3, 3)]
    >>> basis = [dict(zip(columns, mix)), {(1, 1): 1.0, (3, 3): -1.0}]
    >>> [{m: round(c, 9) for m, c in law.items()} for law in with_moved_laws(basis, np.array([mix, alone]), columns,
    ...                                                                    layout, 2, np.inf)]
    [{(0, 0): 1.0, (2, 2): -1.0}, {(1, 1): 1.0, (3, 3): -1.0}]
    """
    index = {mono: c for c, mono in enumerate(columns)}
    moves = [[m for m in moved_laws([law], layout) if m.keys() <= index.keys()] for law in basis]
    if not any(moves) or not len(vectors):
        return basis
    rows = {_key(m): _row(m, index) for law_moves in moves for m in law_moves}
    keys = list(rows)
    candidates = np.array([rows[k] for k in keys])
    combination = np.linalg.lstsq(vectors.T, candidates.T, rcond=None)[0]
    off = np.linalg.norm(vectors.T @ combination - candidates.T, axis=0) / np.linalg.norm(candidates, axis=1)
    # null vectors are off by about 1/gap: a moved law of the span is off it by as much (1.3·10⁻⁹ for a ResNet's
    # stream law of channel 0 at a gap of 10¹⁰), one that is not by far more; under the span's own rank tolerance
    tol = min(SPAN_TOL, max(MOVED_TOL, NOISE_FACTOR / gap))
    inside = {k for k, o in zip(keys, off, strict=True) if o <= tol}
    if not inside:
        return basis
    units = [_row(law, index) for law, law_moves in zip(basis, moves, strict=True)
             if any(_key(m) in inside for m in law_moves)]  # fmt: skip
    moved = np.array([rows[k] for k in keys if k in inside])
    # the moved laws join the null vectors, as null vectors found; the unit laws of the basis, rounded, only the
    # candidates (their round-off would read as one more law)
    first = np.vstack([moved, *units]) if units else moved
    return reduced_basis(np.vstack([vectors, moved]), columns, degree, gap, first=first)


def _row(law: dict, index: dict) -> np.ndarray:
    """The law as a row over the columns ``index`` numbers."""
    row = np.zeros(len(index))
    row[[index[mono] for mono in law]] = list(law.values())
    return row


def _key(law: dict) -> tuple:
    return tuple(sorted((mono, round(c, 9)) for mono, c in law.items()))


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
