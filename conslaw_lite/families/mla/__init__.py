"""Multi-head latent attention (DeepSeek-V2/V3): per latent a Gram law, per head ``UQ_hUQ_hᵀ − UK_hUK_hᵀ`` and
``UV_hUV_hᵀ − O_hᵀO_h``, per RoPE block ``Σ_h ‖QR_h^(j)‖² − ‖KR^(j)‖²``.

``block`` (:class:`~.block.LatentAttention`), ``laws`` (its finder and :func:`~.laws.formula`)
``archs`` (``mla``, ``mla-norm``, ``mla-norm-eps0``), ``symmetries`` (the group acting on θ) and ``symbolic``
(the block for ``derive``). This folder is the whole family: the registry finds it.
"""

from conslaw_lite.families import Family
from conslaw_lite.families.mla import laws  # noqa: F401  (registers the finder)
from conslaw_lite.families.mla.archs import ARCHITECTURES
from conslaw_lite.families.mla.block import LatentAttention

CASES = ("mla",)  # the derivation case of symbolic.py (imported only when asked for: sympy is slow to load)

SUMMARY = "multi-head latent attention: low-rank query and K/V latents, a shared RoPE key"
FAMILY = Family("mla", SUMMARY, 15, ARCHITECTURES, CASES, f"{__name__}.symbolic")

__all__ = ["FAMILY", "LatentAttention"]
