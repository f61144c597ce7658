"""Conservation laws derived with sympy: ∇f, the condition ⟨∇h, ∇f⟩ = 0, its PDE, characteristics and laws.

The chain of chapter 1, each step computed, nothing typed in by hand:

1. :func:`gradient` — ``∇_θ f(x; θ)``.
2. :func:`orthogonality_condition` — ``⟨∇h(θ), ∇_θ f(x; θ)⟩``; ``h`` is a law iff this
   vanishes for all x and θ (Marcotte et al. 2023).
3. :func:`pde` — the condition is a polynomial in the inputs x whose coefficients must
   each vanish: x-free first-order PDEs ``Σ_k V_k(θ) ∂_k h = 0``.
4. :func:`characteristics` — their characteristic systems ``θ_k' = V_k(θ)`` and the
   (quadratic) first integrals shared by all of them.
5. :func:`quadratic_laws` — every quadratic polynomial law of any sympy model at once,
   by linear algebra on the unknown coefficients of ``h``.
6. :func:`derive` — the paper's proof on a block whose activations (softmax entries, gates)
   are undefined sympy functions: shapes in place of ρ(B_i·x), ρ′(B_i·x) (identities first,
   :mod:`conslaw_lite.shapes`), every coefficient of the condition set to 0 by the
   independence rule, the x-free PDE system (steps 3–4 above, generalized: :func:`pde` and
   :func:`characteristics` run the same code), its exact quadratic laws and the exact count
   ``N = D − dim Lie`` (:mod:`conslaw_lite.lie_exact`). What a rule assumes (an undefined ρ
   satisfying the independence rule) is a typed hypothesis of the result, "N = 0 if ...";
   a ρ given as ``sp.Lambda(z, expr)`` is checked instead. The blocks of the book, written for
   it, are in :mod:`conslaw_lite.symbolic_blocks`.

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
from fractions import Fraction

import numpy as np
import sympy as sp
from sympy.core.function import AppliedUndef
from sympy.polys.constructor import construct_domain
from sympy.polys.matrices import DomainMatrix

from conslaw_lite.lie_exact import jacobian_rank, lie_rank, random_point
from conslaw_lite.shapes import Hypothesis, Shapes, rule_for

_PRIME = 2_147_483_629  # largest prime below 2³¹: products of two residues fit in int64
_MAX_DENOMINATOR = 1000
_ROUNDS = 4  # numeric path: solve with P, 2P, 4P, 8P points before giving up
INDEPENDENCE_TOL = 1e-7  # σ_min/σ_max of a concrete ρ's monomials below which they are not independent


# ---------------------------------------------------------------- input checks


def _outputs(f: object) -> list[sp.Expr]:
    """``f`` as a list of scalar sympy expressions; TypeError naming what is not one."""
    items = list(f) if isinstance(f, (list, tuple, sp.MatrixBase)) else [f]
    if not items:
        raise ValueError("the model f has no outputs")
    for i, item in enumerate(items):
        if not isinstance(item, sp.Expr):
            where = f"output {i} of f" if len(items) > 1 or item is not f else "f"
            raise TypeError(f"{where} must be a sympy expression, got {type(item).__name__}: {item!r}")
    return items


def _symbols(values: object, what: str) -> list[sp.Symbol]:
    if isinstance(values, (sp.Basic, str)) or not isinstance(values, Sequence):
        raise TypeError(f"{what} must be a list of sympy Symbols, got {type(values).__name__}: {values!r}")
    out = list(values)
    for v in out:
        if not isinstance(v, sp.Symbol):
            raise TypeError(f"{what} must be sympy Symbols; {v!r} is a {type(v).__name__}")
    repeated = sorted({str(v) for v in out if out.count(v) > 1})
    if repeated:
        raise ValueError(f"{what} lists {', '.join(repeated)} more than once")
    return out


def _check_model(
    f: object, params: object, inputs: object, absent_ok: bool = False
) -> tuple[list[sp.Expr], list[sp.Symbol], list[sp.Symbol]]:
    outputs = _outputs(f)
    theta = _symbols(params, "params")
    x = _symbols(inputs, "inputs")
    if not theta:
        raise ValueError("params is empty: a law is a function of at least one parameter")
    both = [str(s) for s in theta if s in x]
    if both:
        raise ValueError(f"{', '.join(both)} listed both as a parameter and as an input")
    free = set().union(*(e.free_symbols for e in outputs))
    absent = [str(s) for s in theta if s not in free]
    if absent and not absent_ok:
        raise ValueError(f"parameter {', '.join(absent)} does not occur in f")
    unknown = sorted(str(s) for s in free - set(theta) - set(x))
    if unknown:
        raise ValueError(f"f contains {', '.join(unknown)}, which is neither a parameter nor an input")
    return outputs, theta, x


# ---------------------------------------------------------------- the derivation, step by step


def gradient(f: sp.Expr, params: Sequence[sp.Symbol]) -> list[sp.Expr]:
    """``∇_θ f = (∂f/∂θ_1, ..., ∂f/∂θ_D)`` for one scalar output f.

    Examples
    ========
    >>> from sympy import symbols
    >>> a, b, x = symbols("a b x")
    >>> gradient(a * b * x, [a, b])
    [b*x, a*x]
    """
    if isinstance(f, (list, tuple, sp.MatrixBase)):
        raise TypeError("gradient takes one scalar output; call it once per output")
    (f,) = _outputs(f)
    return [sp.diff(f, t) for t in _symbols(params, "params")]


def generic_law(params: Sequence[sp.Symbol]) -> sp.Expr:
    """An unknown function ``h(θ_1, ..., θ_D)``, for writing the condition and the PDE.

    Examples
    ========
    >>> from sympy import symbols
    >>> generic_law(symbols("a b"))
    h(a, b)
    """
    return sp.Function("h")(*_symbols(params, "params"))


def orthogonality_condition(f: sp.Expr, params: Sequence[sp.Symbol], h: sp.Expr | None = None) -> sp.Expr:
    """``⟨∇h(θ), ∇_θ f(x; θ)⟩ = Σ_k ∂_k h · ∂_k f``; h is a law iff this is 0 for all x, θ.

    ``h`` defaults to the unknown function ``h(θ)`` (see :func:`generic_law`).

    Examples
    ========
    >>> from sympy import symbols
    >>> a, b, x = symbols("a b x")
    >>> orthogonality_condition(a * b * x, [a, b])
    a*x*Derivative(h(a, b), b) + b*x*Derivative(h(a, b), a)
    >>> orthogonality_condition(a * b * x, [a, b], a**2 - b**2)
    0
    >>> orthogonality_condition(a * b * x, [a, b], a**2 + b**2)  # not a law
    4*a*b*x
    """
    theta = _symbols(params, "params")
    h = generic_law(theta) if h is None else h
    if not isinstance(h, sp.Expr):
        raise TypeError(f"h must be a sympy expression, got {type(h).__name__}: {h!r}")
    return sp.Add(*(sp.diff(h, t) * g for t, g in zip(theta, gradient(f, theta))))


def _pde_fields(f: object, params: object, inputs: object) -> tuple[list[list[sp.Expr]], list[sp.Symbol]]:
    """The coefficient vectors V(θ) of the x-free PDEs ``Σ_k V_k ∂_k h = 0`` (see :func:`derive`)."""
    system = _x_free_system(f, params, inputs)
    return system.fields, system.theta


def _normalise(V: list[sp.Expr], theta: list[sp.Symbol]) -> list[sp.Expr]:
    """V divided by the gcd of its entries (polynomial V), sign chosen so the first entry leads positively.

    The PDE ``Σ V_k ∂_k h = 0`` is unchanged by a common factor, so ``x(b ∂_a h + a ∂_b h)`` and
    ``2b ∂_a h + 2a ∂_b h`` both become ``b ∂_a h + a ∂_b h``.
    """
    if not all(v.is_polynomial(*theta) for v in V):
        return V
    common = sp.gcd_list(V)
    V = [sp.cancel(v / common) for v in V] if common != 0 else V
    first = next((v for v in V if v != 0), None)
    return [-v for v in V] if first is not None and sp.Poly(first, *theta).LC() < 0 else V


def pde(f: sp.Expr | Sequence[sp.Expr], params: Sequence[sp.Symbol], inputs: Sequence[sp.Symbol]) -> list[sp.Expr]:
    """The x-free PDEs ``Σ_k V_k(θ) ∂_k h = 0`` that a law h must satisfy.

    The condition ``⟨∇h, ∇f_i⟩`` is expanded as a polynomial in the inputs; it vanishes
    for every x iff every coefficient does, and each coefficient is one PDE (common
    polynomial factors divided out, duplicates dropped). Needs f polynomial in x.

    Examples
    ========
    >>> from sympy import symbols
    >>> a, b, c, x = symbols("a b c x")
    >>> pde(a * b * x, [a, b], [x])
    [a*Derivative(h(a, b), b) + b*Derivative(h(a, b), a)]
    >>> pde(a * b * c * x, [a, b, c], [x])
    [a*b*Derivative(h(a, b, c), c) + a*c*Derivative(h(a, b, c), b) + b*c*Derivative(h(a, b, c), a)]
    """
    fields, theta = _pde_fields(f, params, inputs)
    h = generic_law(theta)
    return [sp.Add(*(v * sp.Derivative(h, t) for v, t in zip(V, theta))) for V in fields]


@dataclass(frozen=True)
class Characteristics:
    """Characteristic systems of the PDEs of a model and their shared invariants.

    ``systems[j]`` lists the ODEs ``θ_k'(t) = V_k(θ(t))`` of the j-th PDE;
    ``invariants`` is a basis of the quadratic polynomials constant along all of them.
    """

    t: sp.Symbol
    systems: list[list[sp.Eq]]
    invariants: list[sp.Expr]


def characteristics(
    f: sp.Expr | Sequence[sp.Expr], params: Sequence[sp.Symbol], inputs: Sequence[sp.Symbol]
) -> Characteristics:
    """The characteristic ODEs ``θ' = V(θ)`` of each PDE of :func:`pde`, and their invariants.

    A solution h of ``Σ_k V_k ∂_k h = 0`` is constant along ``θ' = V(θ)``. The invariants
    are computed as the quadratic polynomials I with ``⟨∇I, V⟩ ≡ 0`` for every PDE's V,
    by the linear algebra of :func:`quadratic_laws`.

    Examples
    ========
    >>> from sympy import symbols
    >>> a, b, c, x = symbols("a b c x")
    >>> ch = characteristics(a * b * x, [a, b], [x])
    >>> ch.systems[0]
    [Eq(Derivative(a(t), t), b(t)), Eq(Derivative(b(t), t), a(t))]
    >>> ch.invariants
    [a**2 - b**2]
    >>> characteristics(a * b * c * x, [a, b, c], [x]).invariants
    [a**2 - b**2, a**2 - c**2]
    """
    fields, theta = _pde_fields(f, params, inputs)
    t = sp.Symbol("t")
    paths = {s: sp.Function(s.name)(t) for s in theta}
    systems = [[sp.Eq(sp.Derivative(paths[s], t), v.subs(paths)) for s, v in zip(theta, V)] for V in fields]
    return Characteristics(t, systems, _solve(fields, theta, [], seed=0, include_products=False).laws)


# ---------------------------------------------------------------- shapes and the x-free system


def _applications(expr: sp.Expr) -> list[AppliedUndef]:
    apps = sorted(expr.atoms(AppliedUndef), key=sp.default_sort_key)
    for app in apps:
        nested = [a for a in app.args if a.atoms(AppliedUndef)]
        if nested:
            raise ValueError(f"{app} has an undefined function inside its argument {nested[0]}: one layer only")
    return apps


def _shape_gradient(f: sp.Expr, variables: list[sp.Symbol], rules: dict, shapes: Shapes) -> list[sp.Expr]:
    """``∂f/∂u`` for each u, by the chain rule through every ``φ(args)``, with φ and ∂_a φ replaced by shapes."""
    apps = _applications(f)
    psi = {app: sp.Dummy(str(app.func)) for app in apps}
    fhat = f.xreplace(psi)
    values = {psi[app]: rules[app.func].value(app, shapes) for app in apps}
    grads = []
    for u in variables:
        g = sp.diff(fhat, u)
        for app in apps:
            inner = [(a, sp.diff(arg, u)) for a, arg in enumerate(app.args)]
            chain = sp.Add(*(rules[app.func].derivative(app, a, shapes) * d for a, d in inner if d != 0))
            if chain != 0:
                g += sp.diff(fhat, psi[app]) * chain
        grads.append(g.xreplace(values))
    return grads


def _placeholder(u: sp.Symbol, theta: list[sp.Symbol], h: sp.Expr) -> sp.Expr:
    """``∂h/∂u`` for a parameter u; ``⟨∇h, ∇u⟩`` (a symbol) for a quantity u(θ) given in ``through``."""
    return sp.Derivative(h, u) if u in theta else sp.Symbol(f"⟨∇h,∇{u}⟩")


@dataclass(frozen=True)
class _System:
    theta: list[sp.Symbol]
    shapes: Shapes
    rule: str
    conditions: list[sp.Expr]
    relations: list[sp.Expr]
    fields: list[list[sp.Expr]]
    reduced: bool
    hypotheses: tuple[Hypothesis, ...] = ()


def _check_through(through: object, theta: list[sp.Symbol], x: list[sp.Symbol]) -> dict[sp.Symbol, sp.Expr]:
    if through is None:
        return {}
    if not isinstance(through, dict):
        raise TypeError(f"through must be a dict {{symbol: expression in the params}}, got {type(through).__name__}")
    for u, value in through.items():
        if not isinstance(u, sp.Symbol) or u in theta or u in x:
            raise ValueError(f"through: {u!r} must be a new sympy Symbol, neither a parameter nor an input")
        if not (sp.sympify(value).free_symbols <= set(theta)) or not sp.sympify(value).is_polynomial(*theta):
            raise ValueError(f"through: {u} = {value} must be a polynomial in the params")
    return dict(through)


def _rules(outputs: list[sp.Expr], identities: object) -> dict:
    identities = dict(identities or {})
    functions = {app.func for e in outputs for app in e.atoms(AppliedUndef)}
    unused = [str(fn) for fn in identities if fn not in functions]
    if unused:
        raise ValueError(f"identities name {', '.join(unused)}, which does not occur in f")
    rules = {fn: rule_for(fn, identities.get(fn)) for fn in sorted(functions, key=str)}
    for fn, rule in rules.items():
        apps = [app for e in outputs for app in e.atoms(AppliedUndef) if app.func == fn]
        if rule.needs_single_argument and any(len(app.args) != 1 for app in apps):
            raise ValueError(f"{fn} takes several arguments: give it an identity such as 'softmax'")
    return rules


def _coefficient_rows(
    grads: list[sp.Expr], x: list[sp.Symbol], shapes: Shapes, i: int
) -> tuple[list[list[sp.Expr]], list[sp.Expr]]:
    """One row per monomial in (shapes, x): the coefficients of ``Σ_u ∂f/∂u · L_u`` in the L_u; and the monomials."""
    grads = [g.xreplace(shapes.eliminate) for g in grads]
    fractions = [sp.fraction(sp.together(g)) for g in grads]
    common = sp.lcm_list([den for _, den in fractions]) if any(den != 1 for _, den in fractions) else 1
    numerators = [sp.expand(num * sp.cancel(common / den)) for num, den in fractions]
    gens = [s for s in shapes.meaning if s not in shapes.eliminate] + x
    rows: dict[tuple, list[sp.Expr]] = {}
    for j, num in enumerate(numerators):
        try:
            terms = sp.Poly(num, *gens).terms() if gens else [((), num)]
        except sp.PolynomialError as err:
            raise ValueError(
                f"output {i} of f is not polynomial in the inputs {x} once each undefined function is replaced "
                "by its shape symbols; write activations as undefined sympy Functions (sp.Function('rho')) "
                "or use quadratic_laws, which does not need this"
            ) from err
        for monomial, coefficient in terms:
            rows.setdefault(monomial, [sp.S.Zero] * len(grads))[j] = coefficient
    monomials = [sp.Mul(*(g**e for g, e in zip(gens, exps))) for exps in rows]
    return list(rows.values()), monomials


def _independence(
    monomials: list[sp.Expr], shapes: Shapes, concrete: dict, values: dict, x: list[sp.Symbol], seed: int
) -> float:
    """σ_min/σ_max of the monomials in (shapes, x) as functions of x, ρ concrete, at one random θ₀.

    Full column rank at sample points proves the functions linearly independent (a relation
    Σ c_k m_k = 0 would be a null vector), at θ₀ and so, the rank being generic, at almost every θ.
    Columns are scaled to unit length; θ₀ and x are standard normal (×1.5 for x), so that the
    arguments B_i·x spread over a few units, where tanh or GELU are far from any polynomial.
    """
    rng = np.random.default_rng(seed)
    mapping = {}
    for s_, meaning in shapes.meaning.items():
        for fn, lam in concrete.items():
            meaning = meaning.replace(fn, lam)
        mapping[s_] = meaning.xreplace(values)
    exprs = [m.xreplace(mapping) for m in monomials]
    samples = max(8 * len(exprs), 256)
    X = rng.standard_normal((samples, len(x))) * 1.5
    evaluate = sp.lambdify(x, exprs, modules=["scipy", "numpy"])
    columns = np.column_stack([np.broadcast_to(np.asarray(v, dtype=float), (samples,)) for v in evaluate(*X.T)])
    norms = np.linalg.norm(columns, axis=0)
    if not np.all(np.isfinite(columns)) or np.any(norms == 0):
        return 0.0
    s = np.linalg.svd(columns / norms, compute_uv=False)
    return float(s[-1] / s[0])


def _hypotheses(
    rules: dict, monomials: list[list[sp.Expr]], shapes: Shapes, theta: list[sp.Symbol], through: dict,
    x: list[sp.Symbol], seed: int,
) -> tuple[Hypothesis, ...]:  # fmt: skip
    """The rules' hypotheses, each concrete ρ's checked (and dropped) when every function of f is concrete."""
    assumed = [r.hypothesis for r in rules.values() if r.hypothesis is not None]
    concrete = {fn: lam for r in rules.values() for fn, lam in r.concrete.items()}
    if not concrete or any(r.hypothesis is not None and not r.concrete for r in rules.values()):
        return tuple(assumed)  # an undefined function's shapes share the monomials: nothing can be evaluated
    rng = np.random.default_rng(seed)
    point = {t: sp.Float(rng.standard_normal()) for t in theta}
    values = {**point, **{u: sp.sympify(v).xreplace(point) for u, v in through.items()}}
    for i, monos in enumerate(monomials):
        if not monos or not any(m.free_symbols & set(shapes.meaning) for m in monos):
            continue
        ratio = _independence(monos, shapes, concrete, values, x, seed)
        if ratio < INDEPENDENCE_TOL:
            given = ", ".join(f"{fn}(z) = {lam.expr}" for fn, lam in concrete.items() if not str(fn).endswith("′"))
            raise ValueError(
                f"{given}: the independence rule fails on this block: the monomials in its shapes and x of output "
                f"{i} are linearly dependent over the polynomials in x (σ_min/σ_max = {ratio:.1e} at random x); "
                "give the identity that relates them as sp.Eq(rho(z), rhs)"
            )
    return ()


def _irrational_factor(column: list[sp.Expr]) -> sp.Expr:
    """The irrational constant (1/√k of attention) that every term of a column carries, else 1.

    Dividing it out keeps the exact row reduction over Q, much faster than over Q(√k).
    """
    factors = set()
    for entry in column:
        for term in sp.Add.make_args(sp.expand(entry)):
            number, _ = term.as_independent(*term.free_symbols)
            factors.add(sp.sympify(number).as_coeff_Mul()[1])
    factors.discard(sp.S.One) if len(factors) > 1 else None
    return factors.pop() if len(factors) == 1 else sp.S.One


def _constant_row_space(rows: list[list[sp.Expr]], at: dict, seed: int) -> sp.Matrix | None:
    """A constant matrix R with the same row space as the coefficient rows C(θ) at generic θ, or None.

    R is the reduced row-echelon form of C(θ₀); it is accepted after an exact check that every
    row of C(θ) is orthogonal to the null space of R (so rank C(θ) ≤ rank R everywhere, and
    = at θ₀, hence generically).
    """
    C0 = sp.Matrix(rows).xreplace(at)
    dm = DomainMatrix.from_Matrix(C0)
    if dm.domain == sp.EX:
        domain, _ = construct_domain(list(C0), extension=True)
        dm = dm.convert_to(domain)
    R = dm.to_field().rref()[0].to_Matrix()
    R = R[[i for i in range(R.rows) if any(R.row(i))], :]
    null = R.nullspace() if R.rows else [sp.eye(len(rows[0])).col(j) for j in range(len(rows[0]))]
    for row in rows:
        for n in null:
            if sp.expand(sp.Add(*(c * v for c, v in zip(row, n)))) != 0:
                return None
    return R


def _x_free_system(
    f: object, params: object, inputs: object, identities: object = None, through: object = None, seed: int = 0
) -> _System:
    """Steps 1–4 of :func:`derive`: gradient, shapes, independence, the x-free PDE system."""
    outputs = _outputs(f)
    theta, x = _symbols(params, "params"), _symbols(inputs, "inputs")
    through = _check_through(through, theta, x)
    _check_model([sp.Add(*outputs), *through.values()], theta, x + list(through), absent_ok=True)
    free = set().union(*(e.free_symbols for e in outputs))
    variables = [t for t in theta if t in free] + [u for u in through if u in free]
    value_of = {**{t: t for t in theta}, **through}
    rules = _rules(outputs, identities)
    shapes = Shapes()
    h = generic_law(theta)
    L = [_placeholder(u, theta, h) for u in variables]
    rows, conditions, monomials = [], [], []
    for i, fi in enumerate(outputs):
        grads = _shape_gradient(fi, variables, rules, shapes)
        conditions.append(sp.Add(*(g.xreplace(shapes.eliminate) * l for g, l in zip(grads, L))))
        rows_i, monomials_i = _coefficient_rows(grads, x, shapes, i)
        rows += rows_i
        monomials.append(monomials_i)
    hypotheses = _hypotheses(rules, monomials, shapes, theta, through, x, seed)
    rows = [r for r in rows if any(c != 0 for c in r)]
    grad_u = [[sp.diff(value_of[u], t) for t in theta] for u in variables]
    R = None
    if rows:
        point = random_point(theta, seed)
        at = {**point, **{u: value_of[u].xreplace(point) for u in variables}}
        scale = [_irrational_factor([row[j] for row in rows if row[j] != 0]) for j in range(len(variables))]
        R = _constant_row_space([[sp.expand(c / k) for c, k in zip(row, scale)] for row in rows], at, seed)
    if R is not None:  # C' = C·diag(1/scale) has the rows R: Σ_u R_iu·scale_u·L_u = 0
        combos = [[r * k for r, k in zip(R.row(i), scale)] for i in range(R.rows)]
        combos = [[c / next(v for v in combo if v != 0) for c in combo] for combo in combos]
    else:
        combos = [[c.xreplace(through) for c in row] for row in rows]
    fields = []
    for combo in combos:
        V = [sp.expand(sp.Add(*(c * g[k] for c, g in zip(combo, grad_u)))) for k in range(len(theta))]
        V = _normalise(V, theta)
        if any(v != 0 for v in V) and V not in fields:
            fields.append(V)
    relations = [sp.Add(*(c * l for c, l in zip(combo, L))) for combo in combos]
    rule = "\n".join(dict.fromkeys(r.text for r in rules.values())) or "no undefined function: f is a polynomial in x"
    reached = set().union(*(e.free_symbols for e in outputs), *(v.free_symbols for v in through.values()))
    absent = [str(t) for t in theta if t not in reached]
    if absent:  # e.g. the gate rows under top-1 routing, whose gate is the constant 1
        rule += f"\n{', '.join(absent)} do not reach f: nothing constrains them, each is a law"
    return _System(theta, shapes, rule, conditions, relations, fields, R is not None, hypotheses)


def _components(fields: list[list[sp.Expr]], theta: list[sp.Symbol]) -> list[list[int]]:
    """Groups of parameters that the fields couple; untouched ones alone."""
    D = len(theta)
    parent = list(range(D))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    index = {t: k for k, t in enumerate(theta)}
    for V in fields:  # a field couples the parameters it moves and those its entries depend on
        moved = {k for k, v in enumerate(V) if v != 0}
        support = sorted(moved | {index[s] for v in V for s in v.free_symbols if s in index})
        for k in support[1:]:
            parent[root(k)] = root(support[0])
    groups: dict[int, list[int]] = {}
    for k in range(D):
        groups.setdefault(root(k), []).append(k)
    return list(groups.values())


def _laws_by_component(fields: list[list[sp.Expr]], theta: list[sp.Symbol], seed: int) -> list[sp.Expr]:
    """The quadratic laws, solved separately on each group of coupled parameters.

    Fields whose entries and variables lie in disjoint groups act separately, so a quadratic law is a sum of laws of
    each group plus cross terms ``ℓ(θ_group1)·m(θ_group2)``; those are products of linear laws
    of the two groups, which the basis leaves out anyway (see :func:`quadratic_laws`). A
    parameter that no field touches (it does not reach f) is itself a law. Solving by group
    keeps the number of unknowns ~ Σ (group size)² instead of D².
    """
    laws = []
    for group in _components(fields, theta):
        sub = [theta[k] for k in group]
        touching = [[V[k] for k in group] for V in fields if any(V[k] != 0 for k in group)]
        if touching:
            laws += _solve(touching, sub, [], seed=seed, include_products=False).laws
        else:
            laws += sub
    return laws


# ---------------------------------------------------------------- derive: the whole chain


@dataclass(frozen=True)
class Derivation:
    """The paper's derivation of one block, every step computed (see :func:`derive`).

    ``conditions``: ``⟨∇h, ∇f_j⟩`` per output, shapes in place of ρ, ρ′, softmax entries;
    ``shapes``: what each shape symbol stands for; ``rule``: the independence rule(s) used,
    with their source; ``relations``: the x-free system in the quantities ``u`` (``∂h/∂θ``,
    or ``⟨∇h, ∇u(θ)⟩`` for a ``through`` quantity); ``pde``: the same as PDEs
    ``Σ_k V_k(θ) ∂_k h = 0``; ``laws``: every quadratic law, exactly; ``num_laws``: N from the
    exact Lie rank, ``None`` when the two bounds of :mod:`conslaw_lite.lie_exact` do not meet.

    ``hypotheses``: what the count assumes (:class:`~conslaw_lite.shapes.Hypothesis`), e.g. that an
    undefined ρ satisfies the independence rule; ``num_laws`` is then N *if* they hold, and
    :attr:`message` says so ("N = 0 if rho satisfies the independence rule: ..."). The laws hold
    either way (each is a law of the x-free system, which implies the condition); only their
    completeness rests on the hypotheses. Empty when nothing is assumed: a polynomial f, or
    every ρ given as an expression and its rule checked on the block.
    """

    params: list[sp.Symbol]
    conditions: list[sp.Expr]
    shapes: dict[sp.Symbol, sp.Expr]
    rule: str
    relations: list[sp.Expr]
    pde: list[sp.Expr]
    fields: list[list[sp.Expr]]
    laws: list[sp.Expr]
    law_rank: int
    lie_rank: int
    ranks_by_depth: list[int]
    num_laws: int | None
    seconds: float
    hypotheses: tuple[Hypothesis, ...] = ()

    @property
    def conditional(self) -> bool:
        """Whether ``num_laws`` holds only under :attr:`hypotheses`."""
        return bool(self.hypotheses)

    @property
    def message(self) -> str:
        """``"N = 2"``, or ``"N = 0 if rho satisfies the independence rule: ..."`` when the count is conditional."""
        verdict = f"N = {self.num_laws}" if self.num_laws is not None else "N not certified"
        if not self.hypotheses:
            return verdict
        return f"{verdict} if " + "; and if ".join(h.statement for h in self.hypotheses)

    def report(self, items: int = 4, width: int = 400) -> str:
        """The chain as text, every line from the computation: condition (output 1), shapes, rule,
        x-free system, PDEs, laws, certificate. Lists show their first ``items`` entries; long
        expressions are cut at ``width`` characters.

        Examples
        ========
        >>> a, b, x = sp.symbols("a b x")
        >>> print(derive(a * b * x, [a, b], [x]).report())  # doctest: +ELLIPSIS
        condition ⟨∇h, ∇f⟩ (output 1): a*x*∂_b h + b*x*∂_a h
        shapes: none
        ...
        laws (1): a**2 - b**2
        D = 2; brackets give dim Lie ≥ 1 ...: N = 1
        """

        def cut(e: object) -> str:
            text = str(short(e)) if isinstance(e, sp.Basic) else str(e)
            return text if len(text) <= width else text[:width] + " …"

        def listing(name: str, values: list) -> list[str]:
            more = f", the first {items}" if len(values) > items else ""
            return [f"{name} ({len(values)} equations{more}):"] + [f"    {cut(v)} = 0" for v in values[:items]]

        shapes = ", ".join(f"{k} = {v}" for k, v in self.shapes.items()) or "none"
        lines = [f"condition ⟨∇h, ∇f⟩ (output 1): {cut(self.conditions[0])}", f"shapes: {cut(shapes)}",
                 f"rule: {self.rule}"]  # fmt: skip
        if any(str(r).startswith("⟨∇h") or "⟨∇h" in str(r) for r in self.relations):  # through quantities
            lines += listing("x-free system", self.relations)
        lines += listing("PDE system", self.pde)
        lines += [f"laws ({len(self.laws)}): " + cut(", ".join(map(str, self.laws)) or "none"), self.certificate]
        return "\n".join(lines)

    @property
    def certificate(self) -> str:
        """The two bounds behind ``num_laws``, in words."""
        D = len(self.params)
        verdict = self.message if self.num_laws is not None else "the bounds do not meet: N not certified"
        return (
            f"D = {D}; brackets give dim Lie ≥ {self.lie_rank} (ranks by depth {self.ranks_by_depth}); "
            f"{self.law_rank} independent laws give dim Lie ≤ {D - self.law_rank}: {verdict}"
        )


def short(expr: sp.Expr) -> sp.Expr:
    """``expr`` with each ``∂h(θ)/∂θ_k`` written ``∂_θk h`` (a symbol), for printing long PDEs.

    Examples
    ========
    >>> a, b = sp.symbols("a b")
    >>> short(b * sp.Derivative(generic_law([a, b]), a))
    b*∂_a h
    """
    return sp.sympify(expr).replace(
        lambda e: isinstance(e, sp.Derivative) and isinstance(e.expr, AppliedUndef) and e.expr.func.__name__ == "h",
        lambda e: sp.Symbol(f"∂_{e.variables[0]} h"),
    )


def derive(
    f: sp.Expr | Sequence[sp.Expr],
    params: Sequence[sp.Symbol],
    inputs: Sequence[sp.Symbol],
    identities: dict | None = None,
    *,
    through: dict[sp.Symbol, sp.Expr] | None = None,
    seed: int = 0,
) -> Derivation:
    """Derive a block's laws as the paper proves them, and their exact number.

    1. ``∇_θ f`` and the condition ``⟨∇h, ∇f_j(x)⟩ = 0`` for an unknown h(θ);
    2. every undefined sympy ``Function`` ρ in f is an activation: ``ρ(B_i·x) → s_i``,
       ``ρ′(B_i·x) → t_i`` (shapes), after the identities given in ``identities``
       (``{ρ: "relu"}``: ρ(z) = ρ′(z)·z; ``"linear"``: ρ(z) = z; ``"softmax"`` and
       ``"normalized_sigmoid"`` for entries ``φ(index, z_0, ...)``; ``sp.Eq(ρ(z), rhs)``; or
       ρ itself, ``sp.Lambda(z, expr)``); see :mod:`conslaw_lite.shapes`;
    3. independence of the shapes over the polynomials in x: the coefficient of every
       monomial in (shapes, x) vanishes (``.rule`` says which rule). An undefined ρ is a
       *hypothesis* (``.hypotheses``, ``.message``: "N = 0 if rho satisfies the independence
       rule"); a ρ given as an expression is checked: its monomials' values at random x, at a
       random θ₀, have full rank (``INDEPENDENCE_TOL``), or a ``ValueError`` says the rule fails;
    4. an x-free system polynomial in θ. When the coefficient rows span a constant space
       (checked exactly) it is replaced by a basis of that space: for attention, written
       with ``through={M_ab: (Q Kᵀ)_ab, ...}``, this is ``⟨∇h, ∇M_ab⟩ = 0``, i.e.
       ``(∇_Q h)Kᵀ + Q(∇_K h)ᵀ = 0``;
    5. its quadratic laws by :func:`quadratic_laws`' exact path (mod-p completeness
       certificate), and ``N = D − dim Lie(V)(θ₀)`` in exact rational arithmetic at a random
       rational θ₀, certified when it meets the count of independent laws
       (:mod:`conslaw_lite.lie_exact`).

    Examples
    ========
    >>> import sympy as sp
    >>> a, b, x = sp.symbols("a b x")
    >>> rho = sp.Function("rho")  # an activation ρ
    >>> d = derive(a * rho(b * x), [a, b], [x])  # GELU-like: shapes independent, if ρ is
    >>> d.pde, d.num_laws
    ([Derivative(h(a, b), a), Derivative(h(a, b), b)], 0)
    >>> d.message.split(":")[0], [h.rule for h in d.hypotheses]
    ('N = 0 if rho satisfies the independence rule', ['independent'])
    >>> z = sp.Symbol("z")
    >>> d = derive(a * rho(b * x), [a, b], [x], {rho: sp.Lambda(z, z**2)})  # ρ = z²: checked, not assumed
    >>> d.laws, d.message
    ([a**2 - b**2/2], 'N = 1')
    >>> derive(a * rho(b * x), [a, b], [x], {rho: sp.Lambda(z, sp.tanh(z))}).message  # rule checked for tanh
    'N = 0'
    >>> d = derive(a * rho(b * x), [a, b], [x], {rho: "relu"})  # ρ(z) = ρ'(z) z
    >>> d.pde, d.laws, d.num_laws
    ([a*Derivative(h(a, b), b) + b*Derivative(h(a, b), a)], [a**2 - b**2], 1)
    """
    start = time.perf_counter()
    system = _x_free_system(f, params, inputs, identities, through, seed)
    theta = system.theta
    D = len(theta)
    h = generic_law(theta)
    pdes = [sp.Add(*(v * sp.Derivative(h, t) for v, t in zip(V, theta))) for V in system.fields]
    laws = _laws_by_component(system.fields, theta, seed)
    point = random_point(theta, seed + 1)
    law_rank = jacobian_rank(laws, theta, point)
    rank, ranks = lie_rank(system.fields, theta, point, target=D - law_rank) if system.fields else (0, [0])
    return Derivation(
        params=theta,
        conditions=system.conditions,
        shapes=dict(system.shapes.meaning),
        rule=system.rule,
        relations=system.relations,
        pde=pdes,
        fields=system.fields,
        laws=laws,
        law_rank=law_rank,
        lie_rank=rank,
        ranks_by_depth=ranks,
        num_laws=D - rank if rank == D - law_rank else None,
        seconds=time.perf_counter() - start,
        hypotheses=system.hypotheses,
    )


# ---------------------------------------------------------------- quadratic laws by linear algebra


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
    outputs, theta, x = _check_model(f, params, inputs)
    fields = [[sp.diff(fi, t) for t in theta] for fi in outputs]
    return _solve(fields, theta, x, seed=seed, include_products=include_products)


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
            cols.append([int(v) % _PRIME for v in fn(*(int(s) for s in points[:, p]))])
        return np.array(cols, dtype=np.int64).T.reshape(len(fields), -1, points.shape[1])

    return evaluate


def _is_rational_polynomial(fields: list[list[sp.Expr]], symbols: list[sp.Symbol]) -> bool:
    try:
        return all(sp.Poly(g, *symbols).domain in (sp.ZZ, sp.QQ) for V in fields for g in V if g != 0)
    except sp.PolynomialError:
        return False


def _rank_mod_p(A: np.ndarray) -> int:
    """Rank over F_p by Gaussian elimination on int64 residues (p < 2³¹, so products fit)."""
    A = A.copy() % _PRIME
    rank = 0
    for col in range(A.shape[1]):
        nonzero = np.nonzero(A[rank:, col])[0]
        if nonzero.size == 0:
            continue
        pivot = rank + nonzero[0]
        A[[rank, pivot]] = A[[pivot, rank]]
        A[rank, col:] = A[rank, col:] * pow(int(A[rank, col]), _PRIME - 2, _PRIME) % _PRIME
        below = A[rank + 1 :, col].copy()
        A[rank + 1 :, col:] = (A[rank + 1 :, col:] - below[:, None] * A[rank, col:] % _PRIME) % _PRIME
        rank += 1
        if rank == A.shape[0]:
            break
    return rank


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
        q = Fraction(c).limit_denominator(_MAX_DENOMINATOR)
        terms.append((sp.Rational(q.numerator, q.denominator) if abs(q - c) < 1e-7 else sp.Float(c)) * m)
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


def _solve(
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
    sample = rng.integers(0, _PRIME, size=(len(symbols), points), dtype=np.int64)
    while True:  # sparse fields (each touching few θ) need more points than n / #fields: add until tight
        Phi = _columns(sample[:D], evaluate(sample), modulus=_PRIME)
        bound = Phi.shape[1] - _rank_mod_p(Phi)
        if bound == found or sample.shape[1] > n + 4:
            break
        sample = np.concatenate([sample, rng.integers(0, _PRIME, size=sample.shape, dtype=np.int64)], axis=1)
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
