"""conslaw_lite.symbolic: the derivation of chapter 1 and quadratic laws of any sympy model."""

from __future__ import annotations

import pytest
import sympy as sp

from conslaw_lite.families.ffn.symbolic import sympy_form
from conslaw_lite.symbolic import (
    characteristics,
    find_quadratic_laws,
    gradient,
    orthogonality_condition,
    pde,
    quadratic_laws,
)

a, b, c, x = sp.symbols("a b c x")


def in_span(h: sp.Expr, basis: list[sp.Expr], params: list[sp.Symbol]) -> bool:
    """Is the quadratic polynomial h a linear combination of the basis? (exact, over Q)"""
    monomials = sorted({m for e in [h, *basis] for m in sp.Poly(e, *params).monoms()})
    column = lambda e: [sp.Poly(e, *params).coeff_monomial(m) for m in monomials]  # noqa: E731
    M = sp.Matrix([column(e) for e in basis]).T if basis else sp.zeros(len(monomials), 0)
    return M.rank() == M.row_join(sp.Matrix(column(h))).rank()


def test_the_toy_derivation_step_by_step() -> None:
    f = a * b * x
    assert gradient(f, [a, b]) == [b * x, a * x]
    assert orthogonality_condition(f, [a, b], a**2 - b**2) == 0
    assert sp.expand(orthogonality_condition(f, [a, b], a**2 + b**2)) == 4 * a * b * x
    h = sp.Function("h")(a, b)
    (equation,) = pde(f, [a, b], [x])
    assert x not in equation.free_symbols
    assert sp.expand(equation - (b * sp.Derivative(h, a) + a * sp.Derivative(h, b))) == 0
    ch = characteristics(f, [a, b], [x])
    t = ch.t
    A, B = sp.Function("a")(t), sp.Function("b")(t)
    assert ch.systems == [[sp.Eq(sp.Derivative(A, t), B), sp.Eq(sp.Derivative(B, t), A)]]
    assert ch.invariants == [a**2 - b**2]
    # the invariant is constant along the characteristic solution a = cosh t, b = sinh t (a² − b² = 1)
    along = ch.invariants[0].subs({a: sp.cosh(t), b: sp.sinh(t)})
    assert sp.simplify(along) == 1


def test_three_factors_one_pde_two_invariants() -> None:
    f = a * b * c * x
    assert len(pde(f, [a, b, c], [x])) == 1
    invariants = characteristics(f, [a, b, c], [x]).invariants
    assert len(invariants) == 2
    for h in (a**2 - b**2, a**2 - c**2, b**2 - c**2):
        assert in_span(h, invariants, [a, b, c])


@pytest.mark.parametrize(
    ("f", "params", "count"),
    [(a * b * x, [a, b], 1), (a * b * c * x, [a, b, c], 2), (a * x + b * x, [a, b], 1)],
)
def test_number_of_quadratic_laws(f: sp.Expr, params: list[sp.Symbol], count: int) -> None:
    laws = quadratic_laws(f, params, [x])
    assert len(laws) == count
    for h in laws:
        assert sp.expand(orthogonality_condition(f, params, h)) == 0


def test_non_laws_are_rejected() -> None:
    laws = quadratic_laws(a * b * x, [a, b], [x])
    assert in_span(a**2 - b**2, laws, [a, b])
    for non_law in (a**2 + b**2, a * b, a**2, a - b):
        assert not in_span(non_law, laws, [a, b])
    # a linear law exists for f = (a + b)x: a − b
    assert in_span(a - b, quadratic_laws(a * x + b * x, [a, b], [x]), [a, b])


def test_vector_output_linear_net_has_r_r_plus_1_over_2_laws() -> None:
    """f = W2 W1 x with 2×2 weights: the laws are the entries of W1 W1ᵀ − W2ᵀ W2, r(r+1)/2 = 3."""
    W1, W2 = sp.Matrix(2, 2, sp.symbols("u:4")), sp.Matrix(2, 2, sp.symbols("w:4"))
    X = sp.Matrix(sp.symbols("x:2"))
    params = list(W1) + list(W2)
    found = find_quadratic_laws(list(W2 * W1 * X), params, list(X))
    assert found.exact and len(found.laws) == 2 * 3 // 2
    for h in W1 * W1.T - W2.T * W2:
        assert in_span(h, found.laws, params)
    assert not in_span((W1 * W1.T)[0, 0], found.laws, params)


def test_non_polynomial_models() -> None:
    """GELU (erf) has no quadratic law; SwiGLU keeps ‖A_:,i‖² − ‖C_i,:‖²; found numerically with a clear gap."""
    X = sp.Matrix(sp.symbols("x:2"))
    B, C, A = (sp.Matrix(2, 2, sp.symbols(f"{n}:4")) for n in "BCA")
    gelu = lambda z: z * (1 + sp.erf(z / sp.sqrt(2))) / 2  # noqa: E731
    silu = lambda z: z / (1 + sp.exp(-z))  # noqa: E731
    ffn = list(A * (B * X).applyfunc(gelu))
    assert quadratic_laws(ffn, list(A) + list(B), list(X)) == []

    u, v = (B * X).applyfunc(silu), C * X
    swiglu = list(A * sp.Matrix([u[i] * v[i] for i in range(2)]))
    params = list(A) + list(B) + list(C)
    found = find_quadratic_laws(swiglu, params, list(X))
    assert not found.exact and len(found.laws) == 2
    assert found.sigma_dropped < 1e-12 < 1e-6 < found.sigma_kept
    for i in range(2):
        assert in_span((A[:, i].T * A[:, i])[0] - (C[i, :] * C[i, :].T)[0], found.laws, params)
    assert not in_span((A[:, 0].T * A[:, 0])[0] - (B[0, :] * B[0, :].T)[0], found.laws, params)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("d", "r", "m"), [(2, 2, 2), (1, 2, 1), (2, 2, 1)])
