"""Laws of a mixture of experts: one gate invariant, or a frozen gate, or none.

The experts' own laws (SwiGLU: ``‖A_{:,i}‖² − ‖C_{i,:}‖²``) come from the expert
block's finder, since :func:`~conslaw_lite.laws.registry.find_blocks` walks
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

from conslaw_lite.blocks.moe import MoE
from conslaw_lite.laws.registry import BlockLaws, Law, register_laws


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
