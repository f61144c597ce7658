"""Mixtures of SwiGLU experts: each expert's laws plus the gate's (``Σ_e W_e``, the frozen gate, or none).

``block`` (:class:`~.block.MoE`, :func:`~.block.routing_margin`), ``laws`` (the gate's finder and
:func:`~.laws.formula`), ``symbolic`` (sympy forms, derivation cases) and ``archs`` (``moe-*``).
"""

from conslaw_lite.families import Family
from conslaw_lite.families.moe import (
    laws,  # noqa: F401  (registers the finder)
    orbits,  # noqa: F401  (registers the group action)
)
from conslaw_lite.families.moe.archs import ARCHITECTURES
from conslaw_lite.families.moe.block import MoE, routing_margin

CASES = ("moe-softmax", "moe-sigmoid", "moe-top1")  # built by .symbolic
SUMMARY = "mixtures of SwiGLU experts under softmax, normalized-sigmoid or top-k gating"
FAMILY = Family("moe", SUMMARY, 6, ARCHITECTURES, CASES, f"{__name__}.symbolic")

__all__ = ["FAMILY", "MoE", "routing_margin"]
