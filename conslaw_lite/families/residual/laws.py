"""Laws of a residual block ``x + A·ρ(Bx + b) + a``: the FFN's, and the skip adds none.

* ReLU: ``‖A_{:,i}‖² − ‖[B_{i,:}, b_i]‖²`` per hidden unit (N = r);
* GELU, SiLU: no law (N = 0), the control being ReLU's law;
* linear ρ: ``x + ABx`` is still a function of AB alone, so ``AᵀA − BBᵀ`` stays a law
  (N = r(r+1)/2 for r ≤ d), the FFN's count again.

Marcotte, Gribonval & Peyré (2025) prove for residual blocks that the skip connection changes no law of
the block it wraps; this module is that statement for the FFN family, certified by the counter.
"""

from __future__ import annotations

from dataclasses import replace

from conslaw_lite.families.ffn.laws import formula as ffn_formula
from conslaw_lite.families.ffn.laws import mlp_block
from conslaw_lite.families.residual.block import ResidualFFN
from conslaw_lite.laws import BlockLaws, register_laws


def formula(activation: str, r: int) -> tuple[int, str]:
    """The number of laws of ``x + A·ρ(Bx)`` with r hidden units: the FFN's (``r`` for ReLU, 0 for GELU).

    Examples
    ========
    >>> formula("relu", 4), formula("gelu", 4)[0]
    ((4, 'r = 4 (the skip adds none)'), 0)
    """
    n, text = ffn_formula(activation, r)
    return n, f"{text} (the skip adds none)"


@register_laws(ResidualFFN)
def _residual(module: ResidualFFN, prefix: str) -> BlockLaws:
    bias = f"{prefix}B.bias" if module.B.bias is not None else None
    found = mlp_block(module.activation, f"{prefix}A.weight", f"{prefix}B.weight", bias)
    return replace(found, kind=f"residual-{module.activation}")
