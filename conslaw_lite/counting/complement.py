"""dim Lie(W)(θ) at large D through its orthogonal complement: one LU of D gradients, then problems of size N.

When D is large and N small, the laws live in a small subspace: the orthogonal complement Z of the
span of Lie(W)(θ) (in the weighted coordinates of :mod:`.lie_rank`), of dimension N. Building a basis
of the span chunk by chunk (:func:`.lie_rank.lie_rank`) costs about 4 D³ flops a θ at full rank; here
the complement is found with one LU factorization (⅔ D³) and the rest is of size N:

* **Depth 1.** ``A`` holds D random gradients as rows (length 1), of rank D − N₁. With B (D × p) and
  C (p × D) Gaussian, ``Ã = A + B C`` is invertible once p ≥ N₁, and ``null(A) ⊆ range(Ã⁻¹B)``: if
  ``A z = 0`` then ``Ã z = B (C z)``. The right singular vectors of ``A Q`` (Q an orthonormal basis of
  ``Ã⁻¹B``) with singular value below ``CUT`` span null(A): Z, N₁ columns (``A Ã⁻¹B = B (I − C Ã⁻¹B)``: no
  product with A, which only the bounds below use). If all p are below ``CUT``,
  p may be below N₁: p grows fourfold and Ã is factored again. The left null space U comes from
  ``Ã⁻ᵀCᵀ`` the same way. Z is then refined to an orthonormal basis of ``Â⁻¹U``, ``Â = A + U Zᵀ``
  (:meth:`_Depth1._refined`), solved with Woodbury's formula on Ã's LU.
* **Its evidence: bounds on A's spectrum, both ways.** Dropped: ``σ_{D−N₁+1}(A) ≤ ‖A Z‖₂``
  (Courant–Fischer), taken with the Z left after the deeper depths. Kept: for z ⊥ Z, ``A z = Â z``,
  so ``σ_{D−N₁}(A) ≥ σ_min(Â) = 1/‖Â⁻¹‖₂``. ``‖Â⁻¹‖₂²`` is the largest eigenvalue of ``Â⁻ᵀÂ⁻¹``,
  estimated by power steps from ``POWER_STARTS`` random starts. An estimate is never above it, and
  below 1/16 of it with probability at most ``0.824 √D · 16^{−q+½}`` after q steps (Kuczyński &
  Woźniakowski 1992, the power method), independently for each start. The kept bound is
  ``min ‖Â y‖/‖y‖`` over the starts' last iterates y, computed from A itself, divided by ``MARGIN`` = 4.
  Power steps whose solves leave a residual above ``SOLVE_TOL`` give no kept bound (an inconclusive count).
* **Depth k ≥ 2.** Z shrinks inside itself. Random elements v of depth k (``dim Z + FIRST_CHUNK`` of
  them, more than the depth can add there) have coordinates ``Zᵀv``: what they keep outside the span
  found so far, the residuals of :mod:`.lie_rank`. The right singular vectors of the stacked coordinates
  with singular value above ``CUT`` leave Z. Their singular values are the evidence of these depths, as
  the residuals are there; the dropped ones and ``‖A Z‖₂`` make up the dropped evidence, as the root of
  their sum of squares.

Memory: A and the LU, ``16 D²`` bytes (6.4 GB at D = 20,000), in :class:`Buffers` that every θ of a count
reuses; the LU overwrites the matrix it factors. Nothing else is of size D². A ReLU MLP 50-200-50 (D = 20,000,
N = 200) takes 107–111 s on 2 cores for its two θ, where the basis took 784 s: 29 s a θ for the LU, 11 s for the
gradients, 7 s for the solves. The LU is most of it, and it runs at the machine's float64 matrix rate: on 2 cores
of an AMD EPYC whose LU runs at 65 GFLOP/s (not 180), the same count took 258 s, 82 s a θ for the LU and the solves.
"""

from __future__ import annotations

import math

import torch

from conslaw_lite.counting.lie_rank import (
    CUT,
    FIRST_CHUNK,
    MAX_DEPTH,
    Rank,
    Report,
    Sampler,
    tensor_weights,
)
from conslaw_lite.counting.problem import Field

