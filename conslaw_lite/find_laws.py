"""Find the conservation laws themselves, not only how many: ``find_laws(model, input_shape)``.

A law of degree ≤ 2 is ``h(θ) = Σ_{j≤k} c_jk θ_j θ_k + Σ_j b_j θ_j`` (that is θᵀMθ + bᵀθ).
It is conserved exactly when ``⟨∇h(θ), ∇_θ f_i(x; θ)⟩ = 0`` for every θ, input x and output i,
and ``∇h(θ) = 2Mθ + b`` makes that condition *linear* in the unknown coefficients (c, b):

    Σ_{j≤k} c_jk (g_j θ_k + g_k θ_j) + Σ_j b_j g_j = 0    for every θ and every g ∈ W(θ),

with ``W(θ) = span{∇_θ f_i(x; θ)}``. :func:`find_laws` writes one such row for each of many
random θ (the model's scale, as :func:`~conslaw_lite.counting.count_laws` draws them) and random
elements g of W(θ) (random combinations of the Jacobian's rows at random inputs), in float64.
One θ gives at most rank W(θ) independent rows (a deep linear net: at most d·m, whatever its D),
and fewer on one block's coordinates, so the first θ measures that rank on each block and enough
θ are drawn for twice as many *independent* rows as unknowns: with fewer, the missing rank is
an exactly-zero singular value, a spurious "law" that no gap can flag. The laws are the null
space of that matrix.
Rows and columns are scaled to unit length first (:mod:`conslaw_lite.null_space`); a singular value below
``CUT`` times the largest is dropped, and the search is *conclusive* only if the smallest kept one exceeds
the largest dropped one by ``GAP`` = 10⁴ (the counter's evidence, for the same reason).

Structure keeps it small. D parameters give D(D+1)/2 + D unknowns, too many to treat
densely beyond D ≈ 100, but every law the book knows couples at most two *layers* (the
tensors of one module: ``Q.weight`` with ``Q.bias``), and within them a few slices along an axis
they share: ‖A_{:,i}‖² − ‖C_{i,:}‖² (hidden unit i), Q_iᵀQ_i − K_iᵀK_i (head i), Σ_e W_e. So the
search runs over each layer and pair of layers of at most ``MAX_BLOCK`` = 64 coordinates whole,
over the *unit slices* of larger pairs (unit i's row before and column after it, up to
``MAX_SLICE`` = 96 coordinates), over the linear laws of each larger layer whole (Σ_i b[i] of a ``Linear``
that a LayerNorm centres: one unknown per coordinate), then over pairs of slices (per-head matrix laws), the
last three only until the laws found reach the count (:mod:`conslaw_lite.law_blocks`); and over the whole of θ
only when all that finds fewer laws than :func:`~conslaw_lite.counting.count_laws` counts and D is small.

Limits: D ≤ ``MAX_PARAMS`` = 8,192 parameters (an 8-16-4 MLP with biases, D = 212: 16 laws; a
32-64-16 ReLU MLP, D = 3,072: 64 laws, most of the time in the count); a slice of more than 96
coordinates is left out (the result says how many were); laws coupling three layers or more, or
more than two slices, are found only when D ≤ ``MAX_FULL`` = 64. A law that is no polynomial of
degree ≤ 2 is never found: the comparison with the count says how many such laws there are.
Chapter 2's example: ``f(x) = (a·b + c)·x`` keeps a² − b² and (a + b)·e^(−c); only the first is found.

The laws found are brought to reduced row-echelon form (each law has a pivot coefficient 1
that no other law has: the fewest non-zeros an echelon basis can have when the laws' supports
are disjoint, as they are per unit and per head), rounded to small rationals where the
rounded law still passes :func:`~conslaw_lite.counting.check_laws`, checked one by one (a law that
fails is left out, and the result is then inconclusive), and printed by
:mod:`conslaw_lite.polynomial_laws` with tensor names and indices, grouped into patterns.
When linear laws ℓ exist (e.g. Σ_e W_e for a softmax gate), their products ℓ_i ℓ_j are
quadratic laws too, but add nothing: they are left out of the basis.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from itertools import combinations_with_replacement

import numpy as np
import torch
from torch.func import vjp, vmap

from conslaw_lite.counting import GAP, RESIDUAL_TOL, LawCheck, LawCount, Model, check_laws, count_laws
from conslaw_lite.counting.count import outputs_over_pieces
from conslaw_lite.counting.problem import Problem, checked_outputs, problem_of, sample_inputs
from conslaw_lite.exact_linalg import rational
from conslaw_lite.law_basis import COEFFICIENT_TOL, law_count, reduced_basis
from conslaw_lite.law_blocks import MAX_SLICE, Plan, blocks_plan, slice_pairs, swapped, unknowns
from conslaw_lite.laws import Params
from conslaw_lite.null_space import null_space
from conslaw_lite.polynomial_laws import Layout, Monomial, PolynomialLaw, group_laws
from conslaw_lite.seeding import Stream, generator

MAX_PARAMS = 8192  # D beyond which find_laws refuses (count_laws's basis is 0.5 GB there, its count minutes)
MAX_FULL = 64  # D up to which the whole of θ is searched when the pairs fall short
ROUND_DENOMINATOR = 12  # coefficients become fractions p/q with q ≤ 12 when the law still passes
MOVED_TOL = 1e-9  # relative residual under which a law moved to another unit (law_blocks.swapped) is kept
INDEPENDENT_TOL = 1e-7  # a null vector whose part outside the span of those before is below this adds to none
RANK_CUT = 1e-6  # singular values of W(θ)'s samples below RANK_CUT·σ_max add no row (more θ are drawn, never fewer)


@dataclass(frozen=True)
class FoundLaws:
    """The laws :func:`find_laws` found, readable, and how they compare with the count.

    ``laws`` maps each printed pattern (``"for i in 0..5: ‖A[:, i]‖² − ‖B[i, :]‖²"``) to a
    function of the parameter dict, as :func:`conslaw_lite.laws.law_functions` does (a pattern
    over many indices returns the vector of its laws): :func:`~conslaw_lite.counting.check_laws`
    and :class:`~conslaw_lite.monitor.Monitor` take it. ``basis`` holds every scalar law
    with its coefficients; ``num_found`` how many are functionally independent (the rank of
    their gradients: ``W₁W₁ᵀ − W₂ᵀW₂`` of a linear net 2 → 5 → 2 is 15 polynomials, 14 independent);
    ``count`` the :class:`~conslaw_lite.counting.LawCount`; ``check`` the laws' ``check_laws``.

    ``conclusive`` is the certificate: the null space had a clear gap, every law returned
    passes ``check_laws`` (residual ≤ ``RESIDUAL_TOL``; a law that fails is left out of
    ``laws`` and ``basis``, and makes the result inconclusive) and, when the count is
    conclusive, ``num_found ≤ N``. Otherwise ``reason`` names what failed. ``complete``:
    conclusive and ``num_found == N``.
    """

    laws: dict[str, Callable[[Params], torch.Tensor]]
    basis: tuple[PolynomialLaw, ...]
    num_found: int
    count: LawCount
    check: LawCheck
    complete: bool
    conclusive: bool
    reason: str
    searched: str  # "pairs of layers" or "all of θ"
    sigma_kept: float  # smallest kept singular value over the searched systems
    sigma_dropped: float  # largest dropped one
    degree: int
    seconds: float

    @property
    def gap(self) -> float:
        """``sigma_kept / sigma_dropped`` (infinite when nothing was dropped)."""
        return math.inf if self.sigma_dropped == 0 else self.sigma_kept / self.sigma_dropped

    @property
    def message(self) -> str:
        """One line: how many laws were found against the count ``N``, and what that means."""
        kind = "quadratic" if self.degree == 2 else "linear"
        found = f"{len(self.basis)} {kind} law{'' if len(self.basis) == 1 else 's'} found"
        if len(self.basis) > self.num_found:  # e.g. W₁W₁ᵀ − W₂ᵀW₂ when W₁ has more rows than columns
            found += f" ({self.num_found} independent)"
        if not self.conclusive:
            return f"inconclusive: {self.reason}"
        if not self.count.conclusive:
            return f"{found}; the count is inconclusive ({self.count.reason})"
        n, missing = self.count.num_laws, self.count.num_laws - self.num_found
        if self.complete:
            return f"{found}; N = {n}: the list is complete"
        head = f"found {self.num_found} of N = {n}: "
        if self.searched != "all of θ":  # blocks of θ only: a law across more of it is not excluded
            where = (
                "layers and pairs of layers of ≤ 64 coordinates, hidden units and pairs of them; a law across other "
                "slices, such as attention heads packed in one matrix, is not excluded"
            )
            return head + f"the other {missing} {'is' if missing == 1 else 'are'} not in the blocks searched ({where})"
        what = f"is not a {kind} polynomial" if missing == 1 else f"are not {kind} polynomials"
        return head + f"{missing} law{'' if missing == 1 else 's'} {what}"

    def __str__(self) -> str:
        return "\n".join([self.message, *(f"  {name}" for name in self.laws)])

    def to_dict(self) -> dict:
        """JSON-ready: the message, the evidence, the laws as strings and each scalar law's coefficients.

        ``coefficients`` lists, per scalar law, its text and its terms ``[c, [tensor, index], [tensor, index]]``
        (c·θ_tensor[index]·θ_tensor[index]; a linear term has one factor).
        """
        return {
            "message": self.message,
            "num_found": self.num_found,
            "complete": self.complete,
            "conclusive": self.conclusive,
            "reason": self.reason,
            "searched": self.searched,
            "sigma_kept": self.sigma_kept,
            "sigma_dropped": self.sigma_dropped,
            "laws": list(self.laws),
            "coefficients": [{"law": law.text(), "terms": law.coefficient_list()} for law in self.basis],
        }


def find_laws(
    model: Model,
    input_shape: tuple[int, ...] | None = None,
    *,
    degree: int = 2,
    inputs: torch.Tensor | None = None,
    params: Params | None = None,
    seed: int = 0,
    count: LawCount | None = None,
) -> FoundLaws:
    """Every conservation law ``h(θ) = θᵀMθ + bᵀθ`` of ``model``, readable, checked against the count.

    ``model``, ``input_shape``, ``inputs``, ``params`` and ``seed`` are those of
    :func:`~conslaw_lite.counting.count_laws` (and bad input gets its messages); ``count`` is that
    function's result if already computed. ``degree=1`` looks for linear laws ``bᵀθ`` only.
    See the module docstring for the method and its limits: D ≤ ``MAX_PARAMS`` = 8,192; layers and
    pairs of layers of more than 64 coordinates are searched per unit slice (≤ 96 coordinates) and
    pair of slices; laws coupling more than two layers are found only when D ≤ ``MAX_FULL`` = 64.

    Examples
    ========
    >>> from conslaw_lite.families.toy.block import ToyProduct
    >>> print(find_laws(ToyProduct(a=1.0, b=2.0), (1,)))  # f = a·b·x
    1 quadratic law found; N = 1: the list is complete
      a² − b²
    >>> import torch
    >>> linear = lambda p, x: x @ p["B"].T @ p["A"].T  # f = ABx, r = 2: AᵀA − BBᵀ
    >>> found = find_laws(linear, (3,), params={"B": torch.ones(2, 3), "A": torch.ones(3, 2)})
    >>> found.num_found, found.complete, list(found.laws)
    (3, True, ['B Bᵀ − Aᵀ A (2×2)'])
    """
    start = time.perf_counter()
    if degree not in (1, 2):
        raise ValueError(f"degree must be 1 (linear laws) or 2 (quadratic laws), got {degree!r}")
    problem = problem_of(model, params)
    D = problem.num_params
    if D > MAX_PARAMS:
        raise ValueError(
            f"find_laws handles models of at most {MAX_PARAMS} parameters; this one has D = {D:,}. A narrower model "
            "of the same architecture has the same law patterns (per unit, per head); "
            "count_laws(model, input_shape) still counts this one's laws"
        )
    plan = blocks_plan(_layout(problem), degree)  # before the count: a refusal comes at once
    if count is None:
        count = count_laws(model, input_shape, inputs=inputs, params=params, seed=seed)
    search = _search_blocks(problem, input_shape, inputs, seed, degree, plan, count)
    basis = reduced_basis(search.vectors, search.columns, degree)
    if search.conclusive and _short(basis, count) and D <= MAX_FULL:
        samples = _Samples.draw(problem, input_shape, inputs, seed + 1, [list(range(D))], degree)
        search = _search(samples, [list(range(D))], degree, "all of θ")
        basis = reduced_basis(search.vectors, search.columns, degree)
    laws = _rounded(model, problem, basis, input_shape, inputs, params, seed, count)
    each = check_laws(
        model, {str(n): law for n, law in enumerate(laws)}, input_shape, inputs=inputs, params=params, seed=seed,
        count=count,
    )  # fmt: skip
    passing = [law for n, law in enumerate(laws) if each.residuals[str(n)] <= RESIDUAL_TOL]
    grouped = group_laws(passing)
    check = check_laws(model, grouped, input_shape, inputs=inputs, params=params, seed=seed, count=count)
    reason = _verdict(search, len(laws) - len(passing), len(laws), each.max_residual, check, count)
    return FoundLaws(
        laws=grouped,
        basis=tuple(passing),
        num_found=check.independent,
        count=count,
        check=check,
        complete=not reason and check.complete,
        conclusive=not reason,
        reason=reason,
        searched=search.searched,
        sigma_kept=search.sigma_kept,
        sigma_dropped=search.sigma_dropped,
        degree=degree,
        seconds=time.perf_counter() - start,
    )


def _verdict(search: _Search, failed: int, total: int, residual: float, check: LawCheck, count: LawCount) -> str:
    """Why the laws found are no certificate, ``""`` when they are one.

    Conclusive means: the null space had a clear gap, every law returned passes
    check_laws (those that fail are left out, and the search is then not trusted either),
    and they are no more independent laws than the count's N.
    """
    reasons = [search.reason] if search.reason else []
    if failed:
        reasons.append(
            f"{failed} of the {total} laws found fail check_laws (max residual {residual:.1e} > {RESIDUAL_TOL:.0e}) "
            "and are left out"
        )
    if count.conclusive and check.independent > count.num_laws:
        reasons.append(f"{check.independent} independent laws found, more than the count N = {count.num_laws}")
    return "; ".join(reasons)


def _short(basis: list[dict], count: LawCount) -> bool:
    """The pairs found fewer laws than counted (or the count is inconclusive): worth searching all of θ."""
    return not count.conclusive or len(basis) < count.num_laws


@dataclass(frozen=True)
class _Samples:
    """Random θ (P, D) and, per θ, m random elements of W(θ): g (P, m, D)."""

    theta: torch.Tensor
    g: torch.Tensor
    points: dict[tuple[int, ...], int] = field(default_factory=dict)  # θ each block needs (the first P, default all)

    @classmethod
    def draw(
        cls, problem: Problem, input_shape, inputs, seed: int, blocks: list[list[int]], degree: int, tier: int = 0
    ) -> _Samples:
        """Enough θ that each block's system gets twice as many *independent* rows as unknowns.

        One θ gives at most rank W(θ) independent rows on a block (fewer on its coordinates
        alone), however many elements of W(θ) are drawn: a deep linear net has rank W(θ) ≤ d·m
        whatever its D. Counting m = (largest block) rows per θ left the pair systems short
        of rows, and the missing rank came out as spurious "laws" that a gap could not flag
        (their singular values are exactly 0). So the first θ measures each block's rank r_b,
        P = max_b ⌈2 U_b / r_b⌉ + 4 θ are drawn, each with m = rank W(θ) elements (at most the largest
        block's size: more add no rank on any block); block b's rows come from the first ⌈2 U_b / r_b⌉ + 4
        (``points``). ``tier``: each kind of block gets its own θ.
        """
        gen = generator(seed, Stream.LAW_SEARCH, tier)  # not the counter's θ and inputs
        n_max = max(map(len, blocks))
        first_theta, first_g = cls._point(problem, input_shape, inputs, gen, n_max)
        ranks = [_rank(first_g[:, coords]) for coords in blocks]
        m = max(_rank(first_g), 1)
        needs = {tuple(c): math.ceil(2 * unknowns(len(c), degree) / r) + 4 for c, r in zip(blocks, ranks) if r}
        points = max(needs.values(), default=5)
        thetas, gs = [first_theta], [first_g[:m]]
        for _ in range(points - 1):
            theta, g = cls._point(problem, input_shape, inputs, gen, m)
            thetas.append(theta)
            gs.append(g)
        return cls(torch.stack(thetas), torch.stack(gs), needs)

    @staticmethod
    def _point(problem: Problem, input_shape, inputs, gen: torch.Generator, m: int):
        """A random θ and m random unit elements of W(θ) there."""
        D = problem.num_params
        theta = problem.random_theta(gen)
        probe = sample_inputs(input_shape, inputs, 1, gen, spread=False)
        per_input = max(checked_outputs(problem, theta, probe).numel() // max(len(probe), 1), 1)
        # standard-normal inputs: the null space is solved without the counter's per-input weights; the pieces
        # of a cap that other scales reach come from random θ' of many decades, as in the count
        x = sample_inputs(input_shape, inputs, min(512, math.ceil(2 * D / per_input) + 2), gen, spread=False)
        out, pullback = vjp(outputs_over_pieces(problem, theta, x, gen), theta)
        g = _pull(pullback, torch.randn(m, out.numel(), generator=gen, dtype=torch.float64))
        return theta, g / g.norm(dim=1, keepdim=True).clamp_min(1e-300)  # unit rows over all of θ


def _rank(g: torch.Tensor) -> int:
    """Numerical rank of g's rows; an overestimate would draw too few θ, so the cut is generous (RANK_CUT)."""
    s = torch.linalg.svdvals(g)
    return int((s > RANK_CUT * s[0]).sum()) if len(s) and float(s[0]) > 0 else 0


def _pull(pullback: Callable, cotangents: torch.Tensor) -> torch.Tensor:
    """``aᵀ ∂f/∂θ`` for each row a: random elements of W(θ), vectorized unless the model's control flow forbids it."""
    try:
        return vmap(pullback)(cotangents)[0]
    except RuntimeError:  # data-dependent control flow (top-k routing, .item()): one at a time
        return torch.stack([pullback(a)[0] for a in cotangents])


@dataclass(frozen=True)
class _Search:
    """Null vectors (k, U) over ``columns`` (monomials, global coordinates) and the evidence."""

    vectors: np.ndarray
    columns: list[Monomial]
    conclusive: bool
    reason: str
    searched: str
    sigma_kept: float
    sigma_dropped: float
    blocks: int = 0  # blocks searched (the search stops once the laws found reach the count)


def _columns(coords: list[int], degree: int) -> list[Monomial]:
    """The monomials over ``coords``: θ_jθ_k (j ≤ k), then θ_j."""
    quad = [(j, k) for j, k in combinations_with_replacement(coords, 2)] if degree == 2 else []
    return quad + [(j,) for j in coords]


def _rows(samples: _Samples, coords: list[int], degree: int) -> torch.Tensor:
    """The condition's rows for laws in ``coords``: (g_jθ_k + g_kθ_j for j ≤ k, g_j), one per sample g."""
    idx, P = torch.tensor(coords), samples.points.get(tuple(coords), len(samples.theta))
    theta = samples.theta[:P, idx]  # (P, n): the θ this block needs (a small pair needs fewer than the largest)
    g = samples.g[:P, :, idx]  # (P, m, n)
    parts = []
    if degree == 2:
        j, k = torch.triu_indices(len(coords), len(coords))
        parts.append(g[:, :, j] * theta[:, None, k] + g[:, :, k] * theta[:, None, j])
    parts.append(g)
    return torch.cat(parts, dim=2).reshape(-1, unknowns(len(coords), degree))


def _search(
    samples: _Samples, blocks: list[list[int]], degree: int, searched: str, enough: Callable[[list], bool] | None = None
) -> _Search:
    """The null space of the condition on each block of coordinates, all in one list of global monomials.

    ``enough(vectors)``: checked after each block once there are as many vectors as needed; the
    remaining blocks are then left out (the laws found already reach the count).
    """
    vectors, kept, dropped, done = [], math.inf, 0.0, 0
    for coords in blocks:
        done += 1
        null, sigma_kept, sigma_dropped = null_space(_rows(samples, coords, degree))
        kept, dropped = min(kept, sigma_kept), max(dropped, sigma_dropped)
        names = _columns(coords, degree)
        for v in null.numpy():
            vectors.append({names[i]: c for i, c in enumerate(v) if abs(c) > COEFFICIENT_TOL * np.abs(v).max()})
        if enough is not None and len(null) and enough(vectors):
            break
    return replace(_assembled(vectors, kept, dropped, searched), blocks=done)


def _assembled(vectors: list[dict], kept: float, dropped: float, searched: str) -> _Search:
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
            f"no clear gap in the null space: smallest kept singular value {kept:.2e}, largest dropped {dropped:.2e}"
        )
    return _Search(dense, list(columns), not reason, reason, searched, kept, dropped)


