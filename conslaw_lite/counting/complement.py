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
reuses; the LU overwrites the matrix it factors. Nothing else is of size D². Where both would not fit, A is not
stored: its rows are recomputed at each product with A (:class:`Gradients`, three passes a θ instead of one), and
the LU alone is of size D²: a ReLU MLP 200-250-200 (D = 100,000) peaked at 92.9 GB on an H200 (its LU 80 GB) and
took 72 s for its two θ. A ReLU MLP 50-200-50 (D = 20,000,
N = 200) takes 107–111 s on 2 cores for its two θ, where the basis took 784 s: 29 s a θ for the LU, 11 s for the
gradients, 7 s for the solves. The LU is most of it, and it runs at the machine's float64 matrix rate: on 2 cores
of an AMD EPYC whose LU runs at 65 GFLOP/s (not 180), the same count took 258 s, 82 s a θ for the LU and the solves.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import torch

from conslaw_lite.counting.lie_rank import (
    CUT,
    FIRST_CHUNK,
    MAX_DEPTH,
    VMAP_BATCH,
    Rank,
    Report,
    Sampler,
    tensor_weights,
)
from conslaw_lite.counting.problem import Field
from conslaw_lite.time_limit import check_time

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
    """The D × D matrices of :func:`complement_rank`, allocated once for every θ of a count: the LU of ``A + B C``
    and, where they fit beside it, the gradients A (``replay``: A is not stored, each product with it recomputes its
    rows, see :class:`Gradients`). On a CPU each page of a fresh matrix faults at its first write (2.5 s for the
    3.2 GB of D = 20,000, ten times the time to copy them).

    Examples
    ========
    >>> buffers = Buffers(3, torch.device("cpu"))
    >>> buffers.gradients.shape, buffers.factors.dtype, Buffers(3, torch.device("cpu"), replay=True).gradients
    (torch.Size([3, 3]), torch.float64, None)
    """

    def __init__(self, D: int, device: torch.device, replay: bool = False) -> None:
        self.factors = torch.empty(D, D, dtype=torch.float64, device=device)
        self.gradients = None if replay else torch.empty_like(self.factors)


