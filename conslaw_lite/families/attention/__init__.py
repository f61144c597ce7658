"""Multi-head attention: ``Q_iᵀQ_i − K_iᵀK_i`` and ``V_iᵀV_i − O_iᵀO_i`` per head, per 2×2 block under RoPE.

``block`` (:class:`~.block.MultiHeadAttention`), ``positional`` (sinusoidal tables, RoPE),
``laws`` (the finders for this block, ``nn.MultiheadAttention`` and timm's, and
:func:`~.laws.formula`), ``symbolic`` (sympy forms, derivation cases) and ``archs`` (``mha-*``).
"""

from conslaw_lite.families import Family
from conslaw_lite.families.attention import (
    laws,  # noqa: F401  (registers the finders)
    orbits,  # noqa: F401  (registers the group action)
)
from conslaw_lite.families.attention.archs import ARCHITECTURES
from conslaw_lite.families.attention.block import MultiHeadAttention

CASES = ("mha", "mha-2heads", "mha-sinusoidal", "mha-bias", "mha-rope")  # built by .symbolic
SUMMARY = "multi-head attention with no PE, sinusoidal PE, biases, RoPE or QK-norm"
FAMILY = Family("attention", SUMMARY, 4, ARCHITECTURES, CASES, f"{__name__}.symbolic")

__all__ = ["FAMILY", "MultiHeadAttention"]
