"""The toy products of chapter 1, ``f = a·b·x`` (law ``a² − b²``) and ``a·b·c·x``: D − 1 laws."""

from conslaw_lite.families import Family
from conslaw_lite.families.toy import (
    laws,  # noqa: F401  (registers the finder)
    orbits,  # noqa: F401  (registers the group action)
)
from conslaw_lite.families.toy.archs import ARCHITECTURES
from conslaw_lite.families.toy.block import ToyProduct
from conslaw_lite.families.toy.laws import toy_laws

FAMILY = Family("toy", "products θ_1·θ_2·…·θ_D·x: D − 1 laws a² − θ_j²", 1, ARCHITECTURES)

__all__ = ["FAMILY", "ToyProduct", "toy_laws"]