class _Span:
    """How many of the null vectors found so far are independent, grown with each new vector (Gram–Schmidt twice)
    instead of an echelon form of all of them after every block: a pair of slices re-finds its two units' laws, so a
    search of a thousand pairs holds thousands of vectors. An upper bound on the laws they hold (ℓ² counts here), so
    the echelon form is computed only once it reaches the count. ``enough`` passes the vectors found so far, a list
    that only grows at its end; a shorter one starts the span again."""

    def __init__(self) -> None:
        self.columns: dict[Monomial, int] = {}
        self.basis = np.zeros((0, 0))
        self.seen = 0
        self.counted = (-1, 0)  # (rank, laws) at the last law count

    def reaches(self, vectors: list[dict], degree: int, target: int) -> bool:
        """Whether the vectors hold ``target`` laws (:func:`.law_basis.law_count`), read off their span's basis (the
        vectors repeat each law: an LM's thousands took minutes), counted again only once the span has grown enough
        to reach ``target``: one more direction adds at most one law."""
        rank = self.rank(vectors)
        last_rank, last_laws = self.counted
        if rank < target or (last_rank >= 0 and last_laws + rank - last_rank < target):
            return False
        if last_rank != rank:
            basis = np.pad(self.basis, ((0, 0), (0, len(self.columns) - self.basis.shape[1])))
            self.counted = (rank, law_count(basis, list(self.columns), degree) if len(basis) else 0)
        return self.counted[1] >= target

    def rank(self, vectors: list[dict]) -> int:
        if len(vectors) < self.seen:
            self.__init__()
        for v in vectors[self.seen :]:
            for mono in v:
                self.columns.setdefault(mono, len(self.columns))
            index, values = [self.columns[mono] for mono in v], np.array(list(v.values()))
            if len(self.columns) > self.basis.shape[1]:  # new monomials: copy the basis only then
                self.basis = np.pad(self.basis, ((0, 0), (0, len(self.columns) - self.basis.shape[1])))
            on = self.basis[:, index] @ values  # the vector is sparse: most are re-found laws, and this says so
            size = np.linalg.norm(values)
            if values @ values - on @ on < (INDEPENDENT_TOL * size) ** 2 / 4:  # round-off: ~10⁻¹⁵ of size²
                continue
            x = np.zeros(len(self.columns))
            x[index] = values
            for _ in range(2):
                x = x - self.basis.T @ (self.basis @ x)
            if np.linalg.norm(x) > INDEPENDENT_TOL * size:
                self.basis = np.vstack([self.basis, x / np.linalg.norm(x)])
        self.seen = len(vectors)
        return len(self.basis)


