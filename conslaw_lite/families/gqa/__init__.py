"""Grouped- and multi-query attention: per K/V group g, ``Σ_{h∈g} Q_hᵀQ_h − K_gᵀK_g`` and ``V_gᵀV_g − Σ_{h∈g} O_hᵀO_h``.

``block`` (:class:`~.block.GroupedQueryAttention`, with RoPE, QK-norm and a causal mask as options),
``laws`` (its finder, :func:`~.laws.grouped_laws` for any module of the same layout, and
:func:`~.laws.formula`), ``symbolic`` (the derivation cases ``gqa``, ``mqa``, ``gqa-rope``) and ``archs``
(``gqa``, ``gqa-rope``, ``gqa-rope-qknorm*``, ``mqa``, ``mqa-rope``).
This folder is the whole family: the registry finds it.
"""

from conslaw_lite.families import Family
from conslaw_lite.families.gqa import (
    laws,  # noqa: F401  (registers the finder)
    orbits,  # noqa: F401  (registers the group action)
)
from conslaw_lite.families.gqa.archs import ARCHITECTURES
from conslaw_lite.families.gqa.block import GroupedQueryAttention

SUMMARY = "grouped- and multi-query attention: n_q query heads on n_kv key/value heads, with RoPE or QK-norm"
CASES = ("gqa", "mqa", "gqa-rope")  # built by .symbolic
FAMILY = Family("gqa", SUMMARY, 14, ARCHITECTURES, CASES, f"{__name__}.symbolic")

__all__ = ["FAMILY", "GroupedQueryAttention"]
