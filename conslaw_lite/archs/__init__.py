"""Named architectures for the ``certify`` and ``drift`` commands: the layer above the laws.

``blocks`` (torch modules) → ``laws`` (what each block conserves) → ``archs``: each
family module here builds named models from blocks and models (``toy``, ``ffn-gelu``,
``mha-rope``, ``tiny-transformer``, ...) with the law count the theory predicts. The
laws never import this package; :func:`list_archs` and :func:`get_arch` are the way in.
"""

from __future__ import annotations

from conslaw_lite.archs import attention, ffn, moe, network, toy
from conslaw_lite.archs.options import (
    Arch,
    ArchOptions,
    Builder,
    Built,
    add_size_arguments,
    size_options,
)

_BY_NAME: dict[str, Arch] = {
    arch.name: arch for family in (toy, ffn, attention, moe, network) for arch in family.ARCHITECTURES
}


def list_archs() -> list[str]:
    """The names ``certify`` and ``drift`` accept, sorted.

    Examples
    ========
    >>> "toy" in list_archs(), "mha-rope" in list_archs()
    (True, True)
    """
    return sorted(_BY_NAME)


def get_arch(name: str) -> Arch:
    """The architecture called ``name``; ``ValueError`` listing the valid names otherwise.

    Examples
    ========
    >>> built = get_arch("toy").build(ArchOptions())  # f = a·b·x: D − 1 = 1 law
    >>> built.formula, built.formula_text
    (1, 'D − 1 = 2 − 1 = 1')
    >>> get_arch("tyo")
    Traceback (most recent call last):
    ...
    ValueError: unknown architecture 'tyo'; valid: ...
    """
    if name not in _BY_NAME:
        raise ValueError(f"unknown architecture {name!r}; valid: {', '.join(list_archs())}")
    return _BY_NAME[name]


__all__ = ["Arch", "ArchOptions", "Builder", "Built", "add_size_arguments", "get_arch", "list_archs", "size_options"]
