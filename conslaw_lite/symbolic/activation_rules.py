"""Shapes: what an activation, a softmax or a gate becomes in the paper's derivation.

The condition ``⟨∇h, ∇_θ f(x; θ)⟩ = 0`` of a block contains non-polynomial functions
of x: ``ρ(B_i·x)`` and ``ρ′(B_i·x)`` for an activation ρ, softmax entries for attention,
gate values for a mixture of experts. The paper replaces each of them by a symbol, a
*shape*, and argues that the shapes are linearly independent over the polynomials in x,
so that the condition vanishes for all x only if the coefficient of every monomial in
(shapes, x) does. Identities between shapes (ReLU's ``ρ(z) = ρ′(z)·z``, a softmax row
summing to 1) must be used first: they merge shapes, and merged shapes are where extra
laws come from.

A :class:`ShapeRule` says, for one undefined sympy ``Function``, what an application
``φ(args)`` and each partial derivative ``∂_a φ(args)`` become, and the one-line text of
the independence rule with its source. :func:`rule_for` turns the ``identities`` argument
of :func:`conslaw_lite.symbolic.derive` into rules:

* nothing (the default): independent shapes ``s``, ``t`` (GELU, SiLU: proved in the paper);
* ``"relu"``: ``ρ(z) = ρ′(z)·z``; ``"linear"``: ``ρ(z) = z``;
* ``sp.Eq(ρ(z), rhs)``: any identity of that form, ``rhs`` in z and ``ρ′(z)``;
* ``"softmax"``: entries ``φ(s, z_0, ..., z_{n−1})`` of a softmax over the logits z
  (the first argument is the entry's index);
* ``"normalized_sigmoid"``: gates ``φ(e, z_0, ...) = ρ(z_e) / Σ_j ρ(z_j)``;
* ``sp.Lambda(z, expr)``: ρ *is* ``expr``. A polynomial is substituted (no shape remains, exact);
  a ρ homogeneous of degree p (``z·ρ′ = p·ρ``, checked symbolically on z > 0 and z < 0: z·|z|,
  ReLU as ``Max(z, 0)``) gets the identity ``ρ(z) = z·ρ′(z)/p``, which keeps one law per unit;
  any other ρ (tanh, erf-GELU, SiLU) gets independent shapes. Either way the independence of the
  shapes that remain is then *checked* for that ρ on the block (:func:`conslaw_lite.symbolic.derive`).

What a rule leaves unproved is a :class:`Hypothesis` (``ShapeRule.hypothesis``): an undefined ρ
with no identity is *assumed* to satisfy the independence rule, which fails for a homogeneous ρ
(ρ = z² keeps one law per hidden unit, where the rule gives none), so a count derived under it
holds only if ρ does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import sympy as sp
from sympy.core.function import AppliedUndef

INDEPENDENT = (
    "ρ(B_i·x) and ρ′(B_i·x), for the distinct rows B_i, are linearly independent over the "
    "polynomials in x, so every coefficient vanishes (proved in the paper for GELU and SiLU: "
    "pole orders of the meromorphic continuation on lines x = t·e_j)"
)
RELU = (
    "identity ρ(z) = ρ′(z)·z (ReLU, exact) merges ρ into ρ′; the remaining shapes ρ′(B_i·x), "
    "indicators of distinct half-spaces, are independent over the polynomials in x (stated assumption)"
)
LINEAR = "identity ρ(z) = z, ρ′ = 1 (linear, exact): no shape remains, the condition is a polynomial in x"
SOFTMAX = (
    "softmax entries p_s = e^{z_s}/Σ_u e^{z_u}: derivative identity ∂p_s/∂z_u = p_s(δ_su − p_u) and "
    "row sum Σ_s p_s = 1 (both exact); after the last entry of each row is eliminated, the monomials "
    "in the others are independent over the polynomials in x (stated assumption: ratios of exponentials "
    "of distinct polynomials in x)"
)
NORMALIZED_SIGMOID = (
    "normalized sigmoid gates g_e = σ_e/Σ_j σ_j with σ_e = σ(z_e): σ′ = σ(1 − σ) (exact), so "
    "∂g_e/∂z_u = g_e(δ_eu(1 − σ_e) − g_u(1 − σ_u)); monomials in the σ_e are independent over "
    "the polynomials in x (stated assumption)"
)


class Shapes:
    """The shape symbols met so far, one per (kind, application), and the eliminations they need.

    ``meaning[s]`` is what symbol ``s`` stands for (``ρ(B_11*x_1)``, ``ρ'(B_11*x_1)``, ...);
    ``eliminate`` maps a symbol to its expression in the others (a softmax row's last entry).
    """

    def __init__(self) -> None:
        self.meaning: dict[sp.Symbol, sp.Expr] = {}
        self.eliminate: dict[sp.Symbol, sp.Expr] = {}
        self._by_key: dict[tuple, sp.Symbol] = {}
        self._counts: dict[str, int] = {}

    def symbol(self, letter: str, meaning: sp.Expr, key: tuple | None = None) -> sp.Symbol:
        """The symbol ``letter_n`` for ``meaning`` (the same one each time the same key is asked for)."""
        key = (letter, meaning) if key is None else key
        if key not in self._by_key:
            self._counts[letter] = self._counts.get(letter, 0) + 1
            s = sp.Symbol(f"{letter}_{self._counts[letter]}", real=True)
            self._by_key[key] = s
            self.meaning[s] = meaning
        return self._by_key[key]


@dataclass(frozen=True)
class Hypothesis:
    """What a derived count assumes about one undefined function: it holds only if ``statement`` does.

    ``function`` is the function's name (``"rho"``), ``rule`` the :class:`ShapeRule`'s name.
    """

    function: str
    rule: str
    statement: str


@dataclass(frozen=True)
class ShapeRule:
    """What ``φ(args)`` and ``∂_a φ(args)`` become (:class:`Shapes` allocates the symbols), and why.

    ``text`` is the independence rule used, with its source (proved in the paper, or assumed);
    ``hypothesis`` what of it is assumed (``None``: nothing, the rule is exact); ``concrete``, for a
    ρ given as an expression, the functions that evaluate the shapes' meanings (ρ and ρ′ as
    ``sp.Lambda``), with which :func:`conslaw_lite.symbolic.derive` checks the hypothesis
    instead of assuming it.
    """

    name: str
    text: str
    value: Callable[[AppliedUndef, Shapes], sp.Expr]
    derivative: Callable[[AppliedUndef, int, Shapes], sp.Expr]
    needs_single_argument: bool = field(default=True)
    hypothesis: Hypothesis | None = None
    concrete: dict[sp.FunctionClass, sp.Lambda] = field(default_factory=dict)


def _prime(app: AppliedUndef) -> sp.Expr:
    """``ρ′(z)``, as a key and a readable meaning for the shape t (sympy's own form is a ``Subs``)."""
    return sp.Function(f"{app.func}′")(app.args[0])


def _independent() -> ShapeRule:
    return ShapeRule(
        "independent",
        INDEPENDENT,
        lambda app, sh: sh.symbol("s", app),
        lambda app, a, sh: sh.symbol("t", _prime(app)),
    )


def _from_identity(identity: sp.Eq, fn: sp.FunctionClass, name: str, text: str) -> ShapeRule:
    """``ρ(z) = rhs(z, ρ′(z))``: ρ is replaced by rhs; ρ′ by a shape t unless rhs fixes it (no ρ′ in rhs)."""
    lhs, rhs = identity.lhs, identity.rhs
    if not (isinstance(lhs, AppliedUndef) and lhs.func == fn and len(lhs.args) == 1 and lhs.args[0].is_Symbol):
        raise ValueError(f"an identity for {fn} must read Eq({fn}(z), rhs) with z a symbol, got {identity}")
    z = lhs.args[0]
    derivatives = [d for d in rhs.atoms(sp.Derivative) if d.expr.func == fn]
    if rhs.has(fn(z)) and not derivatives:
        raise ValueError(f"the identity {identity} keeps {fn}(z) on its right side: nothing is eliminated")

    def value(app: AppliedUndef, sh: Shapes) -> sp.Expr:
        t = sh.symbol("t", _prime(app))
        out = rhs.subs({d: t for d in derivatives})
        return out.subs(z, app.args[0])

    def derivative(app: AppliedUndef, a: int, sh: Shapes) -> sp.Expr:
        if derivatives:
            return sh.symbol("t", _prime(app))
        return sp.diff(rhs, z).subs(z, app.args[0])

    return ShapeRule(name, text, value, derivative)


def _row(app: AppliedUndef) -> tuple[int, tuple[sp.Expr, ...]]:
    index, *logits = app.args
    if not (index.is_Integer and 0 <= index < len(logits)):
        raise ValueError(f"{app}: the first argument must be the entry's index 0..{len(logits) - 1}")
    return int(index), tuple(logits)


def _softmax() -> ShapeRule:
    """Entries ``φ(s, z)`` get symbols ``p_n``; the last entry of each row is eliminated by the row sum."""

    def entry(fn: sp.FunctionClass, s: int, z: tuple, sh: Shapes) -> sp.Symbol:
        symbols = [sh.symbol("p", fn(u, *z)) for u in range(len(z))]
        sh.eliminate[symbols[-1]] = 1 - sp.Add(*symbols[:-1])  # Σ_s p_s = 1
        return symbols[s]

    def value(app: AppliedUndef, sh: Shapes) -> sp.Expr:
        s, z = _row(app)
        return entry(app.func, s, z, sh)

    def derivative(app: AppliedUndef, a: int, sh: Shapes) -> sp.Expr:
        s, z = _row(app)
        u = a - 1  # argument a is logit z_{a−1}
        p = [entry(app.func, v, z, sh) for v in range(len(z))]
        return p[s] * ((1 if u == s else 0) - p[u])

    return ShapeRule("softmax", SOFTMAX, value, derivative, needs_single_argument=False)


def _normalized_sigmoid() -> ShapeRule:
    """Gates ``φ(e, z) = σ_e / Σ_j σ_j`` in the sigmoid shapes ``σ_j = σ(z_j)`` (symbols ``q_n``)."""

    def sigmoids(z: tuple, sh: Shapes) -> list[sp.Symbol]:
        return [sh.symbol("q", sp.Function("sigmoid")(zj)) for zj in z]

    def gate(e: int, z: tuple, sh: Shapes) -> sp.Expr:
        q = sigmoids(z, sh)
        return q[e] / sp.Add(*q)

    def value(app: AppliedUndef, sh: Shapes) -> sp.Expr:
        e, z = _row(app)
        return gate(e, z, sh)

    def derivative(app: AppliedUndef, a: int, sh: Shapes) -> sp.Expr:
        e, z = _row(app)
        u, q = a - 1, sigmoids(z, sh)
        return gate(e, z, sh) * ((1 - q[e] if u == e else 0) - gate(u, z, sh) * (1 - q[u]))

    return ShapeRule("normalized_sigmoid", NORMALIZED_SIGMOID, value, derivative, needs_single_argument=False)


def _hypothesis(fn: sp.FunctionClass, rule: str) -> Hypothesis | None:
    """What the named rule leaves assumed about ``fn`` (its text says "stated assumption" or "proved for")."""
    statements = {
        "independent": f"{fn} satisfies the independence rule: {fn}(B_i·x) and {fn}′(B_i·x) are linearly "
        "independent over the polynomials in x (proved for GELU and SiLU; false for a homogeneous "
        f"{fn} such as z², z·|z| or ReLU, which keep one law per unit; give {fn} as sp.Lambda(z, ...) to "
        "have it checked)",
        "relu": f"the shapes {fn}′(B_i·x) left by ReLU's identity are linearly independent over the "
        "polynomials in x (stated assumption)",
        "identity": f"the shapes left by the identity given for {fn} are linearly independent over the "
        "polynomials in x (assumed)",
        "softmax": f"the monomials in the softmax entries {fn} are linearly independent over the polynomials "
        "in x (stated assumption)",
        "normalized_sigmoid": f"the monomials in the sigmoids of the gates {fn} are linearly independent over "
        "the polynomials in x (stated assumption)",
    }
    return Hypothesis(str(fn), rule, statements[rule]) if rule in statements else None


def _with_hypothesis(rule: ShapeRule, fn: sp.FunctionClass) -> ShapeRule:
    return ShapeRule(rule.name, rule.text, rule.value, rule.derivative, rule.needs_single_argument,
                     _hypothesis(fn, rule.name))  # fmt: skip


def _concrete(fn: sp.FunctionClass, given: sp.Lambda) -> ShapeRule:
    """ρ given as ``sp.Lambda(z, expr)``: substituted if a polynomial, else shapes whose independence is checked."""
    z = _Z
    expr = given(z)
    slope = sp.diff(expr, z)
    prime = sp.Function(f"{fn}′")
    concrete = {fn: sp.Lambda(z, expr), prime: sp.Lambda(z, slope)}
    if expr.is_polynomial(z):
        text = f"{fn}(z) = {expr} (given), a polynomial, substituted: no shape left, the condition is polynomial in x"
        return ShapeRule("polynomial", text, lambda app, sh: expr.subs(z, app.args[0]),
                         lambda app, a, sh: slope.subs(z, app.args[0]))  # fmt: skip
    p = homogeneous_degree(expr, z)
    statement = (
        f"the shapes {fn}(B_i·x), {fn}′(B_i·x) of {fn}(z) = {expr} are linearly independent over the "
        "polynomials in x"
    )
    if p is not None:
        identity = sp.Eq(fn(z), z * sp.Derivative(fn(z), z) / p)
        text = (
            f"{fn}(z) = {expr} (given) is homogeneous of degree {p}: identity {fn}(z) = z·{fn}′(z)/{p} "
            f"(checked: z·{fn}′ − {p}·{fn} simplifies to 0 for z > 0 and z < 0); the shapes {fn}′(B_i·x) "
            "that remain are checked linearly independent over the polynomials in x on the block"
        )
        base = _from_identity(identity, fn, "homogeneous", text)
    else:
        text = (
            f"{fn}(z) = {expr} (given), not homogeneous: the shapes {fn}(B_i·x), {fn}′(B_i·x) are checked "
            "linearly independent over the polynomials in x on the block"
        )
        base = ShapeRule("checked", text, _independent().value, _independent().derivative)
    return ShapeRule(base.name, base.text, base.value, base.derivative, True,
                     Hypothesis(str(fn), base.name, statement), concrete)  # fmt: skip


def homogeneous_degree(expr: sp.Expr, z: sp.Symbol) -> sp.Rational | None:
    """The degree p of a ρ(z) with ``z·ρ′(z) = p·ρ(z)`` (Euler's identity), checked symbolically; else ``None``.

    p is read off ``z·ρ′/ρ`` at a few points, then ``z·ρ′ − p·ρ`` must simplify to 0 for z > 0
    and for z < 0 (so |z|, sign, Max and Heaviside resolve).

    Examples
    ========
    >>> z = sp.Symbol("z", real=True)
    >>> homogeneous_degree(z * sp.Abs(z), z), homogeneous_degree(sp.Max(z, 0), z), homogeneous_degree(sp.tanh(z), z)
    (2, 1, None)
    """
    slope = z * sp.diff(expr, z)
    values = []
    for v in (sp.Rational(7, 10), sp.Rational(13, 10), sp.Rational(-9, 5), sp.Rational(-1, 3)):
        try:
            num, den = complex(slope.subs(z, v).evalf()), complex(expr.subs(z, v).evalf())
        except (TypeError, ValueError, ZeroDivisionError):
            return None
        if den != 0:  # ReLU is 0 for z < 0: no ratio there, the symbolic check below covers it
            values.append(num / den)
    if not values or any(not math.isfinite(v.real) or abs(v.imag) > 1e-12 for v in values):
        return None
    p = sp.nsimplify(values[0].real, rational=True, tolerance=1e-12)
    if p == 0 or any(abs(v.real - float(p)) > 1e-9 * abs(float(p)) for v in values):
        return None
    u = sp.Symbol("u", positive=True)
    residual = z * sp.diff(expr, z) - p * expr
    if all(sp.simplify(residual.subs(z, side)) == 0 for side in (u, -u)):
        return p
    return None


_NAMED: dict[str, Callable[[sp.FunctionClass], ShapeRule]] = {
    "independent": lambda fn: _independent(),
    "relu": lambda fn: _from_identity(sp.Eq(fn(_Z), _Z * sp.Derivative(fn(_Z), _Z)), fn, "relu", RELU),
    "linear": lambda fn: _from_identity(sp.Eq(fn(_Z), _Z), fn, "linear", LINEAR),
    "softmax": lambda fn: _softmax(),
    "normalized_sigmoid": lambda fn: _normalized_sigmoid(),
}
_Z = sp.Symbol("z", real=True)


def rule_for(fn: sp.FunctionClass, identity: object = None) -> ShapeRule:
    """The :class:`ShapeRule` of the undefined function ``fn`` under ``identity``.

    ``identity`` is ``None`` (independent shapes, an assumption: ``.hypothesis``), one of
    ``"relu"``, ``"linear"``, ``"softmax"``, ``"normalized_sigmoid"``, ``sp.Eq(fn(z), rhs)``,
    or ``sp.Lambda(z, expr)``: fn is that function, and what it implies is checked.

    Examples
    ========
    >>> import sympy as sp
    >>> rho, x = sp.Function("rho"), sp.Symbol("x")
    >>> sh = Shapes()
    >>> rule_for(rho, "relu").value(rho(2 * x), sh)  # ρ(z) = ρ'(z)·z
    2*t_1*x
    >>> sh.meaning[sp.Symbol("t_1", real=True)]
    rho′(2*x)
    >>> rule_for(rho).value(rho(2 * x), sh)
    s_1
    >>> rule_for(rho).hypothesis.statement[:40]
    'rho satisfies the independence rule: rho'
    >>> z = sp.Symbol("z")
    >>> rule_for(rho, sp.Lambda(z, z**2)).value(rho(2 * x), sh), rule_for(rho, sp.Lambda(z, z**2)).hypothesis
    (4*x**2, None)
    """
    if identity is None:
        identity = "independent"
    if isinstance(identity, sp.Lambda):
        if len(identity.variables) != 1 or not identity.expr.free_symbols <= set(identity.variables):
            raise ValueError(f"an expression for {fn} must be sp.Lambda(z, expr) in the one variable z, got {identity}")
        return _concrete(fn, identity)
    if isinstance(identity, sp.Eq):
        rule = _from_identity(
            identity, fn, "identity", f"identity {identity} (given), remaining shapes assumed independent"
        )
        return _with_hypothesis(rule, fn)
    if isinstance(identity, str) and identity in _NAMED:
        return _with_hypothesis(_NAMED[identity](fn), fn)
    raise ValueError(
        f"identity for {fn} must be None, one of {sorted(_NAMED)}, sp.Eq({fn}(z), rhs) or sp.Lambda(z, expr), "
        f"got {identity!r}"
    )