# POWER_STEPS solves Â⁻¹x make 4 power steps: below 1/16 of ‖Â⁻¹‖² with probability ≤ 0.824 √D 16^(−3.5)
# (0.05 at D = 10⁶)
POWER_STEPS = 5
POWER_STARTS = 32  # independent starts, all that far below with probability ≤ 0.05³² < 10⁻⁴¹; a solve reads the LU
# from memory once for all of them (0.3 s at D = 20,000), so more starts cost little and fewer steps save whole passes
MARGIN = 4.0  # the kept bound: the estimate of σ_min(Â) divided by this (√16)
GRADIENT_BATCH = 16  # gradients a vmap computes at once: the pullbacks' intermediates (rows × inputs × width) stay in
# cache (MLP 50-200-50, D = 20,000: 10.5 s a θ, against 16.6 s at VMAP_BATCH = 128)
SOLVE_TOL = 1e-3  # largest residual ‖Â y − x‖ (x of length 1) of the power steps' solves: their iterates stay power
# iterates to 0.1 %. A sanity check only: the bound itself is ‖Â y‖/‖y‖, at least σ_min(Â) for any y, computed from A


def first_width(D: int) -> int:
    """p of the first factorization: ``max(64, D // 64)``, above the N₁ of most models (MLP 50-200-50: 312 > 200).

    Examples
    ========
    >>> first_width(1000), first_width(20_000)
    (64, 312)
    """
    return max(64, D // 64)


class _LU:
    """An LU factorization of a square matrix M, in M's own memory, solving ``M x = b`` and ``Mᵀ x = b``.

    LAPACK factors Mᵀ: M is row-major, so Mᵀ is column-major and no copy is made (MKL's LU on a CPU is also
    a fifth faster than OpenBLAS's: 29 s against 35 s at D = 20,000, 2 cores).
    """

    def __init__(self, M: torch.Tensor) -> None:
        Mt = M.mT
        pivots = torch.empty(len(M), dtype=torch.int32, device=M.device)
        info = torch.empty((), dtype=torch.int32, device=M.device)
        self.lu, self.pivots, info = torch.linalg.lu_factor_ex(Mt, out=(Mt, pivots, info))
        self.singular = bool(info)  # a pivot exactly 0: the solves would be inf

    def solve(self, b: torch.Tensor, transposed: bool = False) -> torch.Tensor:
        """``M⁻¹ b``, or ``M⁻ᵀ b`` when ``transposed`` (the factors are of Mᵀ)."""
        return torch.linalg.lu_solve(self.lu, self.pivots, b, adjoint=not transposed)


def _orthonormal(Y: torch.Tensor) -> torch.Tensor:
    return torch.linalg.qr(Y)[0]


def _directions(solved: torch.Tensor, M: torch.Tensor, P: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For ``X = Ã⁻¹M``, ``Ã = A + M P``: the singular values of ``A Q`` (descending), ``Q R = X``, and the orthonormal
    columns ``Q V`` that A maps to them.

    ``A X = M (I − P X)``, so ``A Q = M (I − P X) R⁻¹``: no product with A (2 D² p operations, 1.6 s at D = 20,000,
    p = 312). Only where to look is chosen here: the bounds are computed from A itself.
    """
    Q, R = torch.linalg.qr(solved)
    eye = torch.eye(len(P), dtype=P.dtype, device=P.device)
    AQ = torch.linalg.solve_triangular(R, M @ (eye - P @ solved), upper=True, left=False)
    _, s, Vh = torch.linalg.svd(AQ, full_matrices=False)
    return s, Q @ Vh.T


class Buffers:
    """The two D × D matrices of :func:`complement_rank`, the gradients A and the LU of ``A + B C``, allocated once
    for every θ of a count: on a CPU each page of a fresh matrix faults at its first write (2.5 s for the 3.2 GB
    of D = 20,000, ten times the time to copy them).

    Examples
    ========
    >>> buffers = Buffers(3, torch.device("cpu"))
    >>> buffers.gradients.shape, buffers.factors.dtype
    (torch.Size([3, 3]), torch.float64)
    """

    def __init__(self, D: int, device: torch.device) -> None:
        self.gradients = torch.empty(D, D, dtype=torch.float64, device=device)
        self.factors = torch.empty_like(self.gradients)


def _gradients(
    sample: Sampler, n_out: int, gen: torch.Generator, A: torch.Tensor, report: Report | None = None
) -> torch.Tensor:
    """A: D random elements of depth 1, as rows (weighted, length 1), written ``GRADIENT_BATCH`` rows at a time.

    Their cotangents are uniform, not normal: any continuous law gives random elements of W, and torch draws
    uniform numbers three times as fast (D × 1.25 D of them: 5·10⁸ at D = 20,000, 9 s of normal ones a θ).
    """
    D, device = len(A), A.device
    for start in range(0, D, GRADIENT_BATCH):
        if report is not None and start % (64 * GRADIENT_BATCH) == 0:
            report(1, 0, f"gradients {start:,}/{D:,}")
        m = min(GRADIENT_BATCH, D - start)
        uniform = torch.rand(m, 1, n_out, generator=gen, dtype=torch.float64).to(device)
        A[start : start + m] = sample(uniform.sub_(0.5))
    return A


class _Depth1:
    """null(A) and null(Aᵀ) from one LU of ``Ã = A + B C``, and the bounds on A's spectrum (module docstring)."""

    def __init__(self, A: torch.Tensor, gen: torch.Generator, factors: torch.Tensor | None = None) -> None:
        D, device = len(A), A.device
        factors = torch.empty_like(A) if factors is None else factors  # the memory its LU is computed in
        p = first_width(D)
        while True:
            p = min(p, D)
            B = torch.randn(D, p, generator=gen, dtype=torch.float64).to(device) / math.sqrt(D)
            C = torch.randn(p, D, generator=gen, dtype=torch.float64).to(device) / math.sqrt(D)
            self.lu = _LU(factors.copy_(A).addmm_(B, C))  # addmm into a new matrix: twice as long
            if self.lu.singular and p < D:  # B C did not fill null(A): p is below N₁
                p *= 4
                continue
            self.solved_B = self.lu.solve(B)
            self.s, W = _directions(self.solved_B, B, C)
            n = int((self.s <= CUT).sum())
            if n < p or p == D:
                break
            p *= 4  # every direction of range(Ã⁻¹B) is null: there may be more than p
        U = _directions(self.lu.solve(C.T, transposed=True), C.T, B.T)[1][:, p - n :]  # as many, A's left null space
        self.A, self.C, self.N, self.U = A, C, n, U
        self.G = torch.cat([-self.solved_B, self.lu.solve(U) if n else U], 1)  # Ã⁻¹E: Â = Ã + E F, E = [−B, U]
        self.Z = self._refined(W[:, p - n :]) if n else W[:, p:]

    def _woodbury(self, Z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """F = [C; Zᵀ] and Woodbury's capacitance ``K = I + F Ã⁻¹E`` of ``Â = A + U Zᵀ = Ã + E F``."""
        F = torch.cat([self.C, Z.T])
        return F, torch.eye(len(F), dtype=F.dtype, device=F.device) + F @ self.G

    def _refined(self, Z: torch.Tensor) -> torch.Tensor:
        """An orthonormal basis of ``Â⁻¹U``, ``Â = A + U Zᵀ``: null(A) to round-off whatever Z's error.

        For ``Z*`` spanning null(A), ``Â Z* = U (Zᵀ Z*)``, so ``Â⁻¹U`` spans null(A). The SVD's Z is only as accurate
        as ``Ã⁻¹B`` (Ã can be ill-conditioned: B C is random), off by up to ``‖A Z‖ / σ_kept`` ≈ 10⁻⁸; a bracket
        in the span then keeps that much outside it, at ``CUT``. Â is as well conditioned as A's kept part.
        """
        F, K = self._woodbury(Z)
        solved_U = self.G[:, -Z.shape[1] :]
        return _orthonormal(solved_U - self.G @ torch.linalg.solve(K, F @ solved_U))

    def kept(self, gen: torch.Generator) -> float:
        """A lower bound on ``σ_{D−N₁}(A)``: ``σ_min(Â)`` as the power steps estimate it, over ``MARGIN`` (0 if a
        solve fails).

        The estimate is ``min ‖Â y‖/‖y‖`` over the starts' last iterates y: never below ``σ_min(Â)``, and at most
        ``MARGIN`` times it but with the probability of the module docstring.
        """
        A, Z, U, G = self.A, self.Z, self.U, self.G
        F, K = self._woodbury(Z)

        def solve(x: torch.Tensor, transposed: bool = False) -> torch.Tensor:  # Â⁻¹ x, or Â⁻ᵀ x
            if transposed:  # Â⁻ᵀ = (Ã⁻¹ − G K⁻¹ F Ã⁻¹)ᵀ = Ã⁻ᵀ (I − Fᵀ K⁻ᵀ Gᵀ): one solve
                return self.lu.solve(x - F.T @ torch.linalg.solve(K.T, G.T @ x), transposed=True)
            y = self.lu.solve(x)
            return y - G @ torch.linalg.solve(K, F @ y)

        x = torch.randn(len(A), POWER_STARTS, generator=gen, dtype=A.dtype).to(A.device)
        for step in range(POWER_STEPS):
            x = x / x.norm(dim=0)
            y = solve(x)  # ‖y‖² is the Rayleigh quotient of Â⁻ᵀÂ⁻¹ at x
            if step < POWER_STEPS - 1:
                x = solve(y, transposed=True)
        Ay = A @ y + U @ (Z.T @ y)  # Â y, from A itself
        if float((Ay - x).norm(dim=0).max()) > SOLVE_TOL:
            return 0.0
        return float((Ay.norm(dim=0) / y.norm(dim=0)).min()) / MARGIN


def complement_rank(
    f: Field,
    theta: torch.Tensor,
    n_out: int,
    gen: torch.Generator,
    sizes: list[int],
    report: Report | None = None,
    buffers: Buffers | None = None,
) -> Rank:
    """dim Lie(W)(θ) as D minus the dimension of its orthogonal complement (module docstring).

    The same arguments and result as :func:`.lie_rank.lie_rank` (``buffers``: those of the count's earlier θ),
    with ``evidence == "complement"``:
    ``sigma_kept`` is the smaller of the bound on depth 1's kept singular values and the deeper depths'
    smallest kept residual; ``sigma_dropped`` the norm of ``‖A Z‖₂`` (Z the complement at the end) and the
    deeper dropped residuals.

    Examples
    ========
    >>> x = torch.randn(16, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    >>> f = lambda t: (x @ t[:6].reshape(2, 3).T @ t[6:].reshape(3, 2).T).reshape(-1)  # linear net 3 → 2 → 3
    >>> theta = torch.randn(12, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    >>> r = complement_rank(f, theta, 48, torch.Generator().manual_seed(2), [6, 6])
    >>> r.rank, r.evidence, r.sigma_kept > 1e4 * r.sigma_dropped  # N = 12 − 9 = r(r+1)/2 = 3
    (9, 'complement', True)
    """
    D = theta.numel()
    sample = Sampler(f, theta, tensor_weights(f, theta, n_out, gen, sizes))
    buffers = buffers or Buffers(D, theta.device)
    A = _gradients(sample, n_out, gen, buffers.gradients, report)
    if report is not None:
        report(1, 0, f"LU of the {D:,} gradients")
    first = _Depth1(A, gen, buffers.factors)
    Z, kept, spectrum = first.Z, first.kept(gen), [first.s]
    del first  # its solves, before the brackets' workspace (A stays, for the dropped bound)
    ranks, residuals, dropped = [D - Z.shape[1]], [], []
    if report is not None:
        report(1, ranks[-1])
    for depth in range(2, MAX_DEPTH + 1):
        if Z.shape[1] == 0:
            break
        cotangents = torch.randn(Z.shape[1] + FIRST_CHUNK, depth, n_out, generator=gen, dtype=torch.float64)
        V = sample(cotangents.to(theta.device))
        _, s, Vh = torch.linalg.svd(V @ Z, full_matrices=False)  # what V keeps outside the span found so far
        leave = int((s > CUT).sum())
        Z = Z @ Vh[leave:].T
        residuals.append(s)
        dropped.append(s[leave:])
        ranks.append(D - Z.shape[1])
        if report is not None:
            report(depth, ranks[-1])
        if leave == 0:
            break
        kept = min(kept, float(s[leave - 1]))
    if Z.shape[1]:  # depth 1's part: A on the complement found at the end (deeper depths may have shrunk it)
        dropped.append(torch.linalg.matrix_norm(A @ Z, ord=2).reshape(1))
    dropped = float(torch.cat(dropped).norm()) if dropped else 0.0
    saturated = Z.shape[1] == 0 or (len(ranks) > 1 and ranks[-1] == ranks[-2])
    values = torch.cat(spectrum + residuals).sort(descending=True).values.cpu().numpy()
    return Rank(ranks[-1], len(ranks), tuple(ranks), values, kept, dropped, "complement", saturated)
