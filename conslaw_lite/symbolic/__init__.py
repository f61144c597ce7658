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
   :mod:`conslaw_lite.symbolic.activation_rules`), every coefficient of the condition set to 0 by the
   independence rule, the x-free PDE system (steps 3–4 above, generalized: :func:`pde` and
   :func:`characteristics` run the same code), its exact quadratic laws and the exact count
   ``N = D − dim Lie`` (:mod:`conslaw_lite.symbolic.lie_exact`). What a rule assumes (an undefined ρ
   satisfying the independence rule) is a typed hypothesis of the result, "N = 0 if ...";
   a ρ given as ``sp.Lambda(z, expr)`` is checked instead. The blocks of the book, written for
   it, are in :mod:`conslaw_lite.symbolic.cases`.


Modules, in the order of the chain: :mod:`.condition` (steps 1–3 and the x-free system),
:mod:`.quadratic` (step 5), :mod:`.derive` (steps 4 and 6), with :mod:`.activation_rules` (the
shapes an activation's identities leave) and :mod:`.lie_exact` (exact ranks mod p).
"""

from conslaw_lite.symbolic.condition import INDEPENDENCE_TOL, generic_law, gradient, orthogonality_condition
from conslaw_lite.symbolic.derive import Characteristics, Derivation, characteristics, derive, pde, short
from conslaw_lite.symbolic.quadratic import LawSearch, find_quadratic_laws, quadratic_laws

__all__ = [
    "INDEPENDENCE_TOL",
    "Characteristics",
    "Derivation",
    "LawSearch",
    "characteristics",
    "derive",
    "find_quadratic_laws",
    "generic_law",
    "gradient",
    "orthogonality_condition",
    "pde",
    "quadratic_laws",
    "short",
]
