"""Multi-head attention written out in sympy, for the symbolic chain at the smallest sizes.

Two forms: :func:`symbolic_attention` with an explicit softmax and exact RoPE angles (for
:func:`conslaw_lite.symbolic.quadratic_laws` and the condition of chapter 04), and
:func:`attention_block` with the softmax entries undefined and each head seen through
``M_i = Q_iK_iᵀ``, ``N_i = V_iO_iᵀ`` (for :func:`conslaw_lite.symbolic.derive`, whose cases are
:func:`case`).

The same block as :class:`~conslaw_lite.families.attention.block.MultiHeadAttention`, one
expression per output entry: head i maps tokens X ∈ R^(T×d) to
``softmax(X Q_i R K_iᵀ Xᵀ/√k) X V_i O_iᵀ``. With RoPE, the score of query p and key s
is ``x_pᵀ Q_i R_{s−p} K_iᵀ x_s`` with R_Δ block-diagonal, block j a rotation by
``Δ·ω_j``; the angles are kept exact (``cos(1)``, not 0.5403...).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import sympy as sp
from torch import nn

from conslaw_lite.families.attention.block import MultiHeadAttention
from conslaw_lite.families.attention.laws import formula
from conslaw_lite.symbolic.cases import Case, SymbolicBlock, symbol_matrix

SOFTMAX = sp.Function("softmax")  # softmax(s, *scores): entry s of a row's softmax, an undefined function


@dataclass(frozen=True)
class SymbolicAttention:
    """``outputs`` (T·d expressions, row-major), ``params``, ``inputs``, each head's matrices by name,
    and each head's (T, T) matrix of scores ``x_pᵀ Q_i R_{s−p} K_iᵀ x_s / √k`` (polynomials in θ)."""

    outputs: list[sp.Expr]
    params: list[sp.Symbol]
    inputs: list[sp.Symbol]
    heads: list[dict[str, sp.Matrix]]
    scores: list[sp.Matrix]


def _rotation(delta: int, omegas: list[sp.Expr]) -> sp.Matrix:
    """R_Δ: block j turns by Δ·ω_j."""
    blocks = [
        sp.Matrix([[sp.cos(delta * w), -sp.sin(delta * w)], [sp.sin(delta * w), sp.cos(delta * w)]]) for w in omegas
    ]
    return sp.diag(*blocks)