def test_relu_ffn_has_one_law_per_unit(d: int, r: int, m: int, seed: int) -> None:
    """ReLU (sympy Max) is positively homogeneous: exactly the r laws ‖A_:,i‖² − ‖B_i,:‖², on every region."""
    f, params, xs = sympy_form("relu", d, r, m)
    A = sp.Matrix(m, r, params[: m * r])
    B = sp.Matrix(r, d, params[m * r :])
    found = find_quadratic_laws(f, params, xs, seed=seed)
    assert not found.exact and len(found.laws) == r
    for i in range(r):
        assert in_span((A[:, i].T * A[:, i] - B[i, :] * B[i, :].T)[0], found.laws, params)
    # the linear net's extra laws (A^T A - B B^T off the diagonal) hold only where both units are on
    assert not in_span((A[:, 0].T * A[:, 1] - B[0, :] * B[1, :].T)[0], found.laws, params)
    assert not in_span((A[:, 0].T * A[:, 0] - B[1, :] * B[1, :].T)[0], found.laws, params)  # units mixed up


@pytest.mark.parametrize("seed", range(12))
def test_a_small_activation_region_is_not_missed(seed: int) -> None:
    """c·d·max(x − 1, 0) is active on a sixth of the inputs; off it, any quadratic in c, d looks like a law."""
    d = sp.Symbol("d")
    f = a * b * x + c * d * sp.Max(0, x - 1)
    laws = quadratic_laws(f, [a, b, c, d], [x], seed=seed)
    assert len(laws) == 2
    for h in (a**2 - b**2, c**2 - d**2):
        assert in_span(h, laws, [a, b, c, d])


def test_softmax_gate_rows_sum_is_a_linear_law() -> None:
    """softmax over two gate logits w_e·x is invariant under w_e → w_e + v: w_1 + w_2 (per coordinate) is kept."""
    w = sp.Matrix(2, 2, sp.symbols("w:4"))  # rows = gates
    X = sp.Matrix(sp.symbols("x:2"))
    logits = w * X
    gate = [sp.exp(logits[e]) / (sp.exp(logits[0]) + sp.exp(logits[1])) for e in range(2)]
    experts = [sp.Symbol("e0"), sp.Symbol("e1")]
    f = gate[0] * experts[0] * X[0] + gate[1] * experts[1] * X[1]
    params = list(w) + experts
    laws = quadratic_laws(f, params, list(X))
    assert len(laws) == 2
    for j in range(2):
        assert in_span(w[0, j] + w[1, j], laws, params)
    # products of laws are laws: the whole space adds (w0+w2)², (w0+w2)(w1+w3), (w1+w3)²
    everything = quadratic_laws(f, params, list(X), include_products=True)
    assert len(everything) == 2 + 3
    assert in_span(sp.expand((w[0, 0] + w[1, 0]) * (w[0, 1] + w[1, 1])), everything, params)


@pytest.mark.parametrize(
    ("f", "params", "inputs", "error", "names"),
    [
        (a * b * x, [a, b, c], [x], ValueError, "parameter c does not occur"),
        (a * b * x, [a, b, x], [x], ValueError, "x listed both as a parameter and as an input"),
        (lambda z: z, [a], [x], TypeError, "f must be a sympy expression"),
        ([a * x, 3.0], [a], [x], TypeError, "output 1 of f"),
        (a * b * x, ["a", b], [x], TypeError, "'a' is a str"),
        (a * b * c * x, [a, b], [x], ValueError, "contains c, which is neither"),
        (a * b * x, [a, b], x, TypeError, "inputs must be a list"),
        (a * b * x, [], [x], ValueError, "params is empty"),
    ],
)
def test_bad_input_is_named(f, params, inputs, error, names) -> None:
    with pytest.raises(error, match=names):
        quadratic_laws(f, params, inputs)


def test_pde_needs_a_model_polynomial_in_x() -> None:
    with pytest.raises(ValueError, match="not polynomial in the inputs"):
        pde(a * sp.exp(b * x), [a, b], [x])


def test_rank_mod_p_matches_the_exact_rank() -> None:
    """The completeness certificate rests on this rank; check it against sympy's exact rank."""
    import numpy as np

    from conslaw_lite.exact_linalg import rank_mod_p

    rng = np.random.default_rng(1)
    M = rng.integers(-5, 6, size=(7, 9))
    M[5] = M[0] + 2 * M[1]  # two dependent rows: rank 5
    M[6] = M[2] - M[3]
    assert rank_mod_p(M) == sp.Matrix(M.tolist()).rank() == 5