def _search_blocks(problem: Problem, input_shape, inputs, seed: int, degree: int, plan: Plan, count) -> _Search:
    """Layers and pairs of layers whole, then unit slices of the larger pairs, the larger layers' linear laws, then
    pairs of slices (:mod:`conslaw_lite.law_blocks`); the last three only until the laws found reach the count."""
    whole, large, slices, over = plan.whole, plan.large, plan.slices, plan.over
    target = count.num_laws if count.conclusive else None
    span = _Span()
    enough = None if target is None else (lambda v: span.reaches(v, degree, target))
    vectors, kept, dropped, notes = [], math.inf, 0.0, []
    if whole:
        found = _search(_Samples.draw(problem, input_shape, inputs, seed, whole, degree), whole, degree, "")
        vectors += _dicts(found)
        kept, dropped = found.sigma_kept, found.sigma_dropped
    if slices and not (enough is not None and enough(vectors)):
        samples = _Samples.draw(problem, input_shape, inputs, seed, [c for _, c in slices], degree, 1)
        layout = _layout(problem)
        units = _unit_laws(samples, layout, slices, degree, enough, vectors)
        vectors += units.vectors
        kept, dropped = min(kept, units.sigma_kept), max(dropped, units.sigma_dropped)
        unsearched = len(slices) - units.solved - units.moved
        notes.append(
            f"{len(slices)} unit slices: {units.solved} solved, {units.moved} by symmetry"
            + (f", {unsearched} not needed" if unsearched else "")
        )
    if plan.linear and not (enough is not None and enough(vectors)):
        samples = _Samples.draw(problem, input_shape, inputs, seed, plan.linear, 1, 3)
        found = _search(samples, plan.linear, 1, "")
        vectors += _dicts(found)
        kept, dropped = min(kept, found.sigma_kept), max(dropped, found.sigma_dropped)
        notes.append(f"linear laws of {len(plan.linear)} larger layers")
    if slices and target is not None and not enough(vectors):
        unions, left = slice_pairs(slices, degree, frozenset(units.lawful))
        if unions:
            samples = _Samples.draw(problem, input_shape, inputs, seed, unions, degree, 2)
            found = _search(samples, unions, degree, "", lambda v: enough(vectors + v))
            vectors += _dicts(found)
            kept, dropped = min(kept, found.sigma_kept), max(dropped, found.sigma_dropped)
        searched = found.blocks if unions else 0
        notes.append(
            f"{searched} pairs of slices solved"
            + (f", {len(unions) - searched} not needed" if len(unions) > searched else "")
            + (f", {left} left out (over {MAX_SLICE} coordinates or the budget)" if left else "")
        )
    if over or (large and not slices):
        notes.append(f"{over} slices over {MAX_SLICE} coordinates left out")
    detail = f" ({'; '.join(notes)})" if notes else ""
    return _assembled(vectors, kept, dropped, "pairs of layers" + detail)


