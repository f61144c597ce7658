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

import torch

from conslaw_lite.archs import ArchOptions, Built, register_arch
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
    return BlockLaws(prefix.rstrip("."), kind, gate_laws(module, prefix), gate_controls(module, prefix))


def law_count(n_experts: int, hidden: int, d: int, gating: str, top_k: int | None) -> tuple[int, str]:
    """The predicted number of laws and how: n_E·r from the experts plus the gate's d, n_E·d or 0.

    Examples
    ========
    >>> law_count(4, 2, 3, "softmax", 2)
    (11, 'n_E·r + d = 4·2 + 3 = 11')
    >>> law_count(4, 2, 3, "sigmoid", None)[0], law_count(4, 2, 3, "softmax", 1)[0]
    (8, 20)
    """
    experts = n_experts * hidden
    if top_k == 1:
        n = experts + n_experts * d
        return n, f"n_E·r + n_E·d = {n_experts}·{hidden} + {n_experts}·{d} = {n}"
    if gating == "softmax":
        return experts + d, f"n_E·r + d = {n_experts}·{hidden} + {d} = {experts + d}"
    return experts, f"n_E·r = {n_experts}·{hidden} = {experts}"


TOKENS = 64  # default tokens per input under top-k routing: the experts share them, each needs enough for its count


def _build(options: ArchOptions, gating: str, top_k: int | None, **defaults: int) -> Built:
    if top_k is not None:
        defaults["seq"] = TOKENS
    o = options.with_defaults(**defaults)
    with torch.random.fork_rng():  # seeded, without disturbing the caller's random state
        torch.manual_seed(o.seed)
        model = MoE(o.dim, o.experts, o.hidden, o.out, gating=gating, top_k=top_k).double()
    formula, text = law_count(o.experts, o.hidden, o.dim, gating, top_k)
    note = ""
    if top_k is not None and top_k < o.experts:
        note = (
            f"top-k routing is piecewise smooth: the count is that of the fixed routing at inputs with no tie "
            f"between the k-th and (k+1)-th logit (routing_margin > 0, true for random inputs with probability 1); "
            f"each input carries T = {o.seq} tokens so that every expert receives enough of them"
        )
    shape = (o.dim,) if o.seq is None else (o.seq, o.dim)
    return Built(model, shape, formula, text, note)


@register_arch("moe-softmax", "mixture of SwiGLU experts, dense softmax gating: n_E·r + d laws")
def build_moe_softmax(options: ArchOptions) -> Built:
    """Dense softmax-gated MoE (defaults d = 3, n_E = 3, r = 2, m = 2); ``--top-k`` belongs to ``moe-topk``.

    Examples
    ========
    Each expert's SwiGLU laws plus the gate-row sum ``Σ_e W_e`` (d laws):

    >>> built = build_moe_softmax(ArchOptions())
    >>> built.formula, built.formula_text
    (9, 'n_E·r + d = 3·2 + 3 = 9')
    """
    if options.top_k is not None:
        raise ValueError("moe-softmax is dense; for top-k routing use moe-topk --top-k K")
    return _build(options, "softmax", None, dim=3, experts=3, hidden=2, out=2)


@register_arch("moe-topk", "mixture of SwiGLU experts, softmax top-k routing: n_E·r + d (k ≥ 2), n_E·r + n_E·d (k = 1)")
def build_moe_topk(options: ArchOptions) -> Built:
    """Softmax top-k MoE (defaults d = 3, n_E = 4, r = 2, m = 2, k = 2, T = 64), gate renormalised over S(x).

    Examples
    ========
    >>> built = build_moe_topk(ArchOptions(top_k=1))
    >>> built.formula_text, built.input_shape
    ('n_E·r + n_E·d = 4·2 + 4·3 = 20', (64, 3))
    """
    o = options.with_defaults(top_k=2)
    return _build(o, "softmax", o.top_k, dim=3, experts=4, hidden=2, out=2)


@register_arch("moe-sigmoid", "mixture of SwiGLU experts, normalized sigmoid gating: n_E·r laws (no gate law)")
def build_moe_sigmoid(options: ArchOptions) -> Built:
    """Dense normalized-sigmoid MoE (defaults d = 3, n_E = 3, r = 2, m = 2); ``--top-k`` routes as in moe-topk.

    Examples
    ========
    Normalized sigmoid gating is not shift-invariant, so ``Σ_e W_e`` is lost: only the experts' laws remain.

    >>> built = build_moe_sigmoid(ArchOptions())
    >>> built.formula, built.formula_text
    (6, 'n_E·r = 3·2 = 6')
    """
    return _build(options, "sigmoid", options.top_k, dim=3, experts=3, hidden=2, out=2)
