"""The null space of a tall matrix of condition rows, with the evidence of its gap: :func:`null_space`.

:func:`~conslaw_lite.find_laws.find_laws` writes, for each block of coordinates, one row per sampled element of
W(θ) and asks which coefficient vectors all rows annihilate. The rows' Gram matrix locates the null space cheaply
(its smallest eigenpairs, :func:`smallest_eigenpairs`), and an SVD of the rows on that small subspace measures it
exactly: a singular value below ``CUT`` times the largest is dropped, and the smallest kept and largest dropped
ones are the evidence that the caller weighs against its gap.
"""

from __future__ import annotations

import math

import torch
from scipy.linalg import eigh

CUT = 1e-9  # singular values below CUT·σ_max (unit columns) are dropped
CANDIDATE = 1e-5  # eigenvalues of AᵀA below (CANDIDATE·σ_max)² are candidates for the null space ...
EXTRA = 4  # ... together with this many more, whose exact singular values are the smallest kept
SUBSET = 48  # smallest eigenpairs computed first: a block's null space and candidates fit (else more are computed)
TOP_WIDTH, TOP_STEPS = 8, 12  # subspace iteration for λ_max of the Gram matrix: a few % below it on an even
# spectrum, far closer on a Gram's (a few large eigenvalues), and 0.03 s at 4,752 unknowns
COLUMN_FLOOR = 1e-6  # columns are scaled to unit length, but by at most 1/(COLUMN_FLOOR·largest)


def gap(sigma_kept: float, sigma_dropped: float) -> float:
    """``sigma_kept / sigma_dropped``, the evidence of a rank decision (infinite when nothing was dropped).

    Examples
    ========
    >>> gap(1e-3, 1e-15), gap(1.0, 0.0)
    (1000000000000.0, inf)
    """
    return math.inf if sigma_dropped == 0 else sigma_kept / sigma_dropped


def weaker(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    """Of two rank decisions' evidence ``(σ kept, σ dropped)``, the one with the smaller :func:`gap` (NaN first).

    Each block of a search decides its null space on its own rows, their columns scaled to unit length, so a block's
    σ are weighed against each other and never against another block's: a near-law of one block (a LayerNorm's ε
    breaks a rescaling at 10⁻⁶) beside the round-off of another is no doubt about either.

    Examples
    ========
    >>> weaker((6e-6, 2e-10), (1e-3, 7e-10))  # gaps 3·10⁴ and 1.4·10⁶: the first block's is the evidence
    (6e-06, 2e-10)
    >>> weaker((math.inf, 0.0), (1e-3, 7e-10))  # nothing decided yet
    (0.001, 7e-10)
    """
    return b if math.isnan(gap(*b)) or gap(*b) < gap(*a) else a


def null_space(rows: torch.Tensor) -> tuple[torch.Tensor, float, float]:
    """Orthonormal null vectors (k, U) of ``rows`` after column scaling, the smallest kept and largest dropped σ.

    A column far below the largest (a coordinate f hardly depends on) is not scaled up to
    length 1: that would blow its round-off up into a direction. The eigenvectors of AᵀA
    with the smallest eigenvalues (a few more than those below ``CANDIDATE``·σ_max) are a
    subspace that holds the null space up to round-off; the SVD of A on that subspace
    (Rayleigh–Ritz) then gives the singular values there exactly, where AᵀA alone would
    square them into round-off. A full SVD of A gives the same answer several times slower.

    Examples
    ========
    >>> rows = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 1.0], [2.0, 2.0, 3.0]], dtype=torch.float64)  # x₀ = −x₁
    >>> null, kept, dropped = null_space(rows)
    >>> [round(abs(float(c)), 4) for c in null[0]], kept > 1e4 * dropped
    ([0.7071, 0.7071, 0.0], True)
    """
    norms = rows.norm(dim=0)
    scale = norms.clamp_min(COLUMN_FLOOR * float(norms.max()) + 1e-300)
    a = rows / scale
    eigenvalues, vectors, sigma_max = smallest_eigenpairs(a.T @ a)  # ascending
    candidates = int((eigenvalues <= (CANDIDATE * sigma_max) ** 2).sum())  # all of them if f ignores the block
    window = vectors[:, : min(candidates + EXTRA, a.shape[1])]
    _, s, wh = torch.linalg.svd(a @ window, full_matrices=False)  # s descending
    dropped = s <= CUT * sigma_max
    # Back to the unscaled coefficients, then an orthonormal basis of their span: a vector that mixes a column on the
    # floor (a coordinate f never reads) with others is, unscaled, that column's entry to one part in 10⁶, and the
    # other laws it holds (a row sum of a causal score bias) were lost as round-off downstream.
    null = torch.linalg.qr((window @ wh[dropped].T) / scale[:, None])[0].T
    beyond = float(eigenvalues[window.shape[1]].sqrt()) if window.shape[1] < a.shape[1] else math.inf
    sigma_kept = min([float(s[~dropped].min())] if (~dropped).any() else [], default=beyond)
    sigma_dropped = float(s[dropped].max()) if dropped.any() else 0.0
    return null, min(sigma_kept, beyond), sigma_dropped


def smallest_eigenpairs(gram: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, float]:
    """The ``SUBSET`` smallest eigenvalues (ascending, at least 0) and eigenvectors of the Gram matrix, and √λ_max.

    LAPACK's ``syevr`` on that subset takes a third of a full ``eigh`` at 4,752 unknowns (4.6 s against 12.4 s on 2
    cores: no back-transformation of all the vectors). λ_max, which only sets the thresholds, is the top Ritz value of
    ``TOP_STEPS`` steps of subspace iteration. Where the subset holds too few eigenvalues above ``CANDIDATE``·σ_max
    for :func:`_null_space`'s window and the one beyond it (a block f hardly reads, a block with many laws), one four
    times as large is computed, up to a quarter of them; then all of them.

    Examples
    ========
    >>> values, vectors, sigma_max = smallest_eigenpairs(torch.diag(torch.arange(400.0, dtype=torch.float64)))
    >>> values[:3].tolist(), vectors.shape, round(sigma_max ** 2)  # λ_max = 399: the estimate is a little below
    ([0.0, 1.0, 2.0], torch.Size([400, 48]), 390)
    """
    n = len(gram)
    if n <= 4 * SUBSET:
        values, vectors = torch.linalg.eigh(gram)
        return values.clamp_min(0), vectors, math.sqrt(max(float(values[-1]), 0.0))
    x = torch.randn(n, TOP_WIDTH, generator=torch.Generator().manual_seed(0), dtype=gram.dtype)
    for _ in range(TOP_STEPS):
        x = torch.linalg.qr(gram @ x)[0]
    sigma_max = math.sqrt(max(float(torch.linalg.eigvalsh(x.T @ gram @ x)[-1]), 0.0))
    size = SUBSET
    while size <= n // 4:
        values, vectors = eigh(gram.numpy(), subset_by_index=[0, size - 1], driver="evr")
        if values[size - EXTRA - 1] > (CANDIDATE * sigma_max) ** 2:  # the window and the eigenvalue beyond it are in
            return torch.from_numpy(values).clamp_min(0), torch.from_numpy(vectors), sigma_max
        size *= 4
    values, vectors = torch.linalg.eigh(gram)
    return values.clamp_min(0), vectors, sigma_max
