"""Linear attention as a named architecture: ``linear-attention``."""

from __future__ import annotations

from conslaw_lite.archs import Arch, ArchOptions, Built
from conslaw_lite.families.linear_attention.block import LinearAttention
from conslaw_lite.families.linear_attention.laws import formula
from conslaw_lite.seeding import seeded


def build_linear_attention(options: ArchOptions) -> Built:
    """A float64 :class:`LinearAttention` at a generic point (defaults d = 4, n = 1, k = 2, T = 3).

    Examples
    ========
    >>> built = build_linear_attention(ArchOptions())
    >>> built.formula_text, built.input_shape
    ('n·(k(k+1) + 1) = 1·(2·3 + 1) = 7', (3, 4))
    """
    o = options.with_defaults(dim=4, heads=1, head_dim=2, seq=3).heads_fit()
    with seeded(o.seed):
        model = LinearAttention(o.dim, o.heads, o.head_dim).double()
    return Built(model, (o.seq, o.dim), *formula(o.heads, o.head_dim), "")


ARCHITECTURES = (
    Arch(
        "linear-attention",
        "attention without softmax: the MHA laws per head and ‖Q_i‖² − ‖V_i‖²",
        build_linear_attention,
        ("dim", "heads", "head_dim", "seq"),
    ),
)
