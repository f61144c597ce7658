"""The paper's normalized-sigmoid claim, refuted in exact arithmetic.

The paper claims that an MoE with normalized sigmoid gating
``g_e = σ(W_e·x) / Σ_j σ(W_j·x)`` conserves the gate-row sum ``Σ_e W_e``, as
softmax gating does. One data point settles it (chapter 06): d = 3,
two SwiGLU experts with hidden size 1 whose outputs at x = (1, 0, 0) are
(0, 0, 0) and (1, 0, 0), gate logits (0, ln 3), target 0, loss ``L = ½‖f(x)‖²``.
Under gradient flow ``d/dt Σ_e W_e = −Σ_e ∇_{W_e} L``, which is
(9/250, 0, 0) for sigmoid gating and 0 for softmax gating.

:func:`moe_gate_sum_rate` computes it with sympy from the block's formula;
:func:`counterexample_moe` builds the same point as a float64
:class:`~conslaw_lite.families.moe.block.MoE` so autograd can be checked against it.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp
import torch

from conslaw_lite.families.moe.block import GATINGS, MoE
from conslaw_lite.families.moe.symbolic import sympy_parts


def counterexample_point() -> dict[str, sp.Matrix]:
    """The parameters of the counterexample, exact: gate W (2×3) and each expert's A (3×1), B, C (1×3).

    Gate rows W_1 = 0, W_2 = (ln 3, 0, 0) give logits (0, ln 3) at x = e_1.
    Expert 1 has A = 0 (output 0); expert 2 has A = e_1, B = e_1 and
    C = (1 + 1/e) e_1, so its output is silu(1)·(1 + 1/e) e_1 = e_1, because
    silu(1) = 1/(1 + e^{−1}).

    Examples
    ========
    >>> counterexample_point()["gate.weight"]
    Matrix([
    [    0, 0, 0],
    [log(3), 0, 0]])
    """
    e1_row = sp.Matrix([[1, 0, 0]])
    return {
        "gate.weight": sp.Matrix([[0, 0, 0], [sp.log(3), 0, 0]]),
        "experts.0.A.weight": sp.zeros(3, 1),
        "experts.0.B.weight": e1_row,
        "experts.0.C.weight": e1_row,
        "experts.1.A.weight": e1_row.T,
        "experts.1.B.weight": e1_row,
        "experts.1.C.weight": (1 + sp.exp(-1)) * e1_row,
    }


@dataclass(frozen=True)
class GateSumRate:
    """The counterexample worked out: gate values, expert outputs, model output, loss and ``d/dt Σ_e W_e``."""

    gating: str
    gates: sp.Matrix  # (2, 1)
    expert_outputs: list[sp.Matrix]  # two (3, 1)
    output: sp.Matrix  # f(x), (3, 1)
    loss: sp.Expr
    rate: sp.Matrix  # d/dt Σ_e W_e = −Σ_e ∇_{W_e} L, (3, 1)


def _symbol_of(name: str, i: int, j: int) -> sp.Symbol:
    """The symbol of :func:`~conslaw_lite.families.moe.symbolic.sympy_form` for entry (i, j) of parameter ``name``."""
    if name == "gate.weight":
        return sp.Symbol(f"W_{i + 1}{j + 1}", real=True)
    _, e, letter, _ = name.split(".")  # experts.e.A.weight
    return sp.Symbol(f"{letter}{int(e) + 1}_{i + 1}{j + 1}", real=True)


def moe_gate_sum_rate(gating: str) -> GateSumRate:
    """``d/dt Σ_e W_e = −Σ_e ∇_{W_e} L`` at the counterexample, exactly (sympy).

    The model is the MoE's own sympy form (:func:`conslaw_lite.families.moe.symbolic.sympy_parts`,
    every parameter a symbol), ``f = g_1 E_1 + g_2 E_2``; L = ½‖f(x)‖² is differentiated
    with respect to each gate entry and only then evaluated at :func:`counterexample_point`
    and x = e_1.

    Examples
    ========
    >>> moe_gate_sum_rate("sigmoid").rate.T
    Matrix([[9/250, 0, 0]])
    >>> moe_gate_sum_rate("softmax").rate.T
    Matrix([[0, 0, 0]])
    """
    if gating not in GATINGS:
        raise ValueError(f"gating must be one of {GATINGS}, got {gating!r}")
    g, experts, _, inputs = sympy_parts(gating, d=3, n_experts=2, r=1, m=3)
    f = g[0] * experts[0] + g[1] * experts[1]  # (3, 1); the target is 0
    loss = (f.T * f)[0] / 2
    W = [[_symbol_of("gate.weight", e, k) for k in range(3)] for e in range(2)]
    rate = -sp.Matrix([sum(sp.diff(loss, W[e][k]) for e in range(2)) for k in range(3)])
    at = {
        _symbol_of(name, i, j): value[i, j]
        for name, value in counterexample_point().items()
        for i in range(value.rows)
        for j in range(value.cols)
    }
    at.update(zip(inputs, [1, 0, 0]))  # x = e_1

    def exact(expr: sp.Matrix | sp.Expr) -> sp.Matrix | sp.Expr:
        return sp.simplify(expr.subs(at))

    return GateSumRate(gating, exact(g), [exact(E) for E in experts], exact(f), exact(loss), exact(rate))


def counterexample_moe(gating: str) -> tuple[MoE, torch.Tensor, torch.Tensor]:
    """``(model, x, y)``: the counterexample as a float64 :class:`MoE` with input x = e_1 and target 0.

    Examples
    ========
    >>> model, x, y = counterexample_moe("sigmoid")
    >>> loss = 0.5 * ((model(x) - y) ** 2).sum()
    >>> round(-float(torch.autograd.grad(loss, model.gate.weight)[0].sum(dim=0)[0]), 12)  # 9/250
    0.036
    """
    model = MoE(3, n_experts=2, hidden=1, out=3, gating=gating).double()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.tensor(sp.matrix2numpy(counterexample_point()[name], dtype=float)))
    x = torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64)
    return model, x, torch.zeros(1, 3, dtype=torch.float64)
