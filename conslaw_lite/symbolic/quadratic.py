"""Every quadratic polynomial law of a sympy model, by linear algebra on the unknown coefficients of h.

How :func:`quadratic_laws` solves for the coefficients
----------------------------------------------------
Write ``h(θ) = Σ_{i≤j} c_ij θ_i θ_j + Σ_i d_i θ_i``. The condition is linear in
(c, d): ``Σ_{i≤j} c_ij (θ_j ∂_i f + θ_i ∂_j f) + Σ_i d_i ∂_i f = 0``, one column per
unknown. Evaluating the columns at many random points (θ, x) gives a matrix Φ whose
null space contains every law; the laws are the null vectors that vanish identically.

* Candidates: Φ in float64 at random points, its null space by SVD (the gap between the
  smallest kept and largest dropped singular value is reported), brought to reduced
  row-echelon form and rounded to rationals with small denominators.
* **Exact** when every ∂_k f_i is a polynomial with rational coefficients: each
  candidate is verified symbolically (``expand(⟨∇h, ∇f_i⟩) == 0``), and completeness is
  certified by the rank of Φ at random points of the field F_p (p ≈ 2³¹): the true law
  space ⊆ null(Φ over Q) and dim null(Φ over Q) ≤ dim null(Φ mod p), so equal counts
  prove nothing was missed.
* **Numeric** otherwise (erf-GELU, SiLU, softmax, sigmoid, ReLU as ``Max``...): the laws as
  returned (rounded coefficients) are checked at fresh random points, each row asking that
  the terms ``|Φ|·|b|`` cancel to a relative 1e-9. A law whose coefficients are not
  rationals with denominator ≤ 1000 is kept with float coefficients.

Piecewise models, such as ReLU written ``Max(0, z)`` (derivative ``Heaviside(z)``: 0 or 1 at
random points, never at the kink): each point (θ, x) lies in one activation region, where the
model is a linear net in its active units; a law must hold on every region, and it does because all points enter
one joint system Φ, so the null space is the intersection over the regions met. A point
where unit i is off only says nothing about unit i's parameters, so regions must be met
often enough: if a region was under-sampled the null space holds a law of the sampled
regions only, the fresh points (which fall in the other regions) reject it, and the system
is solved again with twice the points, up to 8 times the first count. A region met by
neither sample nor check is missed: regions are assumed to fill a fair share of the box
[-1.5, 1.5] the points are drawn from. (A law's own terms all vanish where its unit is off,
so the check must use the rounded coefficients: the raw null vector's ~1e-16 entries would
turn that 0/0 into a spurious relative residual of order 1.)

Limits: D parameters give n = D(D+1)/2 + D unknowns and about 1.5 n equations; the SVD
costs O(n³) = O(D⁶). Measured (CPU seconds, one core): softmax attention d = k = T = 2,
one head (16 parameters, 6 laws) ≈ 5 s, two heads (32 parameters, 12 laws) ≈ 10 s, mostly
sympy differentiating; MoE with two SwiGLU experts (28 parameters, 6 laws) ≈ 4 s; a linear
net with 40 parameters (860 unknowns, exact path) ≈ 13 s. Beyond ~50 parameters use the
numerical counter of :mod:`conslaw_lite.counting`. Only laws that are quadratic
polynomials are found; a count of laws that are functions of others (products, or the 9
quadratic laws of ``(Σ u_i v_i)·x`` of which 5 are independent) needs a Jacobian rank.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import sympy as sp

from conslaw_lite.exact_linalg import LARGE_PRIME, rank_mod_p, rational
from conslaw_lite.symbolic.condition import check_model

_MAX_DENOMINATOR = 1000


_ROUNDS = 4  # numeric path: solve with P, 2P, 4P, 8P points before giving up


@dataclass(frozen=True)
class LawSearch:
    """What :func:`find_quadratic_laws` found and how sure it is.

    ``exact``: laws verified symbolically and completeness certified by a rank mod p
    (polynomial models); otherwise checked numerically at fresh points.
    ``sigma_kept`` / ``sigma_dropped``: smallest kept and largest dropped singular value
    of the (column-normalised) float64 system, relative to the largest; their ratio is
    the gap behind the rank decision.
    """

    laws: list[sp.Expr]
    exact: bool
    num_unknowns: int
    num_equations: int
    sigma_kept: float
    sigma_dropped: float
    seconds: float


def find_quadratic_laws(
    f: sp.Expr | Sequence[sp.Expr],
    params: Sequence[sp.Symbol],
    inputs: Sequence[sp.Symbol],
    *,
    seed: int = 0,
    include_products: bool = False,
) -> LawSearch:
    """:func:`quadratic_laws` with its diagnostics (exactness, singular-value gap, time).

    Examples
    ========
    >>> from sympy import symbols
    >>> a, b, x = symbols("a b x")
    >>> found = find_quadratic_laws(a * b * x, [a, b], [x])
    >>> found.laws, found.exact, found.num_unknowns
    ([a**2 - b**2], True, 5)
    """
    outputs, theta, x = check_model(f, params, inputs)
    fields = [[sp.diff(fi, t) for t in theta] for fi in outputs]
    return solve_quadratic(fields, theta, x, seed=seed, include_products=include_products)


def quadratic_laws(
    f: sp.Expr | Sequence[sp.Expr],
    params: Sequence[sp.Symbol],
    inputs: Sequence[sp.Symbol],
    *,
    seed: int = 0,
    include_products: bool = False,
) -> list[sp.Expr]:
    """A basis of all quadratic polynomial laws h(θ) (no constant term) of the model f(x; θ).

    Solves ``⟨∇h, ∇f_i(x; θ)⟩ = 0`` for every output i, every x and θ, for the unknown
    coefficients of ``h = Σ_{i≤j} c_ij θ_i θ_j + Σ_i d_i θ_i`` (the module docstring
    explains the method and when the answer is exact). ``f`` is one sympy expression
    or a list of them (a vector output). The basis is in reduced row-echelon form,
    signs chosen so the first coefficient is positive.

    Products of laws are laws: if there are linear laws ℓ_i, every ℓ_i ℓ_j is a quadratic
    law too. By default these products are left out of the basis (every quadratic law is
    then a combination of the basis and of products of its linear members). The list is a
    basis of a vector space, so its length is *not* the number of functionally independent
    laws: ``(Σ u_i v_i)·x`` with three pairs has 9 quadratic laws of which 5 are independent
    (count those with the rank of the laws' Jacobian, or with :mod:`conslaw_lite.counting`);
    ``include_products=True`` returns a basis of the whole vector space of quadratic laws instead.

    Raises ``TypeError`` for a non-sympy f or parameter, ``ValueError`` for a parameter
    that does not occur in f, a symbol listed both as parameter and input, or a free
    symbol of f that is neither.

    Examples
    ========
    >>> from sympy import symbols, exp
    >>> a, b, c, x = symbols("a b c x")
    >>> quadratic_laws(a * b * x, [a, b], [x])
    [a**2 - b**2]
    >>> quadratic_laws(a * b * c * x, [a, b, c], [x])
    [a**2 - b**2, a**2 - c**2]
    >>> quadratic_laws(a * exp(b * x), [a, b], [x])  # no rescaling symmetry: no law
    []
    >>> quadratic_laws((a + b) * x, [a, b], [x])
    [a - b]
    >>> quadratic_laws((a + b) * x, [a, b], [x], include_products=True)  # (a − b)² as well
    [a**2 - 2*a*b + b**2, a - b]
    """
    return find_quadratic_laws(f, params, inputs, seed=seed, include_products=include_products).laws


def _pairs(D: int) -> tuple[np.ndarray, np.ndarray]:
    """Index arrays (I, J) of the monomials θ_i θ_j, i ≤ j, in lexicographic order."""
    I, J = np.triu_indices(D)
    return I, J


def _columns(theta: np.ndarray, G: np.ndarray, modulus: int | None = None) -> np.ndarray:
    """Φ: one row per (field, point), one column per unknown coefficient of h.

    theta: (D, P) points; G: (F, D, P) the fields at those points. Column (i, j) is
    ``θ_j G_i + θ_i G_j`` (= 2θ_i G_i when i = j), column i of the linear part is ``G_i``.
    """
    I, J = _pairs(theta.shape[0])
    if modulus is None:
        quad = theta[J] * G[:, I] + theta[I] * G[:, J]  # (F, n_quad, P)
    else:
        quad = (theta[J] * G[:, I] % modulus + theta[I] * G[:, J] % modulus) % modulus
    cols = np.concatenate([quad, G], axis=1)  # (F, n, P)
    return cols.transpose(0, 2, 1).reshape(-1, cols.shape[1])  # (F·P, n)


def _float_fields(fields: list[list[sp.Expr]], symbols: list[sp.Symbol]):
    flat = [g for V in fields for g in V]
    fn = sp.lambdify(symbols, flat, modules=["scipy", "numpy"])

    def evaluate(points: np.ndarray) -> np.ndarray:  # points: (S, P) -> (F, D, P)
        values = [np.broadcast_to(np.asarray(v, dtype=float), points.shape[1:]) for v in fn(*points)]
        return np.stack(values).reshape(len(fields), -1, points.shape[1])

    return evaluate


def _integer_fields(fields: list[list[sp.Expr]], symbols: list[sp.Symbol]):
    """Fields with denominators cleared (per field: the kernel is unchanged), evaluated mod p."""
    scaled = []
    for V in fields:
        denominators = [sp.fraction(c)[1] for g in V if g != 0 for c in sp.Poly(g, *symbols).coeffs()]
        lcm = sp.ilcm(1, 1, *denominators)  # ilcm wants two arguments or more
        scaled.extend(sp.expand(lcm * g) for g in V)
    fn = sp.lambdify(symbols, scaled, modules="math")

    def evaluate(points: np.ndarray) -> np.ndarray:  # points: (S, P) Python ints -> (F, D, P) int64 residues
        cols = []
        for p in range(points.shape[1]):
            cols.append([int(v) % LARGE_PRIME for v in fn(*(int(s) for s in points[:, p]))])
        return np.array(cols, dtype=np.int64).T.reshape(len(fields), -1, points.shape[1])

    return evaluate


def _is_rational_polynomial(fields: list[list[sp.Expr]], symbols: list[sp.Symbol]) -> bool:
    try:
        return all(sp.Poly(g, *symbols).domain in (sp.ZZ, sp.QQ) for V in fields for g in V if g != 0)
    except sp.PolynomialError:
        return False


def _echelon(N: np.ndarray) -> np.ndarray:
    """Reduced row-echelon form of the rows of N, pivots taken from the last column backwards.

    Pivoting from the end makes each law's leading monomials come first (``a² − b²``,
    not ``b² − a²`` after the sign fix), which reads like the book.
    """
    R = N[:, ::-1].copy()
    row = 0
    for col in range(R.shape[1]):
        if row == R.shape[0]:
            break
        best = row + int(np.argmax(np.abs(R[row:, col])))
        if abs(R[best, col]) < 1e-8 * np.abs(R).max():
            continue
        R[[row, best]] = R[[best, row]]
        R[row] /= R[row, col]
        others = np.arange(R.shape[0]) != row
        R[others] -= np.outer(R[others, col], R[row])
        row += 1
    return R[:row, ::-1]


def _to_expr(vector: np.ndarray, theta: list[sp.Symbol]) -> sp.Expr:
    """``Σ c_ij θ_i θ_j + Σ d_i θ_i`` with coefficients rounded to rationals where they are ones."""
    I, J = _pairs(len(theta))
    monomials = [theta[i] * theta[j] for i, j in zip(I, J)] + list(theta)
    scale = vector[np.flatnonzero(np.abs(vector) > 1e-9)[0]]  # first nonzero coefficient → positive
    vector = vector / abs(scale) * np.sign(scale)
    terms = []
    for c, m in zip(vector, monomials):
        if abs(c) < 1e-9:
            continue
        q = rational(c, _MAX_DENOMINATOR, 1e-7)
        terms.append((sp.Float(c) if q is None else sp.Rational(q.numerator, q.denominator)) * m)
    return sp.Add(*terms)


def _null_space(Phi: np.ndarray) -> tuple[np.ndarray, float, float]:
    """Null vectors of Φ in reduced row-echelon form, and the kept / dropped singular values (relative)."""
    n = Phi.shape[1]
    norms = np.maximum(np.linalg.norm(Phi, axis=0), 1e-300)
    _, s, Vt = np.linalg.svd(Phi / norms, full_matrices=False)
    s = np.concatenate([s, np.zeros(n - len(s))]) / s[0]
    kept = s > 1e-9
    sigma_kept, sigma_dropped = float(s[kept].min()), float(s[~kept].max()) if (~kept).any() else 0.0
    null = Vt[~kept] / norms  # undo the column scaling
    basis = _echelon(null)[::-1] if len(null) else null  # leading pivots first: a² − b² before a² − c²
    return basis, sigma_kept, sigma_dropped


def solve_quadratic(
    fields: list[list[sp.Expr]], theta: list[sp.Symbol], x: list[sp.Symbol], *, seed: int, include_products: bool
) -> LawSearch:
    """All quadratic h with ``Σ_k V_k ∂_k h ≡ 0`` for every field V (a list over θ)."""
    start = time.perf_counter()
    symbols = theta + x
    D = len(theta)
    n = D * (D + 1) // 2 + D
    rng = np.random.default_rng(seed)
    exact = _is_rational_polynomial(fields, symbols)
    evaluate = _float_fields(fields, symbols)
    sample = rng.uniform(-1.5, 1.5, size=(len(symbols), math.ceil(1.5 * n / len(fields)) + 8))
    for _ in range(_ROUNDS):
        Phi = _columns(sample[:D], evaluate(sample))
        basis, sigma_kept, sigma_dropped = _null_space(Phi)
        laws = [_to_expr(v, theta) for v in basis]
        if not laws:
            break
        if exact:  # too few points leave spurious null vectors (sparse fields): the exact check catches them
            residual = float(not all(_holds_exactly(h, fields, theta) for h in laws))
        else:  # check what is returned: rounded coefficients, the SVD's round-off entries gone
            checked = np.array([_coefficients(h, theta) for h in laws])
            residual = _fresh_residual(checked, evaluate, D, len(symbols), rng)
        if residual <= 1e-9:
            break
        # a region of (θ, x) was under-sampled: twice the points, all solved jointly
        sample = np.concatenate([sample, rng.uniform(-1.5, 1.5, size=sample.shape)], axis=1)
    else:
        raise RuntimeError(
            f"a candidate law fails at fresh points (relative residual {residual:.2g}) even with "
            f"{sample.shape[1] // 2} sample points"
        )
    if exact:
        _certify_complete(len(laws), fields, symbols, D, math.ceil(n / len(fields)) + 4, rng)
    if not include_products:
        laws = _drop_products(laws, theta)
    return LawSearch(laws, exact, n, Phi.shape[0], sigma_kept, sigma_dropped, time.perf_counter() - start)


def _coefficients(h: sp.Expr, theta: list[sp.Symbol]) -> np.ndarray:
    """The vector (c_ij, d_i) of a quadratic polynomial, in the order of the unknowns."""
    I, J = _pairs(len(theta))
    poly = sp.Poly(h, *theta)
    monomials = [theta[i] * theta[j] for i, j in zip(I, J)] + list(theta)
    return np.array([float(poly.coeff_monomial(m)) for m in monomials])


def _drop_products(laws: list[sp.Expr], theta: list[sp.Symbol]) -> list[sp.Expr]:
    """Keep the laws that are not combinations of products ℓ_i ℓ_j of linear laws (and of laws kept before)."""
    linear = [h for h in laws if sp.Poly(h, *theta).total_degree() == 1]
    spanned = [_coefficients(sp.expand(u * v), theta) for i, u in enumerate(linear) for v in linear[i:]]
    if not spanned:
        return laws
    kept = []
    for h in laws:
        trial = spanned + [_coefficients(h, theta)]
        if np.linalg.matrix_rank(np.array(trial), tol=1e-9) == len(trial):
            kept.append(h)
            spanned = trial
    return kept


def _holds_exactly(h: sp.Expr, fields: list[list[sp.Expr]], theta: list[sp.Symbol]) -> bool:
    """``Σ_k V_k ∂_k h ≡ 0`` for every field V, decided exactly by polynomial arithmetic."""
    h = sp.Poly(h, *theta)
    gradient_h = [(h.diff(t), k) for k, t in enumerate(theta)]
    gradient_h = [(g, k) for g, k in gradient_h if not g.is_zero]
    for V in fields:
        total = sp.Poly(0, *theta, domain=h.domain)
        for g, k in gradient_h:
            if V[k] != 0:
                total += g * sp.Poly(V[k], *theta)
        if not total.is_zero:
            return False
    return True


def _certify_complete(found: int, fields, symbols, D: int, points: int, rng: np.random.Generator) -> None:
    """dim null(Φ mod p) bounds the number of laws from above: equality with ``found`` certifies completeness."""
    evaluate = _integer_fields(fields, symbols)
    n = D * (D + 1) // 2 + D
    sample = rng.integers(0, LARGE_PRIME, size=(len(symbols), points), dtype=np.int64)
    while True:  # sparse fields (each touching few θ) need more points than n / #fields: add until tight
        Phi = _columns(sample[:D], evaluate(sample), modulus=LARGE_PRIME)
        bound = Phi.shape[1] - rank_mod_p(Phi)
        if bound == found or sample.shape[1] > n + 4:
            break
        sample = np.concatenate([sample, rng.integers(0, LARGE_PRIME, size=sample.shape, dtype=np.int64)], axis=1)
    if bound != found:
        raise RuntimeError(f"found {found} laws but the exact rank mod p leaves room for {bound}")


def _fresh_residual(basis: np.ndarray, evaluate, D: int, S: int, rng: np.random.Generator) -> float:
    """Worst relative residual ``|Φ b| / (|Φ|·|b|)`` of the laws (rows b of ``basis``) at 32 fresh points.

    ``|Φ|·|b|`` is the size of the terms that must cancel, so a law passes when they cancel to
    round-off (≤ 1e-9). ``basis`` must hold the returned (rounded) coefficients, not raw null vectors:
    where a law's own terms all vanish (its ReLU unit is off) the raw vector's ~1e-16 entries on other
    monomials would make up numerator and denominator alike, a meaningless ratio of round-offs; with
    exact zeros there the row is 0/0, counted as 0.
    """
    sample = rng.uniform(-1.5, 1.5, size=(S, 32))
    Phi = _columns(sample[:D], evaluate(sample))
    return float((np.abs(Phi @ basis.T) / np.maximum(np.abs(Phi) @ np.abs(basis.T), 1e-300)).max())