class Gradients:
    """A: D random elements of depth 1, as rows (weighted, length 1), ``GRADIENT_BATCH`` rows at a time: held in a
    D × D matrix (``stored``), or replayed from a seed, batch by batch, at each use (no memory of size D²: a product
    with A costs one more pass of gradients instead, the price of a count whose A and LU would not both fit).

    Their cotangents are uniform, not normal: any continuous law gives random elements of W, and torch draws
    uniform numbers three times as fast (D × 1.25 D of them: 5·10⁸ at D = 20,000, 9 s of normal ones a θ). They
    are drawn on the device, from a generator seeded by ``gen``: a replay draws the same ones.

    Examples
    ========
    >>> f = lambda t: torch.stack([t[0] * t[1], t[0] ** 2])  # two outputs of two parameters
    >>> theta = torch.tensor([1.0, 2.0], dtype=torch.float64)
    >>> sample = Sampler(f, theta, torch.ones(2, dtype=torch.float64))
    >>> stored = Gradients(sample, 2, torch.Generator().manual_seed(0), 2, torch.empty(2, 2, dtype=torch.float64))
    >>> replayed = Gradients(sample, 2, torch.Generator().manual_seed(0), 2)
    >>> y = torch.eye(2, dtype=torch.float64)
    >>> torch.allclose(stored @ y, replayed @ y), torch.equal(replayed.write(torch.empty_like(y)), stored.stored)
    (True, True)
    """

    def __init__(
        self,
        sample: Sampler,
        n_out: int,
        gen: torch.Generator,
        D: int,
        stored: torch.Tensor | None = None,
        report: Report | None = None,
    ) -> None:
        self.sample, self.n_out, self.D, self.stored, self.report = sample, n_out, D, stored, report
        self.device = sample.theta.device
        self.seed = int(torch.randint(2**62, (1,), generator=gen))
        if stored is not None:
            self.write(stored)

    @classmethod
    def of(cls, matrix: torch.Tensor) -> Gradients:
        """A given matrix as A (stored): the bounds of :class:`_Depth1` tried on a known spectrum."""
        A = cls.__new__(cls)
        A.stored, A.D, A.device, A.report = matrix, len(matrix), matrix.device, None
        return A

    def __len__(self) -> int:
        return self.D

    def batches(self, report: Report | None = None) -> Iterator[tuple[int, torch.Tensor]]:
        """(first row, rows) of A, ``GRADIENT_BATCH`` at a time (``VMAP_BATCH`` on a GPU, where a vmap is cheap)."""
        gen = torch.Generator(self.device).manual_seed(self.seed)
        batch = GRADIENT_BATCH if self.device.type == "cpu" else VMAP_BATCH
        for start in range(0, self.D, batch):
            check_time()
            if report is not None and start % (64 * batch) == 0:
                report(1, 0, f"gradients {start:,}/{self.D:,}")
            m = min(batch, self.D - start)
            uniform = torch.rand(m, 1, self.n_out, generator=gen, dtype=torch.float64, device=self.device)
            yield start, self.sample(uniform.sub_(0.5))

    def write(self, out: torch.Tensor) -> torch.Tensor:
        """A, computed row by row into ``out`` (D × D)."""
        for start, rows in self.batches(self.report):
            out[start : start + len(rows)] = rows
        return out

    def plus_product(self, B: torch.Tensor, C: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """``A + B C``, written into ``out`` (D × D): a stored A by one ``addmm`` (as fast as a copy and then a
        product: 0.59 s each at D = 12,000, 2 cores), replayed rows by their batches and then the product."""
        if self.stored is not None:
            return torch.addmm(self.stored, B, C, out=out)
        return self.write(out).addmm_(B, C)

    def __matmul__(self, y: torch.Tensor) -> torch.Tensor:
        """``A y``."""
        if self.stored is not None:
            return self.stored @ y
        out = torch.empty(self.D, y.shape[1], dtype=y.dtype, device=y.device)
        for start, rows in self.batches():
            out[start : start + len(rows)] = rows @ y
        return out


class _Depth1:
    """null(A) and null(Aᵀ) from one LU of ``Ã = A + B C``, and the bounds on A's spectrum (module docstring)."""

    def __init__(
        self, A: Gradients, gen: torch.Generator, factors: torch.Tensor | None = None, report: Report | None = None
    ) -> None:
        D, device = len(A), A.device
        factors = torch.empty(D, D, dtype=torch.float64, device=device) if factors is None else factors
        p = first_width(D)
        while True:
            p = min(p, D)
            B = torch.randn(D, p, generator=gen, dtype=torch.float64).to(device) / math.sqrt(D)
            C = torch.randn(p, D, generator=gen, dtype=torch.float64).to(device) / math.sqrt(D)
            A.plus_product(B, C, factors)  # factors: the memory its LU is computed in
            check_time()
            if report is not None:
                report(1, 0, f"LU of the {D:,} gradients")
            self.lu = _LU(factors)
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

    def _solver(self, Z: torch.Tensor) -> Callable[..., torch.Tensor]:
        """``x ↦ Â⁻¹x`` (or ``Â⁻ᵀx``, ``transposed``) for ``Â = A + U Zᵀ = Ã + E F``, F = [C; Zᵀ], by Woodbury's
        formula on Ã's LU: ``Â⁻¹ = Ã⁻¹ − G K⁻¹ F Ã⁻¹``, G = Ã⁻¹E, capacitance ``K = I + F G``."""
        F = torch.cat([self.C, Z.T])
        G = self.G
        K = torch.eye(len(F), dtype=F.dtype, device=F.device) + F @ G

        def solve(x: torch.Tensor, transposed: bool = False, solved: torch.Tensor | None = None) -> torch.Tensor:
            if transposed:  # Â⁻ᵀ = Ã⁻ᵀ (I − Fᵀ K⁻ᵀ Gᵀ): one solve
                return self.lu.solve(x - F.T @ torch.linalg.solve(K.T, G.T @ x), transposed=True)
            y = self.lu.solve(x) if solved is None else solved  # Ã⁻¹x, where it is known already
            return y - G @ torch.linalg.solve(K, F @ y)

        return solve

    def _refined(self, Z: torch.Tensor) -> torch.Tensor:
        """An orthonormal basis of ``Â⁻¹U``, ``Â = A + U Zᵀ``: null(A) to round-off whatever Z's error.

        For ``Z*`` spanning null(A), ``Â Z* = U (Zᵀ Z*)``, so ``Â⁻¹U`` spans null(A). The SVD's Z is only as accurate
        as ``Ã⁻¹B`` (Ã can be ill-conditioned: B C is random), off by up to ``‖A Z‖ / σ_kept`` ≈ 10⁻⁸; a bracket
        in the span then keeps that much outside it, at ``CUT``. Â is as well conditioned as A's kept part, but its
        solves go through Ã's LU: one step of iterative refinement, its residual ``U − Â Y`` computed from A
        itself, takes out what Ã's conditioning added (ReLU MLP 40-125-40, D = 10,000: ``‖A Z‖₂`` 2.3·10⁻¹⁰ without it,
        6.2·10⁻¹⁴ with it).
        """
        solve = self._solver(Z)
        Y = solve(self.U, solved=self.G[:, -Z.shape[1] :])  # G's last columns are Ã⁻¹U
        return _orthonormal(Y + solve(self.U - self.A @ Y - self.U @ (Z.T @ Y)))

    def kept(self, gen: torch.Generator) -> float:
        """A lower bound on ``σ_{D−N₁}(A)``: ``σ_min(Â)`` as the power steps estimate it, over ``MARGIN`` (0 if a
        solve fails).

        The estimate is ``min ‖Â y‖/‖y‖`` over the starts' last iterates y: never below ``σ_min(Â)``, and at most
        ``MARGIN`` times it but with the probability of the module docstring.
        """
        A, Z, U = self.A, self.Z, self.U
        solve = self._solver(Z)

        x = torch.randn(len(A), POWER_STARTS, generator=gen, dtype=torch.float64).to(A.device)
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
    A = Gradients(sample, n_out, gen, D, buffers.gradients, report)
    first = _Depth1(A, gen, buffers.factors, report)
    Z, kept, spectrum = first.Z, first.kept(gen), [first.s]
    del first  # its solves, before the brackets' workspace (A stays, for the dropped bound)
    ranks, residuals, dropped = [D - Z.shape[1]], [], []
    if report is not None:
        report(1, ranks[-1])
    for depth in range(2, MAX_DEPTH + 1):
        if Z.shape[1] == 0:
            break
        check_time()
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
