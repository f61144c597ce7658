"""Laws of grouped-query attention: one pair of k×k laws per key/value group.

The key K_g is shared by the queries h ∈ g, so the symmetry ``K_g → K_g G^(−ᵀ)`` must move
all of them at once, ``Q_h → Q_h G``; likewise ``V_g → V_g H`` with ``O_h → O_h H^(−ᵀ)`` for h ∈ g.
Per group g:

* ``Σ_{h∈g} Q_hᵀQ_h − K_gᵀK_g`` and ``V_gᵀV_g − Σ_{h∈g} O_hᵀO_h`` (k×k, symmetric: k(k+1)/2 each),

N = n_kv·k(k+1): the count of multi-head attention with n_kv heads, however many queries share them.
Controls: ``K_gᵀK_g`` and ``V_gᵀV_g`` alone.
"""

from __future__ import annotations

import torch

from conslaw_lite.families.gqa.block import GroupedQueryAttention
from conslaw_lite.laws import BlockLaws, Law, Params, register_laws


def formula(n_kv_heads: int, k: int) -> tuple[int, str]:
    """The number of laws of grouped-query attention with n_kv key/value heads of width k, and how.

    Examples
    ========
    >>> formula(2, 2)
    (12, 'n_kv·k(k+1) = 2·2·3 = 12')
    """
    N = n_kv_heads * k * (k + 1)
    return N, f"n_kv·k(k+1) = {n_kv_heads}·{k}·{k + 1} = {N}"


def _gram(p: Params, weight: str, blocks: range, k: int, columns: bool = False) -> torch.Tensor:
    """``Σ_{b ∈ blocks} W_bᵀW_b`` (k×k), W_b = rows b·k:(b+1)·k of ``weight`` transposed, or its columns."""
    W = p[weight]
    parts = [W[:, b * k : (b + 1) * k] if columns else W[b * k : (b + 1) * k].T for b in blocks]  # (d, k) each
    return sum(P.T @ P for P in parts)


def group_laws(module: GroupedQueryAttention, prefix: str = "") -> tuple[dict[str, Law], dict[str, Law]]:
    """``({"group{g}:ΣQᵀQ−KᵀK": ..., "group{g}:VᵀV−ΣOᵀO": ...}, controls)`` for each key/value group g.

    Examples
    ========
    >>> laws, controls = group_laws(GroupedQueryAttention(4, n_heads=4, n_kv_heads=2, head_dim=2))
    >>> list(laws)[:2], list(controls)[:1]
    (['group0:ΣQᵀQ−KᵀK', 'group0:VᵀV−ΣOᵀO'], ['group0:KᵀK'])
    """
    k, per_group = module.head_dim, module.n_heads // module.n_kv_heads
    Q, K, V, O = (prefix + f"{m}.weight" for m in "QKVO")
    laws, controls = {}, {}
    for g in range(module.n_kv_heads):
        queries, own = range(g * per_group, (g + 1) * per_group), range(g, g + 1)
        laws[f"group{g}:ΣQᵀQ−KᵀK"] = lambda p, q=queries, o=own: _gram(p, Q, q, k) - _gram(p, K, o, k)
        laws[f"group{g}:VᵀV−ΣOᵀO"] = lambda p, q=queries, o=own: _gram(p, V, o, k) - _gram(p, O, q, k, columns=True)
        controls[f"group{g}:KᵀK"] = lambda p, o=own: _gram(p, K, o, k)
        controls[f"group{g}:VᵀV"] = lambda p, o=own: _gram(p, V, o, k)
    return laws, controls


@register_laws(GroupedQueryAttention)
def _gqa_block(module: GroupedQueryAttention, prefix: str) -> BlockLaws:
    return BlockLaws("gqa", *group_laws(module, prefix))