def symbolic_attention(d: int, k: int, n_heads: int = 1, T: int = 2, pe: str = "none") -> SymbolicAttention:
    """Attention with symbolic Q_i, K_i, V_i, O_i (named ``Q{i}_rc`` ...) and tokens ``x_pc``.

    ``pe="rope"`` uses the frequencies ``ω_j = 3^(−j)`` (exact), so every block turns.

    Examples
    ========
    >>> sym = symbolic_attention(2, 2)
    >>> len(sym.outputs), len(sym.params), len(sym.inputs)
    (4, 16, 4)
    >>> sym.heads[0]["Q"][0, 1]
    Q0_01
    """
    if pe not in ("none", "rope"):
        raise ValueError(f"pe must be 'none' or 'rope', got {pe!r}")
    if pe == "rope" and k % 2:
        raise ValueError(f"RoPE needs an even head_dim, got {k}")
    X = symbol_matrix("x_", T, d, start=0)
    omegas = [sp.Integer(3) ** (-j) for j in range(k // 2)]
    heads = [{m: symbol_matrix(f"{m}{i}_", d, k, start=0) for m in "QKVO"} for i in range(n_heads)]
    Y, scores = sp.zeros(T, d), []
    for h in heads:
        rot = (lambda delta: _rotation(delta, omegas)) if pe == "rope" else (lambda delta: sp.eye(k))
        S = sp.Matrix(T, T, lambda p, s: (X[p, :] * h["Q"] * rot(s - p) * h["K"].T * X[s, :].T)[0] / sp.sqrt(k))
        scores.append(S)
        E = S.applyfunc(sp.exp)
        A = sp.Matrix(T, T, lambda p, s: E[p, s] / sum(E[p, :]))  # row softmax
        Y += A * X * h["V"] * h["O"].T  # (T, d)
    params = [s for h in heads for m in "QKVO" for s in h[m]]
    return SymbolicAttention(list(Y), params, list(X), heads, scores)


def qk_condition(sym: SymbolicAttention, h: sp.Expr) -> list[sp.Expr]:
    """``⟨∇h, ∇S_ps⟩`` expanded, for every score of every head.

    Q_i and K_i reach the outputs only through the scores S, so by the chain rule
    ``⟨∇h, ∇f⟩ = Σ_ps ∂f/∂S_ps ⟨∇h, ∇S_ps⟩``: a law h of Q and K alone that makes
    every entry here 0 is exactly a law of the block. The scores are polynomials, so
    ``expand`` decides it exactly (no softmax to simplify).

    Examples
    ========
    >>> sym = symbolic_attention(2, 2, pe="rope")
    >>> set(qk_condition(sym, closed_form_laws(sym, pe="rope")[0]))
    {0}
    """
    from conslaw_lite.symbolic import orthogonality_condition

    return [sp.expand(orthogonality_condition(S_ps, sym.params, h)) for S in sym.scores for S_ps in S]


def closed_form_laws(sym: SymbolicAttention, pe: str = "none") -> list[sp.Expr]:
    """The laws of chapters 04–05 as sympy expressions: the upper triangles of ``Q_iᵀQ_i − K_iᵀK_i``
    (RoPE: ``‖Q_i^(j)‖_F² − ‖K_i^(j)‖_F²`` per 2×2 block j) and of ``V_iᵀV_i − O_iᵀO_i``.

    Examples
    ========
    >>> closed_form_laws(symbolic_attention(1, 2, pe="rope"), pe="rope")[0]
    -K0_00**2 - K0_01**2 + Q0_00**2 + Q0_01**2
    """
    laws = []
    for h in sym.heads:
        k = h["Q"].shape[1]
        if pe == "rope":
            laws += [
                _square_norm(h["Q"][:, 2 * j : 2 * j + 2]) - _square_norm(h["K"][:, 2 * j : 2 * j + 2])
                for j in range(k // 2)
            ]
        else:
            laws += _upper(h["Q"].T * h["Q"] - h["K"].T * h["K"])
        laws += _upper(h["V"].T * h["V"] - h["O"].T * h["O"])
    return [sp.expand(law) for law in laws]


def _square_norm(M: sp.Matrix) -> sp.Expr:
    return sum(e**2 for e in M)


def _upper(M: sp.Matrix) -> list[sp.Expr]:
    return [M[r, c] for r in range(M.rows) for c in range(r, M.cols)]


def circle_point(k: int, seed: int) -> dict[sp.Symbol, sp.Rational]:
    """RoPE's cos/sin symbols ``c_j, s_j`` at a random rational point of the circle c² + s² = 1.

    ``c = (1 − u²)/(1 + u²)``, ``s = 2u/(1 + u²)`` for a random rational u ∈ (0, 1): exact, and every block turns.

    Examples
    ========
    >>> point = circle_point(2, seed=0)
    >>> [str(symbol) for symbol in point], sum(value**2 for value in point.values())
    (['c_1', 's_1'], 1)
    """
    rng = random.Random(seed)
    point = {}
    for j in range(k // 2):
        u = sp.Rational(rng.randint(1, 40), rng.randint(41, 97))
        c, s = sp.symbols(f"c_{j + 1} s_{j + 1}", real=True)
        point[c], point[s] = (1 - u**2) / (1 + u**2), 2 * u / (1 + u**2)
    return point


def rope_rotation(k: int, delta: int) -> sp.Matrix:
    """``R_Δ = R_1^Δ``: block j is the rotation ``[[c_j, −s_j], [s_j, c_j]]`` to the power Δ (c_j² + s_j² = 1).

    Examples
    ========
    >>> rope_rotation(2, -1)
    Matrix([
    [ c_1, s_1],
    [-s_1, c_1]])
    """
    blocks = []
    for j in range(k // 2):
        c, s = sp.symbols(f"c_{j + 1} s_{j + 1}", real=True)
        R = sp.Matrix([[c, -s], [s, c]])
        blocks.append(R**delta if delta >= 0 else (R.T) ** (-delta))  # R⁻¹ = Rᵀ on the circle
    return sp.diag(*blocks)


def attention_block(
    d: int, k: int, n_heads: int = 1, T: int = 2, pe: str = "none", bias: bool = False, seed: int = 0
) -> SymbolicBlock:
    """Multi-head attention ``Σ_i softmax(X M_i Xᵀ/√k) X N_i`` with ``M_i = Q_iK_iᵀ``, ``N_i = V_iO_iᵀ``.

    ``pe="sinusoidal"``: tokens ``x_p + π_p`` with the table entries ``π_pc`` kept as symbols
    and listed among the inputs (a law must hold for all x, hence for every table);
    ``pe="rope"``: scores ``x_p M_i^(s−p) x_sᵀ/√k`` with ``M_i^(Δ) = Q_i R_Δ K_iᵀ``, the
    rotation's cos/sin at a random rational point of the circle. ``bias=True``: q, k, v and
    the output get biases (``X̃ = [X, 1]``, ``Q̃_i = [Q_i; b_q,i]``, ...).

    Examples
    ========
    >>> b = attention_block(1, 1)
    >>> b.through
    {M1_11: K1_11*Q1_11, N1_11: O1_11*V1_11}
    >>> b.f[0]
    N1_11*x_11*softmax(0, M1_11*x_11**2, M1_11*x_11*x_21) + N1_11*x_21*softmax(1, M1_11*x_11**2, M1_11*x_11*x_21)
    """
    if pe not in ("none", "sinusoidal", "rope"):
        raise ValueError(f"pe must be 'none', 'sinusoidal' or 'rope', got {pe!r}")
    if pe == "rope" and (k % 2 or bias):
        raise ValueError("RoPE needs an even head_dim k and no biases here")
    X = symbol_matrix("x_", T, d)
    inputs = list(X)
    if pe == "sinusoidal":
        table = symbol_matrix("π_", T, d)
        X, inputs = X + table, inputs + list(table)
    if bias:
        X = X.row_join(sp.ones(T, 1))  # X̃ = [X, 1]
    circle = circle_point(k, seed) if pe == "rope" else {}
    params, through, entries, outputs = [], {}, {}, sp.zeros(T, d)
    for i in range(n_heads):
        W = {m: symbol_matrix(f"{m}{i + 1}_", d, k) for m in "QKVO"}
        params += [s for m in "QKVO" for s in W[m]]
        for m in "QKV":  # Q.weight rows i·k..: Q_i = Q.weight[i·k:(i+1)·k, :]ᵀ
            entries.update({W[m][a, b]: (f"{m}.weight", (i * k + b, a)) for a in range(d) for b in range(k)})
        entries.update({W["O"][a, b]: ("O.weight", (a, i * k + b)) for a in range(d) for b in range(k)})
        if bias:
            for m in "QKV":
                b_m = sp.Matrix(1, k, lambda _, c, m=m: sp.Symbol(f"b{m.lower()}{i + 1}_{c + 1}", real=True))
                params += list(b_m)
                entries.update({b_m[c]: (f"{m}.bias", (i * k + c,)) for c in range(k)})
                W[m] = W[m].col_join(b_m)
        offsets = range(-(T - 1), T) if pe == "rope" else [0]
        M = {}
        for delta in offsets:
            name = f"M{i + 1}_" if pe != "rope" else f"M{i + 1}^({delta})_"
            M[delta] = symbol_matrix(name, W["Q"].rows, W["K"].rows)
            product = W["Q"] * rope_rotation(k, delta) * W["K"].T if pe == "rope" else W["Q"] * W["K"].T
            through.update({M[delta][a, b]: sp.expand(product[a, b].xreplace(circle)) for a in range(M[delta].rows)
                            for b in range(M[delta].cols)})  # fmt: skip
        N = symbol_matrix(f"N{i + 1}_", W["V"].rows, d)
        through.update({N[a, b]: sp.expand((W["V"] * W["O"].T)[a, b]) for a in range(N.rows) for b in range(d)})
        scale = 1 / sp.sqrt(k)
        S = sp.Matrix(T, T, lambda p, s: (X[p, :] * M[s - p if pe == "rope" else 0] * X[s, :].T)[0] * scale)
        values = X * N  # (T, d)
        for p in range(T):
            for s in range(T):
                outputs[p, :] += SOFTMAX(s, *S.row(p)) * values[s, :]
    if bias:
        b_o = sp.Matrix(1, d, lambda _, c: sp.Symbol(f"bo_{c + 1}", real=True))
        params += list(b_o)
        entries.update({b_o[c]: ("O.bias", (c,)) for c in range(d)})
        outputs += sp.ones(T, 1) * b_o
    note = f"RoPE rotation at c, s = {circle}" if circle else ""
    return SymbolicBlock(list(outputs), params, inputs, {SOFTMAX: "softmax"}, through, entries, note)


def attention_module(d: int, k: int, n_heads: int = 1, pe: str = "none", bias: bool = False) -> nn.Module:
    """The torch block of :func:`attention_block` (float64).

    Examples
    ========
    >>> attention_module(2, 2, 2).head(1)["Q"].shape
    torch.Size([2, 2])
    """
    return MultiHeadAttention(d, n_heads, k, pe=pe, bias=bias).double()


def rope_commutant(k: int) -> list[sp.Matrix]:
    """A basis of the k×k matrices X with ``X R_1 = R_1 X``: the directions G = I + εX that keep every score.

    ``Q → QG, K → KG^{−ᵀ}`` keeps ``Q R_Δ Kᵀ`` for every offset Δ iff G commutes with the
    rotation R_1 (then with all its powers). Each 2×2 block keeps ``aI + bJ`` (J the quarter
    turn): a scale, whose law is ``‖Q^(j)‖² − ‖K^(j)‖²``, and a rotation, which leaves
    ``Q^(j)ᵀQ^(j) − K^(j)ᵀK^(j)`` no room for another quadratic law.

    Examples
    ========
    >>> [list(X) for X in rope_commutant(2)]
    [[0, -1, 1, 0], [1, 0, 0, 1]]
    """
    if k % 2 or k < 2:
        raise ValueError(f"RoPE needs an even head_dim k ≥ 2, got {k}")
    R = rope_rotation(k, 1).xreplace(circle_point(k, 0))
    X = sp.Matrix(k, k, lambda a, b: sp.Symbol(f"X_{a}{b}"))
    equations = list(X * R - R * X)
    unknowns = list(X)
    A = sp.Matrix([[sp.diff(e, u) for u in unknowns] for e in equations])
    return [sp.Matrix(k, k, list(v)) for v in A.nullspace()]


def case(name: str, size: str) -> Case:
    """The derivation case ``name``: ``mha`` (one head), ``mha-2heads``, ``mha-sinusoidal``, ``mha-bias``, ``mha-rope``.

    Small: d = k = T = 2; large: d = 3, T = 3 (RoPE: k = d = 4, two blocks turning at different speeds).

    Examples
    ========
    >>> c = case("mha-2heads", "small")
    >>> c.formula, c.sizes
    (12, {'d': 2, 'k': 2, 'n': 2, 'T': 2})
    """
    n = 2 if name == "mha-2heads" else 1
    pe = {"mha-sinusoidal": "sinusoidal", "mha-rope": "rope"}.get(name, "none")
    bias = name == "mha-bias"
    big = size == "large"
    if pe == "rope":  # k = 4: two 2×2 blocks turning at different speeds (k = 2 has one)
        k = d = 4 if big else 2
        T = 2
    else:
        k, d, T = (2, 3, 3) if big else (2, 2, 2)
    module = attention_module(d, k, n, pe=pe, bias=bias)
    sizes = {"d": d, "k": k, "n": n, "T": T}
    block = attention_block(d, k, n, T=T, pe=pe, bias=bias)
    return Case(block, module, (T, d), *formula(n, k, pe=pe, bias=bias), sizes)
