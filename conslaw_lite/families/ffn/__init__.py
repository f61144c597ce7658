"""Feed-forward blocks: ``A·act(Bx)`` (no law for GELU and SiLU, r for ReLU) and SwiGLU (r laws).

``block`` (the torch modules), ``laws`` (the finders and :func:`~.laws.formula`), ``symbolic``
(the sympy forms and derivation cases, imported when asked) and ``archs`` (``ffn-*``, ``swiglu``).
"""

from conslaw_lite.families import Family
from conslaw_lite.families.ffn import laws  # noqa: F401  (registers the finders)
from conslaw_lite.families.ffn.archs import ARCHITECTURES
from conslaw_lite.families.ffn.block import FFN, SwiGLU

FAMILY = Family(
    "ffn",
    "feed-forward blocks A·act(Bx) and SwiGLU A·(silu(Bx) ⊙ Cx)",
    3,
    ARCHITECTURES,
    ("ffn-gelu", "ffn-silu", "ffn-relu", "ffn-linear", "swiglu"),
    "conslaw_lite.families.ffn.symbolic",
)

__all__ = ["FAMILY", "FFN", "SwiGLU"]
