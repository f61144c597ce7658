"""Grouped-query attention as a named architecture: ``gqa`` (``--heads`` key/value heads, two queries each)."""

from __future__ import annotations

from conslaw_lite.archs import Arch, ArchOptions, Built
from conslaw_lite.families.gqa.block import GroupedQueryAttention
from conslaw_lite.families.gqa.laws import formula
from conslaw_lite.seeding import seeded

QUERIES_PER_GROUP = 2


def build_gqa(options: ArchOptions) -> Built:
    """Two query heads on each of ``--heads`` key/value heads (defaults d = 4, n_kv = 2, k = 2, T = 3).

    Examples
    ========
    >>> built = build_gqa(ArchOptions())
    >>> built.formula_text, built.model.n_heads
    ('n_kv·k(k+1) = 2·2·3 = 12', 4)
    """
    o = options.with_defaults(dim=4, heads=2, head_dim=2, seq=3)
    if o.dim < o.head_dim:
        raise ValueError(f"--dim ({o.dim}) must be at least --head-dim ({o.head_dim}): the count assumes d ≥ k")
    with seeded(o.seed):
        model = GroupedQueryAttention(o.dim, QUERIES_PER_GROUP * o.heads, o.heads, o.head_dim).double()
    note = f"--heads is the number of key/value heads; {QUERIES_PER_GROUP} query heads share each"
    return Built(model, (o.seq, o.dim), *formula(o.heads, o.head_dim), note)


ARCHITECTURES = (
    Arch("gqa", "grouped-query attention, 2 queries per K/V head: ΣQ_hᵀQ_h − K_gᵀK_g, V_gᵀV_g − ΣO_hᵀO_h", build_gqa),
)
