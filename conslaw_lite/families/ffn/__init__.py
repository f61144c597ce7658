"""Feed-forward blocks: ``A·act(Bx)`` (no law for GELU and SiLU, r for ReLU) and SwiGLU (r laws).

``block`` (the torch modules), ``laws`` (the finders and :func:`~.laws.formula`), ``symbolic``
(the sympy forms and derivation cases, imported when asked) and ``archs`` (``ffn-*``, ``swiglu``).
"""

from conslaw_lite.families import Family
from conslaw_lite.families.ffn import (
    laws,  # noqa: F401  (registers the finders)
    orbits,  # noqa: F401  (registers the group action)
)
from conslaw_lite.families.ffn.archs import ARCHITECTURES
from conslaw_lite.families.ffn.block import FFN, SwiGLU

CASES = ("ffn-gelu", "ffn-silu", "ffn-relu", "ffn-linear", "swiglu")  # built by .symbolic
SUMMARY = "feed-forward blocks A·act(Bx) and SwiGLU A·(silu(Bx) ⊙ Cx)"
FAMILY = Family("ffn", SUMMARY, 3, ARCHITECTURES, CASES, f"{__name__}.symbolic")

__all__ = ["FAMILY", "FFN", "SwiGLU"]
