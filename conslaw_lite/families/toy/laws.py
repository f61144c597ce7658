"""Laws of the toy products: gradient flow on ``f = a·b·x`` keeps ``a² − b²``.

They are the characteristics of ``b ∂_a h + a ∂_b h = 0``; with a third factor
``c`` the PDE ``bc ∂_a h + ac ∂_b h + ab ∂_c h = 0`` keeps ``a² − b²`` and ``a² − c²``.
"""

from __future__ import annotations

from conslaw_lite.families.toy.block import ToyProduct
from conslaw_lite.laws import BlockLaws, Law, register_laws


def formula(D: int) -> tuple[int, str]:
    """The number of laws of a product of D factors, ``D − 1``, and how it is counted.

    Examples
    ========
    >>> formula(3)
    (2, 'D − 1 = 3 − 1 = 2')
    """
    return D - 1, f"D − 1 = {D} − 1 = {D - 1}"


def toy_laws(model: ToyProduct, prefix: str = "") -> dict[str, Law]:
    """``a² − θ_j²`` for each factor θ_j after the first: ``{"a²−b²": ..., "a²−c²": ...}``.

    Examples
    ========
    ``f = a·b·c·x`` at ``(a, b, c) = (2, 1, 3)``: ``a² − b² = 3`` and ``a² − c² = −5``.

    >>> from conslaw_lite.laws import parameters_of
    >>> model = ToyProduct(a=2.0, b=1.0, c=3.0)
    >>> {name: h(parameters_of(model)).item() for name, h in toy_laws(model).items()}
    {'a²−b²': 3.0, 'a²−c²': -5.0}
    """
    first, *rest = [n for n, _ in model.named_parameters(recurse=False)]
    return {f"{first}²−{n}²": _square_difference(prefix + first, prefix + n) for n in rest}


def _square_difference(u: str, v: str) -> Law:
    return lambda p: p[u] ** 2 - p[v] ** 2


@register_laws(ToyProduct)
def _toy_block(module: ToyProduct, prefix: str) -> BlockLaws:
    names = [n for n, _ in module.named_parameters(recurse=False)]
    controls = {f"{n}²": (lambda p, key=prefix + n: p[key] ** 2) for n in names}
    return BlockLaws("toy", toy_laws(module, prefix), controls)
