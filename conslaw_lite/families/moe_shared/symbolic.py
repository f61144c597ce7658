"""The DeepSeek-MoE block in sympy, for :func:`conslaw_lite.symbolic.derive`: shared experts plus, on each
region of inputs where the top-k choice is fixed, the chosen routed experts weighted by the softmax over *all*
routed logits (undefined gates with the softmax identities). A law must hold on every region, so every
region's outputs are listed, as for top-k routing in :mod:`conslaw_lite.families.moe.symbolic`.
"""

from __future__ import annotations

from itertools import combinations

import sympy as sp

from conslaw_lite.families.ffn.symbolic import RHO
from conslaw_lite.families.ffn.symbolic import sympy_form as ffn_form
from conslaw_lite.families.moe_shared.block import SharedMoE
from conslaw_lite.families.moe_shared.laws import formula
from conslaw_lite.symbolic.cases import Case, SymbolicBlock

GATE = sp.Function("gate")


def _expert(d: int, r: int, m: int, tag: str, module: str, params: list, entries: dict) -> tuple[sp.Matrix, list]:
    """One SwiGLU expert ``A(ρ(Bx) ⊙ Cx)`` with its symbols renamed (``A_11`` → ``A{tag}_11``): (outputs, inputs)."""
    f, theta, x = ffn_form("swiglu", d, r, m, act=RHO)
    renamed = {t: sp.Symbol(f"{t.name[0]}{tag}{t.name[1:]}", real=True) for t in theta}
    for t, new in renamed.items():
        row, col = t.name[2:]
        entries[new] = (f"{module}.{t.name[0]}.weight", (int(row) - 1, int(col) - 1))
    params += list(renamed.values())
    return sp.Matrix(f).xreplace(renamed), x


def shared_moe_block(d: int, n_shared: int, n_routed: int, r: int, m: int, top_k: int) -> SymbolicBlock:
    """``Σ_s E^sh_s(x) + Σ_{e∈S} gate(e, z_1, …, z_{n_r}) E_e(x)`` on every region S (a k-subset of the routed).

    Examples
    ========
    >>> b = shared_moe_block(1, 1, 2, 1, 1, top_k=1)
    >>> [str(p) for p in b.params][:4], len(b.f)  # two regions, one output each
    (['W_11', 'W_21', 'As1_11', 'Bs1_11'], 2)
    """
    W = sp.Matrix(n_routed, d, lambda e, c: sp.Symbol(f"W_{e + 1}{c + 1}", real=True))
    params = list(W)
    entries = {W[e, c]: ("gate.weight", (e, c)) for e in range(n_routed) for c in range(d)}
    shared = sp.zeros(m, 1)
    for s in range(n_shared):
        out, x = _expert(d, r, m, f"s{s + 1}", f"shared.{s}", params, entries)
        shared += out
    routed = []
    for e in range(n_routed):
        out, x = _expert(d, r, m, str(e + 1), f"experts.{e}", params, entries)
        routed.append(out)
    logits = [(W[j, :] * sp.Matrix(x))[0] for j in range(n_routed)]
    outputs = []
    for chosen in combinations(range(n_routed), top_k):
        outputs += list(shared + sum((GATE(e, *logits) * routed[e] for e in chosen), sp.zeros(m, 1)))
    return SymbolicBlock(outputs, params, list(x), {GATE: "softmax", RHO: None}, torch_entries=entries)


def case(name: str, size: str) -> Case:
    """The derivation case ``moe-shared``, r = m = 1 and one shared expert: three routed, top-2, on d = 2 (small);
    two routed, top-1, on d = 3 (large: unrenormalised, the top-1 gate is not frozen).

    Examples
    ========
    >>> c = case("moe-shared", "small")
    >>> c.formula_text
    '(n_s + n_r)·r + d = (1 + 3)·1 + 2 = 6'
    """
    if name != "moe-shared":
        raise ValueError(f"the moe_shared family has no case {name!r}")
    d, n_s, n_r, r, m, k = (3, 1, 2, 1, 1, 1) if size == "large" else (2, 1, 3, 1, 1, 2)
    module = SharedMoE(d, n_s, n_r, r, m, top_k=k).double()
    return Case(shared_moe_block(d, n_s, n_r, r, m, k), module, (d,), *formula(n_s, n_r, r, d))
