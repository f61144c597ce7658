"""Laws of a mixture of experts: one gate invariant, or a frozen gate, or none.

The experts' own laws (SwiGLU: ``‖A_{:,i}‖² − ‖C_{i,:}‖²``) come from the expert
block's finder, since :func:`~conslaw_lite.laws.find_blocks` walks
every submodule (keys ``"experts.e:..."``). This module adds the gate's:

* softmax gating, dense or top-k with k ≥ 2: ``Σ_e W_e`` (d laws). Adding v to
  every gate row shifts every logit by v·x, which changes neither the selection
  nor the softmax over it, so ``Σ_e ∇_{W_e} L = 0``;
* top-1 routing (either gating): the one selected gate value is exactly 1, so
  the gate gets no gradient and every entry of W is conserved (n_E·d laws);
* normalized sigmoid gating, k ≥ 2 or dense: no gate law. The paper claims
  ``Σ_e W_e``; :func:`conslaw_lite.counterexamples.moe_gate_sum_rate` shows it
  moving at rate 9/250.

Controls (look-alikes that are not conserved): each row W_e alone, and under
sigmoid gating the gate sum Σ_e W_e.
"""

from __future__ import annotations

from conslaw_lite.families.moe.block import MoE
from conslaw_lite.laws import BlockLaws, Law, register_laws


def formula(n_experts: int, hidden: int, d: int, gating: str, top_k: int | None = None) -> tuple[int, str]:
    """The number of laws of a MoE and how: n_E·r from the SwiGLU experts plus the gate's d, n_E·d or 0.

    Softmax gating, dense or top-k with k ≥ 2: ``+ d`` (``Σ_e W_e``); top-1: ``+ n_E·d`` (the frozen
    gate); normalized sigmoid: ``+ 0``. The one formula the archs, the derivation cases and the tests read.

    Examples
    ========
    >>> formula(4, 2, 3, "softmax", 2)
    (11, 'n_E·r + d = 4·2 + 3 = 11')
    >>> formula(4, 2, 3, "sigmoid", None)[0], formula(4, 2, 3, "softmax", 1)[0]
    (8, 20)
    """
    experts = n_experts * hidden
    if top_k == 1:
        n = experts + n_experts * d
        return n, f"n_E·r + n_E·d = {n_experts}·{hidden} + {n_experts}·{d} = {n}"
    if gating == "softmax":
        return experts + d, f"n_E·r + d = {n_experts}·{hidden} + {d} = {experts + d}"
    return experts, f"n_E·r = {n_experts}·{hidden} = {experts}"


def _row(key: str, e: int) -> Law:
    return lambda p: p[key][e].clone()  # a copy, not a view that training would change in place


def gate_laws(model: MoE, prefix: str = "") -> dict[str, Law]:
    """The gate's laws: ``{"ΣW_e": Σ_e W_e}`` (softmax, k ≠ 1), ``{"W": W}`` (k = 1), ``{}`` (sigmoid).

    Examples
    ========
    >>> sorted(gate_laws(MoE(3, 4, 2, 2)))
    ['ΣW_e']
    >>> sorted(gate_laws(MoE(3, 4, 2, 2, top_k=1))), sorted(gate_laws(MoE(3, 4, 2, 2, gating="sigmoid")))
    (['W'], [])
    """
    key = prefix + "gate.weight"  # (n_E, d): row e is W_e
    if model.top_k == 1:
        return {"W": lambda p: p[key].clone()}
    if model.gating == "softmax":
        return {"ΣW_e": lambda p: p[key].sum(dim=0)}
    return {}


def gate_controls(model: MoE, prefix: str = "") -> dict[str, Law]:
    """Gate quantities that are *not* conserved: each ``W_e`` alone, and ``Σ_e W_e`` under sigmoid gating.

    Top-1 routing freezes the whole gate, so it has no gate control.

    Examples
    ========
    >>> sorted(gate_controls(MoE(3, 2, 1, 1, gating="sigmoid")))
    ['W_0', 'W_1', 'ΣW_e (sigmoid)']
    """
    if model.top_k == 1:
        return {}
    key = prefix + "gate.weight"
    controls = {f"W_{e}": _row(key, e) for e in range(model.n_experts)}
    if model.gating == "sigmoid":
        controls["ΣW_e (sigmoid)"] = lambda p: p[key].sum(dim=0)
    return controls


@register_laws(MoE)
def _moe_block(module: MoE, prefix: str) -> BlockLaws:
    kind = f"moe-{module.gating}" + (f"-top{module.top_k}" if module.top_k else "")
    return BlockLaws(kind, gate_laws(module, prefix), gate_controls(module, prefix))
