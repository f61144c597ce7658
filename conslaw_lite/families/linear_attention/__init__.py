"""Linear attention (no softmax): per head ``Q_iᵀQ_i − K_iᵀK_i``, ``V_iᵀV_i − O_iᵀO_i`` and ``‖Q_i‖_F² − ‖V_i‖_F²``.

``block`` (:class:`~.block.LinearAttention`), ``laws`` (its finder and :func:`~.laws.formula`),
``symbolic`` (the derivation case) and ``archs`` (``linear-attention``).
"""

from conslaw_lite.families import Family
from conslaw_lite.families.linear_attention import laws  # noqa: F401  (registers the finder)
from conslaw_lite.families.linear_attention.archs import ARCHITECTURES
from conslaw_lite.families.linear_attention.block import LinearAttention

SUMMARY = "linear attention (no softmax): a scale moves between the score and the value"
CASES = ("linear-attention",)  # built by .symbolic
FAMILY = Family("linear_attention", SUMMARY, 14, ARCHITECTURES, CASES, f"{__name__}.symbolic")

__all__ = ["FAMILY", "LinearAttention"]
