"""The mixture of experts in sympy: the dense block for :func:`conslaw_lite.symbolic.quadratic_laws`
(:func:`sympy_form`), the block with undefined gates for :func:`conslaw_lite.symbolic.derive`
(:func:`moe_block`, fixed selections for top-k routing), and the derivation cases (:func:`case`).
"""

from __future__ import annotations

import sympy as sp
from torch import nn

from conslaw_lite.families.ffn.symbolic import RHO
from conslaw_lite.families.ffn.symbolic import sympy_form as ffn_form
from conslaw_lite.families.moe.block import GATINGS, MoE
from conslaw_lite.families.moe.laws import formula
from conslaw_lite.symbolic.activation_rules import Shapes, rule_for
from conslaw_lite.symbolic.cases import Case, SymbolicBlock

GATE = sp.Function("gate")


def moe_block(
    gating: str, d: int, n_experts: int, r: int, m: int, selections: list[tuple[int, ...]] | None = None
) -> SymbolicBlock:
    """``Σ_e g_e(Wx) E_e(x)``, SwiGLU experts ``E_e = A_e(ρ(B_e x) ⊙ C_e x)``, ρ undefined.

    ``gating="softmax"``: ``g_e = gate(e, z)`` with softmax identities; ``"sigmoid"``: the
    normalized sigmoid ``σ(z_e)/Σ_j σ(z_j)``. ``selections``: top-k routing as fixed
    selections, one per region of inputs (the experts chosen there, the gate renormalised
    over them); a law must hold on every region, so each region's outputs are listed.

    Examples
    ========
    >>> b = moe_block("softmax", 1, 2, 1, 1)
    >>> [str(p) for p in b.params]
    ['W_11', 'W_21', 'A1_11', 'B1_11', 'C1_11', 'A2_11', 'B2_11', 'C2_11']
    >>> moe_block("softmax", 1, 2, 1, 1, selections=[(0,), (1,)]).f  # top-1: gate(0, z) = 1 on its region
    [A1_11*C1_11*x_1*gate(0, W_11*x_1)*rho(B1_11*x_1), A2_11*C2_11*x_1*gate(0, W_21*x_1)*rho(B2_11*x_1)]
    """
    if gating not in ("softmax", "sigmoid"):
        raise ValueError(f"gating must be 'softmax' or 'sigmoid', got {gating!r}")
    selections = [tuple(range(n_experts))] if selections is None else [tuple(s) for s in selections]
    for chosen in selections:
        if not chosen or any(not 0 <= e < n_experts for e in chosen) or len(set(chosen)) != len(chosen):
            raise ValueError(f"a selection must list distinct experts among 0..{n_experts - 1}, got {chosen!r}")
    W = sp.Matrix(n_experts, d, lambda e, c: sp.Symbol(f"W_{e + 1}{c + 1}", real=True))
    params = list(W)
    entries = {W[e, c]: ("gate.weight", (e, c)) for e in range(n_experts) for c in range(d)}
    experts, x = [], None
    for e in range(n_experts):
        f, theta, x = ffn_form("swiglu", d, r, m, act=RHO)
        renamed = {t: sp.Symbol(f"{t.name[0]}{e + 1}{t.name[1:]}", real=True) for t in theta}  # A_11 -> A1_11
        params += list(renamed.values())
        for t, new in renamed.items():
            row, col = t.name[2:]
            entries[new] = (f"experts.{e}.{t.name[0]}.weight", (int(row) - 1, int(col) - 1))
        experts.append(sp.Matrix(f).xreplace(renamed))
    outputs = []
    for chosen in selections:
        logits = [(W[j, :] * sp.Matrix(x))[0] for j in chosen]
        outputs += list(sum((GATE(i, *logits) * experts[e] for i, e in enumerate(chosen)), sp.zeros(m, 1)))
    identity = "softmax" if gating == "softmax" else "normalized_sigmoid"
    return SymbolicBlock(outputs, params, list(x), {GATE: identity, RHO: None}, torch_entries=entries)


def moe_module(gating: str, d: int, n_experts: int, r: int, m: int, top_k: int | None = None) -> nn.Module:
    """The torch block of :func:`moe_block` (float64, SwiGLU experts).

    Examples
    ========
    >>> moe_module("sigmoid", 2, 2, 1, 1).gate.weight.shape
    torch.Size([2, 2])
    """
    return MoE(d, n_experts, r, m, gating=gating, top_k=top_k).double()


