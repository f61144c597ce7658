"""The derivation: the x-free PDE system's characteristics, its laws and the exact count N = D − dim Lie.

:func:`pde` and :func:`characteristics` (steps 3–4 of chapter 1) and :func:`derive` (step 6) run the
same code: :func:`conslaw_lite.symbolic.condition.x_free_system` gives the fields, the laws are
solved for by :func:`conslaw_lite.symbolic.quadratic.solve_quadratic`, one connected group of
parameters at a time, and the count is exact (:mod:`conslaw_lite.symbolic.lie_exact`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import sympy as sp
from sympy.core.function import AppliedUndef

from conslaw_lite.symbolic.activation_rules import Hypothesis
from conslaw_lite.symbolic.condition import generic_law, x_free_system
from conslaw_lite.symbolic.lie_exact import jacobian_rank, lie_rank, random_point
from conslaw_lite.symbolic.quadratic import solve_quadratic

# ---------------------------------------------------------------- input checks








# ---------------------------------------------------------------- the derivation, step by step








def _pde_fields(f: object, params: object, inputs: object) -> tuple[list[list[sp.Expr]], list[sp.Symbol]]:
    """The coefficient vectors V(θ) of the x-free PDEs ``Σ_k V_k ∂_k h = 0`` (see :func:`derive`)."""
    system = x_free_system(f, params, inputs)
    return system.fields, system.theta




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
    return Characteristics(t, systems, solve_quadratic(fields, theta, [], seed=0, include_products=False).laws)


# ---------------------------------------------------------------- shapes and the x-free system


























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
            laws += solve_quadratic(touching, sub, [], seed=seed, include_products=False).laws
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
    exact Lie rank, ``None`` when the two bounds of :mod:`conslaw_lite.symbolic.lie_exact` do not meet.

    ``hypotheses``: what the count assumes (:class:`~conslaw_lite.symbolic.activation_rules.Hypothesis`), e.g. that an
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
       ρ itself, ``sp.Lambda(z, expr)``); see :mod:`conslaw_lite.symbolic.activation_rules`;
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
       (:mod:`conslaw_lite.symbolic.lie_exact`).

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
    system = x_free_system(f, params, inputs, identities, through, seed)
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




































