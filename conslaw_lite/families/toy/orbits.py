"""The group action behind the toy's law, for :mod:`conslaw_lite.orbits`: ``a → e^ξ a, b → e^−ξ b``."""

from __future__ import annotations

from conslaw_lite.families.toy.block import ToyProduct
from conslaw_lite.orbits import Piece, ProductScales, Rescaling, Slot, register_orbit


@register_orbit(ToyProduct)
def _toy(module: ToyProduct, prefix: str) -> tuple[Piece, ...]:
    names = tuple(prefix + n for n, _ in module.named_parameters(recurse=False))
    n = next(module.parameters()).numel()
    if len(names) == 2:
        return (Rescaling((Slot(names[0]),), (Slot(names[1]),), n, "a → e^ξ a, b → e^−ξ b"),)
    return (ProductScales(names, n, "θ_0 → e^{Σξ_j} θ_0, θ_j → e^{−ξ_j} θ_j"),)
