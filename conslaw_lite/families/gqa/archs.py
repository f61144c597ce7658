"""Grouped- and multi-query attention as named architectures: ``gqa``, ``gqa-rope``, ``gqa-rope-qknorm``, ``mqa``..."""

from __future__ import annotations

import torch

from conslaw_lite.archs import Arch, ArchOptions, Built
from conslaw_lite.families.attention.archs import conditioned_rope_base
from conslaw_lite.families.gqa.block import GroupedQueryAttention
from conslaw_lite.families.gqa.laws import formula
from conslaw_lite.seeding import seeded

QUERIES_PER_GROUP = 2


def build_gqa(
    options: ArchOptions,
    *,
    multi_query: bool = False,
    pe: str = "none",
    qk_norm: bool | str = False,
    norm_eps: float = 0.0,
) -> Built:
    """A float64 :class:`GroupedQueryAttention` at a generic point, with the count of :func:`~.laws.formula`.

    ``--heads`` is the number of key/value heads, two queries each; with ``multi_query`` it is the
    number of query heads, all on one key/value head. Defaults d = 4, k = 2, T = 3 (RoPE: k = 4, T = 4,
    and the well-conditioned base of ``mha-rope``); QK-norm gains are drawn from U(0.5, 1.5).

    Examples
    ========
    >>> built = build_gqa(ArchOptions())
    >>> built.formula_text, built.model.n_heads
    ('n_kv·k(k+1) = 2·2·3 = 12', 4)
    >>> mqa = build_gqa(ArchOptions(), multi_query=True)
    >>> mqa.formula, mqa.model.n_heads, mqa.model.n_kv_heads
    (6, 3, 1)
    """
    rope = pe == "rope"
    o = options.with_defaults(dim=4, heads=3 if multi_query else 2, head_dim=4 if rope else 2, seq=4 if rope else 3)
    o.heads_fit()
    n_q, n_kv = (o.heads, 1) if multi_query else (QUERIES_PER_GROUP * o.heads, o.heads)
    base = conditioned_rope_base(o.head_dim) if rope else 10000.0
    with seeded(o.seed):
        model = GroupedQueryAttention(
            o.dim, n_q, n_kv, o.head_dim, pe=pe, qk_norm=qk_norm, norm_eps=norm_eps, rope_base=base
        ).double()
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.startswith("gamma"):
                    p.uniform_(0.5, 1.5)
    what = "query heads, all on one key/value head" if multi_query else (
        f"key/value heads; {QUERIES_PER_GROUP} query heads share each")
    note = f"--heads is the number of {what}"
    if rope:
        note += f"; RoPE base {base:.4g}, frequencies from 1 to 1/3 rad per position (as mha-rope)"
    if qk_norm and norm_eps > 0:
        note += f"; RMSNorm ε = {norm_eps:g}"
    N, text = formula(n_kv, o.head_dim, n_heads=n_q, pe=pe, qk_norm=qk_norm, norm_eps=norm_eps)
    return Built(model, (o.seq, o.dim), N, text, note)


def _gqa(name: str, summary: str, **kwargs) -> Arch:
    return Arch(name, summary, lambda options: build_gqa(options, **kwargs), ("dim", "heads", "head_dim", "seq"))


ARCHITECTURES = (
    _gqa("gqa", "grouped-query attention, 2 queries per K/V head: ΣQ_hᵀQ_h − K_gᵀK_g, V_gᵀV_g − ΣO_hᵀO_h"),
    _gqa("gqa-rope", "grouped-query attention with RoPE: Σ_h‖Q_h⁽ʲ⁾‖² − ‖K_g⁽ʲ⁾‖² per group and 2×2 block", pe="rope"),
    _gqa("gqa-rope-qknorm", "GQA + RoPE + QK-norm, per-head gains, ε > 0: gain laws per group and block, plus V/O",
         pe="rope", qk_norm="per_head", norm_eps=1e-6),
    _gqa("gqa-rope-qknorm-eps0", "GQA + RoPE + QK-norm, per-head gains, ε = 0: also ‖Q_h‖², ‖K_g‖²",
         pe="rope", qk_norm="per_head"),
    _gqa("gqa-rope-qknorm-shared", "GQA + RoPE + QK-norm with gains shared across heads (Qwen-3), ε > 0",
         pe="rope", qk_norm="shared", norm_eps=1e-6),
    _gqa("gqa-rope-qknorm-shared-eps0", "GQA + RoPE + QK-norm, shared gains, ε = 0: also ‖Q_h‖², ‖K_g‖²",
         pe="rope", qk_norm="shared"),
    _gqa("mqa", "multi-query attention (one K/V head): Σ_h Q_hᵀQ_h − KᵀK, VᵀV − Σ_h O_hᵀO_h", multi_query=True),
    _gqa("mqa-rope", "multi-query attention with RoPE", multi_query=True, pe="rope"),
)
