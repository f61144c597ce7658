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
* ``"normalized_sigmoid"``: gates ``φ(e, z_0, ...) = ρ(z_e) / Σ_j ρ(z_j)``.
"""

from __future__ import annotations

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
class ShapeRule:
    """What ``φ(args)`` and ``∂_a φ(args)`` become (:class:`Shapes` allocates the symbols), and why.

    ``text`` is the independence rule used, with its source (proved in the paper, or assumed).
    """

    name: str
    text: str
    value: Callable[[AppliedUndef, Shapes], sp.Expr]
    derivative: Callable[[AppliedUndef, int, Shapes], sp.Expr]
    needs_single_argument: bool = field(default=True)


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

    ``identity`` is ``None`` (independent shapes), one of ``"relu"``, ``"linear"``,
    ``"softmax"``, ``"normalized_sigmoid"``, or ``sp.Eq(fn(z), rhs)``.

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
    """
    if identity is None:
        identity = "independent"
    if isinstance(identity, sp.Eq):
        return _from_identity(
            identity, fn, "identity", f"identity {identity} (given), remaining shapes assumed independent"
        )
    if isinstance(identity, str) and identity in _NAMED:
        return _NAMED[identity](fn)
    raise ValueError(
        f"identity for {fn} must be None, one of {sorted(_NAMED)} or sp.Eq({fn}(z), rhs), got {identity!r}"
    )
