"""A whole (tiny) transformer as a named architecture: ``tiny-transformer``."""

from __future__ import annotations

from conslaw_lite.archs import Arch, ArchOptions, Built
from conslaw_lite.families.network.laws import tiny_law_count
from conslaw_lite.seeding import seeded


def _tiny_transformer(options: ArchOptions) -> Built:
    from conslaw_lite.models.tiny import TinyTransformer  # the model imports this family's couplings

    o = options.with_defaults(dim=4, heads=2, head_dim=2, hidden=3, out=5, seq=3)
    d, n, k, r, vocab = o.dim, o.heads, o.head_dim, o.hidden, o.out
    with seeded(o.seed):
        model = TinyTransformer(vocab, d, n, k, r).double()
    formula = tiny_law_count(vocab, d, n, k, r)  # RMSNorm with ε > 0, TinyTransformer's default
    text = f"n·k(k+1) + r + 3d = {n}·{k}·{k + 1} + {r} + 3·{d} = {formula}"
    return Built(model, (o.seq, vocab), formula, text, note="--out is the vocabulary size; the 3d laws couple norms")


ARCHITECTURES = (
    Arch(
        "tiny-transformer",
        "embedding, RMSNorm, attention, SwiGLU, head: n·k(k+1) + r + 3d laws",
        _tiny_transformer,
        ("dim", "hidden", "out", "heads", "head_dim", "seq"),  # --out is the vocabulary
    ),
)
