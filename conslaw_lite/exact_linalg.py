"""Exact linear algebra for the law finders: ranks over F_p and rational reconstruction.

Two primes, each as large as its use allows: :data:`LARGE_PRIME` (< 2³¹) where only products
of two residues are formed (:func:`rank_mod_p`), :data:`SMALL_PRIME` (< 2²⁶) where sums of up
to 2¹¹ such products must fit in int64 as well (the Lie brackets of
:mod:`conslaw_lite.symbolic.lie_exact`). A rank mod p never exceeds the rank over Q, so a null
space over F_p as small as the one found proves that nothing was missed.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

LARGE_PRIME = 2_147_483_629  # largest prime below 2³¹: products of two residues fit in int64
SMALL_PRIME = 67_108_859  # 2²⁶ − 5: a product of residues is < 2⁵², a sum of 2¹¹ of them fits in int64


def rank_mod_p(A: np.ndarray, p: int = LARGE_PRIME) -> int:
    """Rank over F_p of an integer matrix, by Gaussian elimination on int64 residues (p < 2³¹: products fit).

    Examples
    ========
    >>> rank_mod_p(np.array([[1, 2], [2, 4]])), rank_mod_p(np.array([[1, 2], [3, 4]]))
    (1, 2)
    >>> rank_mod_p(np.array([[1, 2], [3, 4]]), p=2)  # det = −2 vanishes mod 2
    1
    """
    A = A.copy() % p
    rank = 0
    for col in range(A.shape[1]):
        nonzero = np.nonzero(A[rank:, col])[0]
        if nonzero.size == 0:
            continue
        pivot = rank + nonzero[0]
        A[[rank, pivot]] = A[[pivot, rank]]
        A[rank, col:] = A[rank, col:] * pow(int(A[rank, col]), p - 2, p) % p
        below = A[rank + 1 :, col].copy()
        A[rank + 1 :, col:] = (A[rank + 1 :, col:] - below[:, None] * A[rank, col:] % p) % p
        rank += 1
        if rank == A.shape[0]:
            break
    return rank


class SpanModP:
    """A reduced row-echelon basis over F_p (p = :data:`SMALL_PRIME`); :meth:`add` says whether a vector enlarged it.

    Examples
    ========
    >>> span = SpanModP(3)
    >>> span.add([1, 2, 3]), span.add([2, 4, 6]), span.add([0, 1, 0]), span.rank
    (True, False, True, 2)
    """

    def __init__(self, dim: int, p: int = SMALL_PRIME) -> None:
        self.p = p
        self.rows = np.zeros((0, dim), dtype=np.int64)
        self.pivots: list[int] = []

    @property
    def rank(self) -> int:
        return len(self.pivots)

    def add(self, v) -> bool:
        v = np.asarray(v, dtype=np.int64) % self.p
        for row, col in zip(self.rows, self.pivots):
            if v[col]:
                v = (v - v[col] * row) % self.p
        nonzero = np.flatnonzero(v)
        if nonzero.size == 0:
            return False
        col = int(nonzero[0])
        v = v * pow(int(v[col]), self.p - 2, self.p) % self.p
        self.rows = (self.rows - np.outer(self.rows[:, col], v) % self.p) % self.p  # keep the basis reduced
        self.rows = np.vstack([self.rows, v])
        self.pivots.append(col)
        return True


def rational(c: float, max_denominator: int, tol: float) -> Fraction | None:
    """The fraction p/q with q ≤ ``max_denominator`` nearest to ``c``, when it is within ``tol`` of it.

    Examples
    ========
    >>> rational(0.3333333333, 12, 1e-6), rational(0.3, 2, 1e-6)
    (Fraction(1, 3), None)
    """
    q = Fraction(c).limit_denominator(max_denominator)
    return q if abs(c - float(q)) <= tol else None
