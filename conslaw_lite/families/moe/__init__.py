"""Mixtures of SwiGLU experts: each expert's laws plus the gate's (``Σ_e W_e``, the frozen gate, or none).

``block`` (:class:`~.block.MoE`, :func:`~.block.routing_margin`), ``laws`` (the gate's finder and
:func:`~.laws.formula`), ``symbolic`` (sympy forms, derivation cases) and ``archs`` (``moe-*``).
"""

from conslaw_lite.families import Family
from conslaw_lite.families.moe import laws  # noqa: F401  (registers the finder)
from conslaw_lite.families.moe.archs import ARCHITECTURES
from conslaw_lite.families.moe.block import MoE, routing_margin

FAMILY = Family(
    "moe",
    "mixtures of SwiGLU experts under softmax, normalized-sigmoid or top-k gating",
    6,
    ARCHITECTURES,
    ("moe-softmax", "moe-sigmoid", "moe-top1"),
    "conslaw_lite.families.moe.symbolic",
)

__all__ = ["FAMILY", "MoE", "routing_margin"]
