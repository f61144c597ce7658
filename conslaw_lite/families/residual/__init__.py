"""Residual blocks ``x + A·ρ(Bx)``: the FFN's laws, the skip adds none.

``block`` (:class:`~.block.ResidualFFN`), ``laws`` (the finder and :func:`~.laws.formula`) and ``archs``
(``residual-relu``, ``residual-relu-bias``, ``residual-gelu``).
"""

from conslaw_lite.families import Family
from conslaw_lite.families.residual import laws  # noqa: F401  (registers the finder)
from conslaw_lite.families.residual.archs import ARCHITECTURES
from conslaw_lite.families.residual.block import ResidualFFN

FAMILY = Family("residual", "residual blocks x + A·ρ(Bx): the FFN's laws, the skip adds none", 16, ARCHITECTURES)

__all__ = ["FAMILY", "ResidualFFN"]
