"""The null-space machinery of :func:`~conslaw_lite.find_laws.find_laws`: sampled rows, one block's laws, their span.

A quadratic law over coordinates ``coords`` is a vector of coefficients over the monomials θ_jθ_k (j ≤ k) and θ_j;
it is conserved when ``⟨∇h(θ), g⟩ = 0`` for every sampled θ and g ∈ W(θ), one linear row per sample
(:func:`block_laws`; :func:`within_budget`: as many blocks as a budget of work allows). :class:`Samples` draws the θ
and the g, :class:`Span` says how many independent laws the vectors found so far hold, :func:`residuals` checks
candidate laws (moved to another unit) on the samples.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from itertools import accumulate, combinations_with_replacement, takewhile

import numpy as np
import torch
from torch.func import vjp, vmap

from conslaw_lite.counting import GAP, RESIDUAL_TOL
from conslaw_lite.counting.count import outputs_over_pieces
from conslaw_lite.counting.exact_ops import quiet_vmap
from conslaw_lite.counting.problem import NEAR_STANDARD, Problem, checked_outputs, sample_inputs
from conslaw_lite.law_basis import COEFFICIENT_TOL, law_count
from conslaw_lite.law_blocks import pair_seconds, unknowns
from conslaw_lite.null_space import gap, null_space, weaker
from conslaw_lite.polynomial_laws import Monomial
from conslaw_lite.seeding import Stream, generator
from conslaw_lite.time_limit import OutOfTime, check_time

# A null vector whose part outside the span of those before is below this adds to none: a search's vectors carry
# round-off of about σ_dropped / σ_kept (10⁻⁶ in a whole Llama with biases, gap 10⁶), and at 10⁻⁷ a law found twice
# counted twice, so the search stopped one law short (41 of 42)
INDEPENDENT_TOL = 1e-4
QUIET_DRAWS = 2  # fresh θ in a row that must remove nothing before a search's laws are confirmed (confirmed)
RANK_CUT = 1e-6  # singular values of W(θ)'s samples below RANK_CUT·σ_max add no row (more θ are drawn, never fewer)


@dataclass(frozen=True)
class Samples:
    """Random θ (P, D) and, per θ, m random elements of W(θ): g (P, m, D)."""

    theta: torch.Tensor
    g: torch.Tensor
    points: dict[tuple[int, ...], int] = field(default_factory=dict)  # θ each block needs (the first P, default all)
    # the products θ_jθ_k a block's quadratic laws may use, as positions in it (law_blocks.aligned_monomials), where
    # not all of them
    monomials: dict[tuple[int, ...], list[tuple[int, int]]] = field(default_factory=dict)

    def unknowns(self, coords: list[int], degree: int) -> int:
        """The coefficients of a law on ``coords``: its :attr:`monomials` and coordinates, or :func:`unknowns`."""
        return _unknowns(coords, degree, self.monomials)

    @classmethod
    def draw(
        cls, problem: Problem, input_shape, inputs, seed: int, blocks: list[list[int]], degree: int, tier: int = 0,
        monomials: dict[tuple[int, ...], list[tuple[int, int]]] | None = None,
    ) -> Samples:  # fmt: skip
        """Enough θ that each block's system gets twice as many *independent* rows as unknowns.

        One θ gives at most rank W(θ) independent rows on a block (fewer on its coordinates
        alone), however many elements of W(θ) are drawn: a deep linear net has rank W(θ) ≤ d·m
        whatever its D. Counting m = (largest block) rows per θ left the pair systems short
        of rows, and the missing rank came out as spurious "laws" that a gap could not flag
        (their singular values are exactly 0). So the first θ measures each block's rank r_b,
        P = max_b ⌈2 U_b / r_b⌉ + 4 θ are drawn, each with m = rank W(θ) elements (at most the largest
        block's size: more add no rank on any block); block b's rows come from the first ⌈2 U_b / r_b⌉ + 4
        (``points``). ``tier``: each kind of block gets its own θ. ``monomials``: the products some blocks' laws may
        use (:attr:`monomials`), fewer unknowns than all of them.
        """
        gen = generator(seed, Stream.LAW_SEARCH, tier)  # not the counter's θ and inputs
        n_max = max(map(len, blocks))
        started = time.monotonic()
        first_theta, first_g = cls._point(problem, input_shape, inputs, gen, n_max)
        per_point = time.monotonic() - started  # a θ past a time limit is not started (time_limit)
        rank = _rank(first_g)
        ranks = [rank if len(coords) == first_g.shape[1] else _rank(first_g[:, coords]) for coords in blocks]  # all θ
        m = max(rank, 1)
        needs = {
            tuple(c): math.ceil(2 * _unknowns(c, degree, monomials or {}) / r) + 4 for c, r in zip(blocks, ranks) if r
        }
        points = max(needs.values(), default=5)
        thetas, gs = [first_theta], [first_g[:m]]
        for _ in range(points - 1):
            check_time(per_point)
            theta, g = cls._point(problem, input_shape, inputs, gen, m)
            thetas.append(theta)
            gs.append(g)
        return cls(torch.stack(thetas), torch.stack(gs), needs, monomials or {})

    @classmethod
    def fresh(cls, problem: Problem, input_shape, inputs, seed: int, tier: int, m: int) -> Iterator[Samples]:
        """New θ one at a time, each with m random unit elements of W(θ), from a stream of their own (``tier``)."""
        gen = generator(seed, Stream.LAW_SEARCH, tier)
        while True:
            theta, g = cls._point(problem, input_shape, inputs, gen, m)
            yield cls(theta[None], g[None])

    @staticmethod
    def _point(problem: Problem, input_shape, inputs, gen: torch.Generator, m: int):
        """A random θ and m random unit elements of W(θ) there."""
        D = problem.num_params
        # a law's products θ_jθ_k are round-off beside its θ_j where θ is tiny (a ReLU MLP at 10⁻⁶: hundreds of dense
        # null vectors that are no laws, checked for minutes), and laws hold at every θ
        theta = problem.random_theta(gen, decades=NEAR_STANDARD)
        probe = sample_inputs(input_shape, inputs, 1, gen, spread=False)
        per_input = max(checked_outputs(problem, theta, probe).numel() // max(len(probe), 1), 1)
        # standard-normal inputs: the null space is solved without the counter's per-input weights; the pieces
        # of a cap that other scales reach come from random θ' of many decades, as in the count
        rows = min(512, math.ceil(2 * D / per_input) + 2)
        x = sample_inputs(input_shape, inputs, rows, gen, spread=False)
        out, pullback = vjp(outputs_over_pieces(problem, theta, x, gen, rows), theta)
        g = _pull(pullback, torch.randn(m, out.numel(), generator=gen, dtype=torch.float64))
        return theta, g / g.norm(dim=1, keepdim=True).clamp_min(1e-300)  # unit rows over all of θ


def _unknowns(coords: list[int], degree: int, monomials: dict[tuple[int, ...], list[tuple[int, int]]]) -> int:
    products = monomials.get(tuple(coords))
    return unknowns(len(coords), degree) if products is None or degree == 1 else len(products) + len(coords)


def _rank(g: torch.Tensor) -> int:
    """Numerical rank of g's rows; an overestimate would draw too few θ, so the cut is generous (RANK_CUT).

    The singular values' squares are the eigenvalues of g's smaller Gram matrix: σ² > RANK_CUT² σ_max², which float64
    resolves (its round-off there is about 10⁻¹⁶ σ_max²), three times as fast as the singular values themselves
    (5 s against 15 s on 2 cores for the 4,096 × 4,096 rows of an attention's linear laws).

    Examples
    ========
    >>> _rank(torch.tensor([[1.0, 2.0], [2.0, 4.0], [0.0, 1.0]], dtype=torch.float64))
    2
    """
    if not g.numel():
        return 0
    squares = torch.linalg.eigvalsh(g @ g.mT if g.shape[0] <= g.shape[1] else g.mT @ g)
    top = float(squares[-1])
    return int((squares > RANK_CUT**2 * top).sum()) if top > 0 else 0


def _pull(pullback: Callable, cotangents: torch.Tensor) -> torch.Tensor:
    """``aᵀ ∂f/∂θ`` for each row a: random elements of W(θ), vectorized unless the model's control flow forbids it."""
    try:
        with quiet_vmap():  # the module's own kernels: sdpa's backward has no batching rule
            return vmap(pullback)(cotangents)[0]
    except RuntimeError:  # data-dependent control flow (top-k routing, .item()): one at a time
        return torch.stack([pullback(a)[0] for a in cotangents])


@dataclass(frozen=True)
class Search:
    """Null vectors (k, U) over ``columns`` (monomials, global coordinates) and the evidence."""

    vectors: np.ndarray
    columns: list[Monomial]
    conclusive: bool
    reason: str
    searched: str
    sigma_kept: float
    sigma_dropped: float
    blocks: int = 0  # blocks searched (the search stops once the laws found reach the count)
    removed: int = 0  # null directions that fresh θ showed were no laws (confirmed)

    @property
    def evidence(self) -> tuple[float, float]:
        """``(sigma_kept, sigma_dropped)`` of the block with the smallest gap (:func:`~conslaw_lite.null_space.weaker`).
        """
        return self.sigma_kept, self.sigma_dropped

    @property
    def gap(self) -> float:
        """``sigma_kept / sigma_dropped`` (infinite when nothing was dropped)."""
        return gap(self.sigma_kept, self.sigma_dropped)

    def confirmed(self, fresh: Iterator[Samples], quiet: int = QUIET_DRAWS) -> Search:
        """The combinations of the null vectors that fresh θ keep too; :attr:`removed` counts the directions dropped.

        A block's rows can leave null vectors that are no laws, exact zeros that no gap flags: coordinates that get
        fewer rows per θ than the block's rank (the biases after a network's last nonlinearity: one row per output,
        whatever the input) go short when the θ are counted for the block as a whole. So each θ of ``fresh`` (one each)
        gives the cosines ``A[g, l] = ⟨g, ∇h_l(θ)⟩ / (‖g‖ ‖∇h_l(θ)‖)``; the combinations c with ``A c`` within the
        search's own precision are kept (singular values up to ``√(σ_dropped / σ_kept)``, at least ``RESIDUAL_TOL``:
        a law's raw null vector is exact to about ``σ_dropped / σ_kept``), until ``quiet`` θ in a row remove nothing
        (a direction that is no law fails at almost every θ). Removed and kept singular values less than
        :data:`~conslaw_lite.counting.GAP` apart make the search inconclusive.

        Examples
        ========
        Rotations, W(θ) = span{(−θ₁, θ₀)}: at θ = (1, 2) both θ₀² + θ₁² and θ₀ + 2θ₁ are conserved, at (3, 1) only
        the first.

        >>> at = lambda *x: torch.tensor([x], dtype=torch.float64)
        >>> fresh = Samples(at(3.0, 1.0), at(-1.0, 3.0)[None])  # θ = (3, 1), g = (−1, 3)
        >>> search = assembled([{(0, 0): 1.0, (1, 1): 1.0}, {(0,): 1.0, (1,): 2.0}], math.inf, 0.0, "")
        >>> kept = search.confirmed(iter([fresh] * 3))
        >>> kept.removed, [{m: round(c / v[(0, 0)], 6) for m, c in v.items()} for v in as_dicts(kept)]  # the circle
        (1, [{(0, 0): 1.0, (1, 1): 1.0}])
        """
        vectors, removed, calm, grey = self.vectors, 0, 0, []
        precision = max(RESIDUAL_TOL, math.sqrt(self.sigma_dropped / self.sigma_kept) if self.sigma_kept > 0 else 1.0)
        while len(vectors) and calm < quiet:
            check_time()
            laws = as_dicts(replace(self, vectors=vectors))
            dots, g_norms, h_norms = _dots(next(fresh), laws)
            h_norms = h_norms[:, 0, 0].clamp_min(1e-300)
            _, s, vh = torch.linalg.svd(
                dots[:, 0, :].T / g_norms[0, :, None].clamp_min(1e-300) / h_norms, full_matrices=True
            )
            s = torch.cat([s, s.new_zeros(len(laws) - len(s))])  # fewer rows than laws: the rest are null here
            null = s <= precision
            if null.any() and not null.all() and float(s[~null].min()) < GAP * float(s[null].max()):
                grey.append((float(s[~null].min()), float(s[null].max())))
            calm = calm + 1 if null.all() else 0
            removed += int((~null).sum())
            combined = (vh[null] / h_norms).numpy() @ vectors  # back from the cosines' scaled columns
            vectors = np.linalg.qr(combined.T)[0].T if null.any() else vectors[:0]
        kept = assembled([_terms(v, self.columns) for v in vectors], self.sigma_kept, self.sigma_dropped, self.searched)
        if grey:
            reason = f"no clear gap on fresh θ: laws found up to {grey[0][1]:.1e}, the rest from {grey[0][0]:.1e}"
            kept = replace(kept, conclusive=False, reason="; ".join(filter(None, [kept.reason, reason])))
        return replace(kept, blocks=self.blocks, removed=removed)


class Stopped(OutOfTime):
    """A search stopped at its time limit, with the laws of the blocks it solved before (``found``): each block's null
    space is whole, so they are laws as any others, and :func:`~conslaw_lite.find_laws.find_laws` keeps them.

    Examples
    ========
    >>> stop = Stopped("stopped at its time limit of 1 s (seconds=1)", assembled([{(0,): 1.0}], 1.0, 0.0, ""))
    >>> isinstance(stop, OutOfTime), stop.found.blocks, as_dicts(stop.found)
    (True, 0, [{(0,): 1.0}])
    """

    def __init__(self, message: str, found: Search) -> None:
        super().__init__(message)
        self.found = found


def _columns(coords: list[int], degree: int, products: list[tuple[int, int]] | None = None) -> list[Monomial]:
    """The monomials over ``coords``: θ_jθ_k (j ≤ k; those of ``products`` alone when given), then θ_j."""
    if degree == 1:
        quad = []
    elif products is None:
        quad = list(combinations_with_replacement(coords, 2))
    else:
        quad = [(coords[p], coords[q]) for p, q in products]
    return quad + [(j,) for j in coords]


def _rows(samples: Samples, coords: list[int], degree: int) -> torch.Tensor:
    """The condition's rows for laws in ``coords``: (g_jθ_k + g_kθ_j for j ≤ k, g_j), one per sample g."""
    idx, P = torch.tensor(coords), samples.points.get(tuple(coords), len(samples.theta))
    theta = samples.theta[:P, idx]  # (P, n): the θ this block needs (a small pair needs fewer than the largest)
    g = samples.g[:P, :, idx]  # (P, m, n)
    parts = []
    if degree == 2:
        products = samples.monomials.get(tuple(coords))
        j, k = torch.triu_indices(len(coords), len(coords)) if products is None else torch.tensor(products).T
        parts.append(g[:, :, j] * theta[:, None, k] + g[:, :, k] * theta[:, None, j])
    parts.append(g)
    return torch.cat(parts, dim=2).reshape(-1, samples.unknowns(coords, degree))


def _terms(v: np.ndarray, columns: list[Monomial]) -> dict[Monomial, float]:
    """A null vector as ``{monomial: coefficient}``, coefficients under ``COEFFICIENT_TOL`` of its largest dropped."""
    return {columns[c]: float(v[c]) for c in np.flatnonzero(np.abs(v) > COEFFICIENT_TOL * np.abs(v).max())}


def block_laws(
    samples: Samples, blocks: list[list[int]], degree: int, searched: str, enough: Callable[[list], bool] | None = None
) -> Search:
    """The null space of the condition on each block of coordinates, all in one list of global monomials.

    ``enough(vectors)``: checked after each block once there are as many vectors as needed; the
    remaining blocks are then left out (the laws found already reach the count). A time limit reached before a block
    raises :class:`Stopped` with the laws of the blocks before it.
    """
    vectors, kept, dropped, done = [], math.inf, 0.0, 0
    for coords in blocks:
        try:
            check_time()
        except OutOfTime as stop:
            raise Stopped(str(stop), replace(assembled(vectors, kept, dropped, searched), blocks=done)) from None
        done += 1
        null, sigma_kept, sigma_dropped = null_space(_rows(samples, coords, degree))
        kept, dropped = weaker((kept, dropped), (sigma_kept, sigma_dropped))
        names = _columns(coords, degree, samples.monomials.get(tuple(coords)))
        for v in null.numpy():
            vectors.append(_terms(v, names))
        if enough is not None and len(null) and enough(vectors):
            break
    return replace(assembled(vectors, kept, dropped, searched), blocks=done)


def within_budget(
    samples: Samples,
    blocks: list[list[int]],
    degree: int,
    spent: list[float],
    budget: float,
    enough: Callable[[list], bool] | None = None,
) -> tuple[Search, int]:
    """``block_laws`` on the blocks, cheapest first, while their work (:func:`~conslaw_lite.law_blocks.pair_seconds` of
    their unknowns) fits in what ``spent`` leaves of ``budget``, that of the blocks solved added to ``spent``; how many
    did not fit."""
    work = sorted((pair_seconds(samples.unknowns(coords, degree)), n) for n, coords in enumerate(blocks))
    fit = sum(1 for _ in takewhile(lambda total: spent[0] + total <= budget, accumulate(cost for cost, _ in work)))
    search = block_laws(samples, [blocks[n] for _, n in work[:fit]], degree, "", enough)
    spent[0] += sum(cost for cost, _ in work[: search.blocks])
    return search, len(blocks) - fit


def assembled(vectors: list[dict], kept: float, dropped: float, searched: str) -> Search:
    """The null vectors as one dense matrix over the monomials they use, with the verdict on the gap."""
    columns: dict[Monomial, int] = {}
    for v in vectors:
        for mono in v:
            columns.setdefault(mono, len(columns))
    dense = np.zeros((len(vectors), len(columns)))
    for row, v in zip(dense, vectors):
        for mono, c in v.items():
            row[columns[mono]] = c
    reason = ""
    if not kept >= GAP * dropped:  # NaN bounds too
        reason = (
            f"no clear gap in the null space of a block: smallest kept singular value {kept:.2e}, largest dropped "
            f"{dropped:.2e}"
        )
    return Search(dense, list(columns), not reason, reason, searched, kept, dropped)


class Span:
    """How many of the null vectors found so far are independent, grown with each new vector (Gram–Schmidt twice)
    instead of an echelon form of all of them after every block: a pair of slices re-finds its two units' laws, so a
    search of a thousand pairs holds thousands of vectors. An upper bound on the laws they hold (ℓ² counts here), so
    the echelon form is computed only once it reaches the count. ``enough`` passes the vectors found so far, a list
    that only grows at its end; a shorter one starts the span again."""

    def __init__(self) -> None:
        self.columns: dict[Monomial, int] = {}
        self._store = np.zeros((16, 256))  # the basis in its first rows and columns, grown by doubling (no copy a row)
        self.size = 0  # rows of the basis
        self.seen = 0
        self.counted = (-1, 0)  # (rank, laws) at the last law count
        self.kept: list[int] = []  # the vectors that added a direction

    @property
    def basis(self) -> np.ndarray:
        """The orthonormal basis found so far, over ``columns``."""
        return self._store[: self.size, : len(self.columns)]

    def _fit(self, rows: int, columns: int) -> None:
        if rows > self._store.shape[0] or columns > self._store.shape[1]:
            grown = np.zeros((max(rows, 2 * self._store.shape[0]), max(columns, 2 * self._store.shape[1])))
            grown[: self._store.shape[0], : self._store.shape[1]] = self._store
            self._store = grown

    def reaches(self, vectors: list[dict], degree: int, target: int) -> bool:
        """Whether the vectors hold ``target`` laws (:func:`.law_basis.law_count`), read off their span's basis (the
        vectors repeat each law: an LM's thousands took minutes), counted again only once the span has grown enough
        to reach ``target``: one more direction adds at most one law."""
        rank = self.rank(vectors)
        last_rank, last_laws = self.counted
        if rank < target or (last_rank >= 0 and last_laws + rank - last_rank < target):
            return False
        if last_rank != rank:
            basis = self.basis
            self.counted = (rank, law_count(basis, list(self.columns), degree, orthonormal=True) if len(basis) else 0)
        return self.counted[1] >= target

    def independent(self, vectors: list[dict]) -> list[dict]:
        """The vectors that each add a direction to those before them: their span is all the vectors' (an echelon form
        of the thousands of repeats a search of many pairs holds took minutes).

        Examples
        ========
        >>> Span().independent([{(0,): 1.0}, {(0,): 2.0}, {(1,): 1.0}])
        [{(0,): 1.0}, {(1,): 1.0}]
        """
        self.rank(vectors)
        return [vectors[n] for n in self.kept]

    def rank(self, vectors: list[dict]) -> int:
        if len(vectors) < self.seen:
            self.__init__()
        for n, v in enumerate(vectors[self.seen :], self.seen):
            for mono in v:
                self.columns.setdefault(mono, len(self.columns))
            index, values = [self.columns[mono] for mono in v], np.array(list(v.values()))
            self._fit(self.size + 1, len(self.columns))
            basis = self.basis
            on = basis[:, index] @ values  # the vector is sparse: most are re-found laws, and this says so
            size = np.linalg.norm(values)
            if values @ values - on @ on < (INDEPENDENT_TOL * size) ** 2 / 4:  # round-off: ~10⁻¹⁵ of size²
                continue
            x = np.zeros(len(self.columns))
            x[index] = values
            for _ in range(2):
                x = x - basis.T @ (basis @ x)
            if np.linalg.norm(x) > INDEPENDENT_TOL * size:
                self._store[self.size, : len(x)] = x / np.linalg.norm(x)
                self.size += 1
                self.kept.append(n)
        self.seen = len(vectors)
        return self.size


def residuals(samples: Samples, laws: list[dict]) -> list[float]:
    """``max |⟨g, ∇h(θ)⟩| / (‖g‖ ‖∇h(θ)‖)`` over the samples for each law h, on the coordinates of all of them: 0 for
    a law, about 1/√n for a random polynomial of n coordinates (the laws moved to a unit or a pair: one gather of the
    samples for all of them, where one per law took minutes on an LM's thousands of pairs).

    Examples
    ========
    >>> theta = torch.tensor([[1.0, 2.0]], dtype=torch.float64)
    >>> g = torch.tensor([[[2.0, -1.0]]], dtype=torch.float64)  # g ⊥ ∇(θ₀² + θ₁²) = (2, 4), not ⊥ ∇θ₀ = (1, 0)
    >>> [round(r, 6) for r in residuals(Samples(theta, g), [{(0, 0): 1.0, (1, 1): 1.0}, {(0,): 1.0}])]
    [0.0, 0.894427]
    """
    if not laws:
        return []
    dots, g_norms, h_norms = _dots(samples, laws)
    return (dots.abs() / (g_norms[None] * h_norms).clamp_min(1e-300)).amax(dim=(1, 2)).tolist()


def _dots(samples: Samples, laws: list[dict]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``⟨g, ∇h(θ)⟩`` for each law h, θ and sample g (L, P, m), the norms ‖g‖ (P, m) and ‖∇h(θ)‖ (L, P, 1)."""
    support = sorted({j for law in laws for mono in law for j in mono})
    where = {j: n for n, j in enumerate(support)}
    theta, g = samples.theta[:, support], samples.g[:, :, support]  # (P, n), (P, m, n)
    rows, partners, coefficients = [], [], []  # ∂h_l/∂θ_a gains c·θ_b (b = −1: the constant c)
    for l, law in enumerate(laws):
        for mono, c in law.items():
            a = [where[j] for j in mono]
            pairs = [(a[0], a[1]), (a[1], a[0])] if len(a) == 2 else [(a[0], -1)]
            for j, k in pairs:
                rows.append(l * len(support) + j)
                partners.append(k)
                coefficients.append(c)
    ones = torch.ones(len(theta), 1, dtype=theta.dtype)
    values = torch.cat([theta, ones], 1)[:, partners] * torch.tensor(coefficients, dtype=theta.dtype)  # (P, terms)
    grad = torch.zeros(len(laws) * len(support), len(theta), dtype=theta.dtype)
    grad.index_add_(0, torch.tensor(rows), values.T)
    grad = grad.reshape(len(laws), len(support), len(theta)).permute(0, 2, 1)  # (L, P, n)
    return torch.einsum("pmn,lpn->lpm", g, grad), g.norm(dim=2), grad.norm(dim=2, keepdim=True)


def as_dicts(search: Search) -> list[dict]:
    """The search's null vectors back as ``{monomial: coefficient}``."""
    return [{search.columns[c]: float(row[c]) for c in np.flatnonzero(row)} for row in search.vectors]
