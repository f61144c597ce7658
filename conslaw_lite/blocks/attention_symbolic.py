"""Multi-head attention written out in sympy, for the symbolic derivation at the smallest sizes.

The same block as :class:`~conslaw_lite.blocks.attention.MultiHeadAttention`, one
expression per output entry: head i maps tokens X ∈ R^(T×d) to
``softmax(X Q_i R K_iᵀ Xᵀ/√k) X V_i O_iᵀ``. With RoPE, the score of query p and key s
is ``x_pᵀ Q_i R_{s−p} K_iᵀ x_s`` with R_Δ block-diagonal, block j a rotation by
``Δ·ω_j``; the angles are kept exact (``cos(1)``, not 0.5403...).
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp


@dataclass(frozen=True)
class SymbolicAttention:
    """``outputs`` (T·d expressions, row-major), ``params``, ``inputs``, each head's matrices by name,
    and each head's (T, T) matrix of scores ``x_pᵀ Q_i R_{s−p} K_iᵀ x_s / √k`` (polynomials in θ)."""

    outputs: list[sp.Expr]
    params: list[sp.Symbol]
    inputs: list[sp.Symbol]
    heads: list[dict[str, sp.Matrix]]
    scores: list[sp.Matrix]


def _matrix(name: str, rows: int, cols: int) -> sp.Matrix:
    return sp.Matrix(rows, cols, lambda r, c: sp.Symbol(f"{name}{r}{c}", real=True))


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
    X = _matrix("x_", T, d)
    omegas = [sp.Integer(3) ** (-j) for j in range(k // 2)]
    heads = [{m: _matrix(f"{m}{i}_", d, k) for m in "QKVO"} for i in range(n_heads)]
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
