"""The condition ⟨∇h, ∇f⟩ = 0: ∇f, the generic law h, and the x-free system of PDEs a law must solve.

Steps 1–3 of the chain (:mod:`conslaw_lite.symbolic`): :func:`gradient`, :func:`orthogonality_condition`,
and :func:`x_free_system`, which puts shapes in place of the undefined activations (identities first,
:mod:`conslaw_lite.symbolic.activation_rules`), sets every coefficient of the condition to 0 by the
independence rule and returns the fields ``V(θ)`` with ``Σ_k V_k ∂_k h = 0``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import sympy as sp
from sympy.core.function import AppliedUndef
from sympy.polys.constructor import construct_domain
from sympy.polys.matrices import DomainMatrix

from conslaw_lite.symbolic.activation_rules import Hypothesis, Shapes, rule_for
from conslaw_lite.symbolic.lie_exact import random_point

INDEPENDENCE_TOL = 1e-7  # σ_min/σ_max of a concrete ρ's monomials below which they are not independent


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


def check_model(
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


def x_free_system(
    f: object, params: object, inputs: object, identities: object = None, through: object = None, seed: int = 0
) -> _System:
    """Steps 1–4 of :func:`derive`: gradient, shapes, independence, the x-free PDE system."""
    outputs = _outputs(f)
    theta, x = _symbols(params, "params"), _symbols(inputs, "inputs")
    through = _check_through(through, theta, x)
    check_model([sp.Add(*outputs), *through.values()], theta, x + list(through), absent_ok=True)
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

