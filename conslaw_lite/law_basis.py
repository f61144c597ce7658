"""The laws found, as a basis with the fewest non-zeros: reduced row-echelon form, products of linear laws left out.

Each law gets a pivot coefficient 1 that no other law has (the fewest non-zeros an echelon basis can
have when the laws' supports are disjoint, as they are per unit and per head). When linear laws ℓ
exist (Σ_e W_e for a softmax gate), their products ℓ_i ℓ_j are quadratic laws too, but add nothing:
they are left out. Used by :func:`~conslaw_lite.find_laws.find_laws`.

Examples
========
>>> import numpy as np
>>> echelon(np.array([[2.0, 2.0, 0.0], [1.0, 0.0, 1.0]]))  # pivots on columns 0 and 1
array([[ 1.,  0.,  1.],
       [ 0.,  1., -1.]])
"""

from __future__ import annotations

import numpy as np

from conslaw_lite.polynomial_laws import Monomial

COEFFICIENT_TOL = 1e-9  # relative size under which a coefficient of the echelon basis is zero


def echelon(vectors: np.ndarray) -> np.ndarray:
    """A basis of the rows' span in reduced row-echelon form: pivot columns chosen left to right."""
    if vectors.shape[0] == 0:
        return vectors
    _, s, vh = np.linalg.svd(vectors, full_matrices=False)
    span = vh[s > 1e-7 * s[0]]  # the laws of overlapping pairs repeat: an orthonormal basis of their span
    pivots: list[int] = []
    q = np.zeros((span.shape[0], 0))
    for col in range(span.shape[1]):
        v = span[:, col] - q @ (q.T @ span[:, col])
        if np.linalg.norm(v) > 1e-6 * np.abs(span).max():
            q = np.column_stack([q, v / np.linalg.norm(v)])
            pivots.append(col)
            if len(pivots) == span.shape[0]:
                break
    basis = np.linalg.solve(span[:, pivots], span)  # identity on the pivot columns
    basis[np.abs(basis) < COEFFICIENT_TOL * np.abs(basis).max(axis=1, keepdims=True)] = 0.0
    return basis


def reduced_basis(vectors: np.ndarray, columns: list[Monomial], degree: int) -> list[dict]:
    """The echelon basis as ``{monomial: coefficient}``, products of linear laws left out.

    Columns are ordered quadratic monomials first, so a law whose pivot is a linear monomial
    has no quadratic part: those rows are the linear laws ℓ, and any quadratic row that lies in
    span(ℓ_i ℓ_j) given the rows kept before it adds no law and is dropped.
    """
    order = sorted(range(len(columns)), key=lambda c: (len(columns[c]) == 1, columns[c]))
    columns = [columns[c] for c in order]
    basis = echelon(vectors[:, order]) if len(columns) else vectors
    laws = [{columns[c]: float(row[c]) for c in np.flatnonzero(row)} for row in basis]
    linear = [law for law in laws if all(len(m) == 1 for m in law)]
    if degree == 1 or not linear:
        return laws
    index = {m: n for n, m in enumerate(columns)}
    products = [_product(a, b) for n, a in enumerate(linear) for b in linear[n:]]
    for p in products:
        for m in p:
            index.setdefault(m, len(index))
    span = np.zeros((0, len(index)))
    for p in products:
        span = _extend(span, _dense(p, index))
    kept = []
    for law in laws:
        if law in linear:
            kept.append(law)
            continue
        grown = _extend(span, _dense(law, index))
        if grown.shape[0] > span.shape[0]:
            span = grown
            kept.append(law)
    return kept


def _product(a: dict, b: dict) -> dict:
    out: dict = {}
    for (j,), c in a.items():
        for (k,), d in b.items():
            m = (min(j, k), max(j, k))
            out[m] = out.get(m, 0.0) + c * d
    return out


def _dense(law: dict, index: dict) -> np.ndarray:
    row = np.zeros(len(index))
    for m, c in law.items():
        row[index[m]] = c
    return row


def _extend(span: np.ndarray, row: np.ndarray) -> np.ndarray:
    """Orthonormal rows ``span`` plus ``row``'s direction outside them, if it has one."""
    residual = row - span.T @ (span @ row)
    if np.linalg.norm(residual) <= 1e-6 * np.linalg.norm(row):
        return span
    return np.vstack([span, residual / np.linalg.norm(residual)])