@dataclass
class _Units:  # what the unit slices gave: the laws, the evidence, the slices solved and those whose laws were moved
    vectors: list[dict]
    sigma_kept: float
    sigma_dropped: float
    solved: int
    moved: int
    lawful: set[tuple] = field(default_factory=set)  # the axes whose first slice has laws

    def add(self, found: _Search) -> list[dict]:
        """Take a search's laws and evidence in; its laws."""
        laws = _dicts(found)
        self.vectors += laws
        self.sigma_kept = min(self.sigma_kept, found.sigma_kept)
        self.sigma_dropped = max(self.sigma_dropped, found.sigma_dropped)
        self.solved += found.blocks
        return laws


def _unit_laws(
    samples: _Samples, layout: Layout, slices: list, degree: int, enough: Callable | None, before: list[dict]
) -> _Units:
    """Axis by axis: its first slice solved, its laws moved to its other slices (``swapped``) and kept where conserved
    on every sample (``MOVED_TOL``), the slices where one failed (or of a flattened axis) solved on their own; no
    further axis once the laws found (with ``before``) reach the count. The other slices of an axis whose first has
    no law are solved last, after every axis's first: another axis may reach the count first (a transformer layer's
    model axis, 16 slices without a law, before its hidden units)."""
    axes: dict[tuple, list] = {}
    for key, coords in slices:
        axes.setdefault(key[:3], []).append((key[3], coords))
    units = _Units([], math.inf, 0.0, 0, 0)
    reached = None if enough is None else (lambda more: enough(before + units.vectors + more))
    later: list[list[int]] = []
    for axis, ((u0, head), *others) in axes.items():
        if reached is not None and reached([]):
            break
        n = axis[2]
        head_laws = units.add(_search(samples, [head], degree, ""))
        if head_laws:
            units.lawful.add(axis)
        rest = []
        for u, coords in others:
            candidates = [swapped(law, layout, n, u0, u) for law in head_laws] if n > 0 else []  # n < 0: flattened
            if candidates and max(_residual(samples, law) for law in candidates) <= MOVED_TOL:
                units.vectors += candidates
                units.moved += 1
            else:
                rest.append(coords)
        if head_laws:
            units.add(_search(samples, rest, degree, "", reached))
        else:
            later += rest
    if later and not (reached is not None and reached([])):
        units.add(_search(samples, later, degree, "", reached))
    return units


