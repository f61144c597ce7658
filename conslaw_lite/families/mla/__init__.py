"""Multi-head latent attention (DeepSeek-V2/V3): per latent a Gram law, per head ``UQ_hUQ_hᵀ − UK_hUK_hᵀ`` and
``UV_hUV_hᵀ − O_hᵀO_h``, per RoPE block ``Σ_h ‖QR_h^(j)‖² − ‖KR^(j)‖²``.

``block`` (:class:`~.block.LatentAttention`), ``laws`` (its finder and :func:`~.laws.formula`)
and ``archs`` (``mla``, ``mla-norm``, ``mla-norm-eps0``). This folder is the whole family: the registry finds it.
"""

from conslaw_lite.families import Family
from conslaw_lite.families.mla import laws  # noqa: F401  (registers the finder)
from conslaw_lite.families.mla.archs import ARCHITECTURES
from conslaw_lite.families.mla.block import LatentAttention

SUMMARY = "multi-head latent attention: low-rank query and K/V latents, a shared RoPE key"
FAMILY = Family("mla", SUMMARY, 15, ARCHITECTURES)

__all__ = ["FAMILY", "LatentAttention"]
