"""A whole (tiny) transformer as a named architecture: ``tiny-transformer``."""

from __future__ import annotations

from conslaw_lite.archs.options import Arch, ArchOptions, Built
from conslaw_lite.models.tiny import TinyTransformer
from conslaw_lite.seeding import seeded


def tiny_law_count(
    vocab: int, d: int, n_heads: int, head_dim: int, hidden: int, *, norm: str = "rms", norm_eps: float = 1e-6
) -> int:
    """The laws of a one-layer :class:`TinyTransformer`: ``N = n·k(k+1) + r + 3d (+ 1) (+ vocab + n·k + r)``.

    ``n·k(k+1)`` from the attention heads, ``r`` from the SwiGLU, ``3d`` from the three norm gains
    with the projections they feed; ``+ 1`` when ε = 0 (the stream writers E, O, A scale together),
    ``+ vocab + n·k + r`` with LayerNorm (the column sums of E, O and A).

    Examples
    ========
    >>> tiny_law_count(5, 4, 2, 2, 3), tiny_law_count(5, 4, 2, 2, 3, norm="layer", norm_eps=0.0)
    (27, 40)
    """
    n, k, r = n_heads, head_dim, hidden
    return n * k * (k + 1) + r + 3 * d + (norm_eps == 0) + (norm == "layer") * (vocab + n * k + r)


def _tiny_transformer(options: ArchOptions) -> Built:
    o = options.with_defaults(dim=4, heads=2, head_dim=2, hidden=3, out=5, seq=3)
    d, n, k, r, vocab = o.dim, o.heads, o.head_dim, o.hidden, o.out
    with seeded(o.seed):
        model = TinyTransformer(vocab, d, n, k, r).double()
    formula = tiny_law_count(vocab, d, n, k, r)  # RMSNorm with ε > 0, TinyTransformer's default
    text = f"n·k(k+1) + r + 3d = {n}·{k}·{k + 1} + {r} + 3·{d} = {formula}"
    return Built(model, (o.seq, vocab), formula, text, note="--out is the vocabulary size; the 3d laws couple norms")


ARCHITECTURES = (
    Arch("tiny-transformer", "embedding, RMSNorm, attention, SwiGLU, head: n·k(k+1) + r + 3d laws", _tiny_transformer),
)