def _residual(samples: _Samples, law: dict) -> float:
    """``max |⟨g, ∇h(θ)⟩| / (‖g‖ ‖∇h(θ)‖)`` over the samples, on the law's coordinates: 0 for a law, about 1/√n
    for a random polynomial of n coordinates."""
    support = sorted({j for mono in law for j in mono})
    where = {j: n for n, j in enumerate(support)}
    theta, g = samples.theta[:, support], samples.g[:, :, support]  # (P, n), (P, m, n)
    grad = torch.zeros_like(theta)
    for mono, c in law.items():
        if len(mono) == 2:
            j, k = where[mono[0]], where[mono[1]]
            grad[:, j] += c * theta[:, k]
            grad[:, k] += c * theta[:, j]
        else:
            grad[:, where[mono[0]]] += c
    dots = torch.einsum("pmn,pn->pm", g, grad).abs()
    sizes = g.norm(dim=2) * grad.norm(dim=1, keepdim=True)
    return float((dots / sizes.clamp_min(1e-300)).max())


def _layout(problem: Problem) -> Layout:
    return Layout(tuple(problem.shapes), tuple(tuple(s) for s in problem.shapes.values()))


def _dicts(search: _Search) -> list[dict]:
    """The search's null vectors back as ``{monomial: coefficient}``."""
    return [{search.columns[c]: float(row[c]) for c in np.flatnonzero(row)} for row in search.vectors]


def _rounded(model, problem: Problem, basis: list[dict], input_shape, inputs, params, seed, count) -> list:
    """Each law with small-rational coefficients where the rounded law still passes check_laws, else as computed."""
    layout = _layout(problem)
    exact = [PolynomialLaw(law, layout) for law in basis]
    rounded = {}
    for n, law in enumerate(basis):
        size = max(abs(c) for c in law.values())
        fractions = {m: rational(c, ROUND_DENOMINATOR, 1e-6 * size) for m, c in law.items()}
        if all(f is not None for f in fractions.values()):
            rounded[str(n)] = PolynomialLaw({m: f for m, f in fractions.items() if f != 0}, layout)
    if not rounded:
        return exact
    check = check_laws(model, rounded, input_shape, inputs=inputs, params=params, seed=seed, count=count)
    return [
        rounded[str(n)] if check.residuals.get(str(n), math.inf) <= RESIDUAL_TOL else law for n, law in enumerate(exact)
    ]