def shift_identity(gating: str, n_experts: int = 2) -> sp.Expr:
    """``Σ_u ∂g_1/∂z_u`` under the gate's identities: the motion of gate 1 when every gate row shifts by v.

    Shifting every row W_e by v adds ``v·x`` to every logit, so ``Σ_e W_e`` is a law only if
    this vanishes. Softmax: the row sum makes it 0. Normalized sigmoid: it is
    ``g_1(Σ_j g_j σ_j − σ_1)``, not 0, and the paper's gate law is lost.

    Examples
    ========
    >>> shift_identity("softmax")
    0
    >>> q1, q2 = sp.symbols("q_1 q_2", real=True)  # q_j = σ(z_j), g_1 = q_1/(q_1 + q_2)
    >>> sp.simplify(shift_identity("sigmoid") - q1 * q2 * (q2 - q1) / (q1 + q2) ** 2)
    0
    """
    if gating not in ("softmax", "sigmoid"):
        raise ValueError(f"gating must be 'softmax' or 'sigmoid', got {gating!r}")
    rule = rule_for(GATE, "softmax" if gating == "softmax" else "normalized_sigmoid")
    shapes = Shapes()
    z = sp.symbols(f"z_1:{n_experts + 1}", real=True)
    app = GATE(0, *z)
    total = sp.Add(*(rule.derivative(app, u + 1, shapes) for u in range(n_experts)))
    return sp.factor(sp.simplify(total.xreplace(shapes.eliminate)))


def sympy_parts(gating: str, d: int, n_experts: int, r: int, m: int) -> tuple[sp.Matrix, list, list, list]:
    """The dense MoE's pieces in sympy: ``(gates g (n_E×1), expert outputs E_e (m×1 each), parameters, inputs)``.

    Experts come from :func:`conslaw_lite.families.ffn.symbolic.sympy_form` with their symbols
    renamed per expert (``A1_11`` is A_11 of expert 1); gate entries are ``W_ek``;
    with z = Wx, softmax ``g_e = e^{z_e} / Σ_j e^{z_j}`` or normalized sigmoid
    ``g_e = σ(z_e) / Σ_j σ(z_j)``. Top-k routing is piecewise and has no sympy form here.

    Examples
    ========
    >>> g, experts, params, xs = sympy_parts("sigmoid", 1, 2, 1, 1)
    >>> [str(p) for p in params]
    ['W_11', 'W_21', 'A1_11', 'B1_11', 'C1_11', 'A2_11', 'B2_11', 'C2_11']
    >>> import sympy as sp
    >>> sp.simplify(g.subs({params[0]: 0, params[1]: sp.log(3), xs[0]: 1})).T  # logits (0, ln 3)
    Matrix([[2/5, 3/5]])
    """
    if gating not in GATINGS:
        raise ValueError(f"gating must be one of {GATINGS}, got {gating!r}")
    W = sp.Matrix(n_experts, d, lambda e, k: sp.Symbol(f"W_{e + 1}{k + 1}", real=True))
    params, experts = list(W), []
    for e in range(1, n_experts + 1):
        f, theta, x = ffn_form("swiglu", d, r, m)
        renamed = {t: sp.Symbol(f"{t.name[0]}{e}{t.name[1:]}", real=True) for t in theta}  # A_11 -> A1_11
        experts.append(sp.Matrix(f).subs(renamed, simultaneous=True))
        params += list(renamed.values())
    z = W * sp.Matrix(x)  # (n_E, 1) logits
    s = z.applyfunc(sp.exp if gating == "softmax" else lambda t: 1 / (1 + sp.exp(-t)))
    return s / sum(s), experts, params, x


def sympy_form(gating: str, d: int, n_experts: int, r: int, m: int) -> tuple[list, list, list]:
    """The dense MoE ``f = Σ_e g_e(x) E_e(x)`` as sympy: ``(outputs f_1..f_m, parameters, inputs x_1..x_d)``.

    Built from :func:`sympy_parts`, for :func:`conslaw_lite.symbolic.quadratic_laws`.

    Examples
    ========
    >>> from conslaw_lite.symbolic import quadratic_laws
    >>> quadratic_laws(*sympy_form("softmax", 1, 2, 1, 1))  # each expert's law, and W_11 + W_21
    [A1_11**2 - C1_11**2, A2_11**2 - C2_11**2, W_11 + W_21]
    """
    g, experts, params, x = sympy_parts(gating, d, n_experts, r, m)
    f = sum((g[e] * experts[e] for e in range(n_experts)), sp.zeros(m, 1))
    return list(f), params, x


def case(name: str, size: str) -> Case:
    """The derivation case ``name``: ``moe-softmax``, ``moe-sigmoid`` (dense) or ``moe-top1`` (softmax, top-1).

    Two experts with r = m = 1 on d = 2 inputs (small) or d = 3 (large).

    Examples
    ========
    >>> c = case("moe-top1", "small")
    >>> c.formula, c.formula_text
    (6, 'n_E·r + n_E·d = 2·1 + 2·2 = 6')
    """
    gating = "sigmoid" if name == "moe-sigmoid" else "softmax"
    d, n_e, r, m = (3, 2, 1, 1) if size == "large" else (2, 2, 1, 1)
    if name == "moe-top1":
        top1 = moe_block(gating, d, n_e, r, m, selections=[(e,) for e in range(n_e)])
        return Case(top1, moe_module(gating, d, n_e, r, m, top_k=1), (d,), *formula(n_e, r, d, gating, 1))
    return Case(moe_block(gating, d, n_e, r, m), moe_module(gating, d, n_e, r, m), (d,), *formula(n_e, r, d, gating))
