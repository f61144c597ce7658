"""A small timm ``VisionTransformer`` whose blocks the monitor knows: learned absolute PE, SwiGLU MLP.

timm supplies the vision parts — patch embedding, class token, learned
position embedding (``pos_embed="learn"``), LayerNorm pre-norm blocks, the
classifier head. Two of its layer slots are filled so every block has known
laws: the MLP is timm's own ``SwiGLU`` (``fc2(silu(fc1_g x) ⊙ fc1_x x)``, whose
finder lives in :mod:`conslaw_lite.laws.ffn`), and attention is the book's
:class:`~conslaw_lite.blocks.attention.MultiHeadAttention` without position
encoding (the position is already in the tokens), behind timm's constructor.
No biases in attention or MLP, so the laws are the paper's matrix laws.
"""

from __future__ import annotations

import torch
from timm.layers import SwiGLU
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from conslaw_lite.blocks.attention import MultiHeadAttention


class TimmAttention(MultiHeadAttention):
    """:class:`MultiHeadAttention` (no PE) with timm's attention constructor and call signature.

    timm builds it as ``TimmAttention(dim, num_heads=..., qkv_bias=..., ...)`` and calls
    ``attn(x, attn_mask=None, is_causal=False)``; head width ``k = dim / num_heads``.
    The options timm passes (biases, dropout, norms) are refused unless they are off.

    Examples
    ========
    >>> attn = TimmAttention(8, num_heads=2)
    >>> attn(torch.zeros(1, 3, 8)).shape, attn.head_dim
    (torch.Size([1, 3, 8]), 4)
    """

    def __init__(self, dim: int, num_heads: int = 8, **timm_options: object) -> None:
        if dim % num_heads:
            raise ValueError(f"dim={dim} must be divisible by num_heads={num_heads}")
        switched_on = [k for k in ("qkv_bias", "qk_norm", "scale_norm", "proj_bias") if timm_options.get(k)]
        if switched_on:
            raise ValueError(f"TimmAttention has none of timm's {switched_on}; build the ViT without them")
        super().__init__(dim, num_heads, dim // num_heads, pe="none")

    def forward(self, X: torch.Tensor, attn_mask: torch.Tensor | None = None, is_causal: bool = False) -> torch.Tensor:
        if attn_mask is not None or is_causal:
            raise ValueError("TimmAttention attends to every token; masks are not supported")
        return super().forward(X)


def small_vit(
    img_size: int = 8,
    patch_size: int = 2,
    in_chans: int = 1,
    num_classes: int = 10,
    dim: int = 32,
    depth: int = 2,
    num_heads: int = 2,
    mlp_ratio: float = 2.0,
) -> VisionTransformer:
    """A timm ``VisionTransformer`` with learned absolute PE, SwiGLU MLPs and the book's attention.

    ``(img_size / patch_size)²`` patches plus a class token; hidden width of each
    SwiGLU ``r = mlp_ratio · dim``. Defaults fit 8×8 digits.

    Examples
    ========
    >>> vit = small_vit()
    >>> vit(torch.zeros(2, 1, 8, 8)).shape, tuple(vit.pos_embed.shape)  # 16 patches + class token
    (torch.Size([2, 10]), (1, 17, 32))
    """
    if img_size % patch_size:
        raise ValueError(f"img_size={img_size} must be divisible by patch_size={patch_size}")
    vit = VisionTransformer(
        img_size=img_size,
        patch_size=patch_size,
        in_chans=in_chans,
        num_classes=num_classes,
        embed_dim=dim,
        depth=depth,
        num_heads=num_heads,
        mlp_ratio=mlp_ratio,
        qkv_bias=False,
        proj_bias=False,
        pos_embed="learn",
        mlp_layer=SwiGLU,
        act_layer=nn.SiLU,  # the gate of SwiGLU
        attn_layer=TimmAttention,
        weight_init="skip",  # PyTorch's default init for the layers: timm's std-0.02 weights barely learn this small
    )
    # "skip" leaves the two embeddings unset; timm's own choices for them:
    nn.init.trunc_normal_(vit.pos_embed, std=0.02)
    nn.init.normal_(vit.cls_token, std=1e-6)
    return vit
