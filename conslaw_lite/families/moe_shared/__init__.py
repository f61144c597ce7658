"""DeepSeek-MoE: shared experts plus fine-grained routed experts; every expert's laws and the gate's ``Σ_e W_e``.

``block`` (:class:`~.block.SharedMoE`, :func:`~.block.balance_step`), ``laws`` (the gate's finder,
:func:`~.laws.formula`, :func:`~.laws.bias_as_parameter`), ``symbolic`` (the derivation case ``moe-shared``)
and ``archs`` (``moe-shared``, ``moe-shared-bias``).
"""

from conslaw_lite.families import Family
from conslaw_lite.families.moe_shared import laws  # noqa: F401  (registers the finder)
from conslaw_lite.families.moe_shared.archs import ARCHITECTURES
from conslaw_lite.families.moe_shared.block import SharedMoE, balance_step

CASES = ("moe-shared",)  # built by .symbolic
SUMMARY = "DeepSeek-MoE: shared and routed SwiGLU experts, softmax top-k, optional routing bias"
FAMILY = Family("moe_shared", SUMMARY, 16, ARCHITECTURES, CASES, f"{__name__}.symbolic")

__all__ = ["FAMILY", "SharedMoE", "balance_step"]
