"""Whole-network laws: norm gains against the layers reading them, scale- and shift-invariant weights, timm's ViT.

``couplings`` (what a model declares: :class:`~.couplings.NetworkLaws`), ``laws`` (its finder,
:func:`~.laws.discover_couplings`, :func:`~.laws.tiny_law_count`), ``vit`` (timm's
``VisionTransformer``) and ``archs`` (``tiny-transformer``).
"""

from conslaw_lite.families import Family
from conslaw_lite.families.network import laws, vit  # noqa: F401  (register the finders)
from conslaw_lite.families.network.archs import ARCHITECTURES
from conslaw_lite.families.network.couplings import NetworkLaws, NormCoupling

FAMILY = Family("network", "laws that couple blocks through normalization layers", 10, ARCHITECTURES)

__all__ = ["FAMILY", "NetworkLaws", "NormCoupling"]
