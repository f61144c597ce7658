"""A small timm ``VisionTransformer`` whose blocks the monitor knows: learned absolute PE, SwiGLU MLP.

timm supplies the vision parts — patch embedding, class token, learned
position embedding (``pos_embed="learn"``), LayerNorm pre-norm blocks, the
classifier head. Two of its layer slots are filled so every block has known
laws: the MLP is timm's own ``SwiGLU`` (``fc2(silu(fc1_g x) ⊙ fc1_x x)``, whose
finder lives in :mod:`conslaw_lite.families.ffn.laws`), and attention is the book's
:class:`~conslaw_lite.families.attention.block.MultiHeadAttention` without position
encoding (the position is already in the tokens), behind timm's constructor.
No biases in attention or MLP, so the laws are the paper's matrix laws.
"""

from __future__ import annotations

from functools import partial

import torch
from timm.layers import LayerNorm, SwiGLU
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from conslaw_lite.families.attention.block import MultiHeadAttention


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
    norm_eps: float = 1e-6,
) -> VisionTransformer:
    """A timm ``VisionTransformer`` with learned absolute PE, SwiGLU MLPs and the book's attention.

    ``(img_size / patch_size)²`` patches plus a class token; hidden width of each
    SwiGLU ``r = mlp_ratio · dim``; every LayerNorm divides by ``sqrt(var + norm_eps)`` (timm's
    ε = 10⁻⁶ by default). Defaults fit 8×8 digits. Besides its blocks' laws, the network keeps
    the laws of its norms, stream and embeddings (:mod:`conslaw_lite.families.network.vit`).

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
        norm_layer=partial(LayerNorm, eps=norm_eps),
        mlp_layer=SwiGLU,
        act_layer=nn.SiLU,  # the gate of SwiGLU
        attn_layer=TimmAttention,
        weight_init="skip",  # PyTorch's default init for the layers: timm's std-0.02 weights barely learn this small
    )
    # "skip" leaves the two embeddings unset; timm's own choices for them:
    nn.init.trunc_normal_(vit.pos_embed, std=0.02)
    nn.init.normal_(vit.cls_token, std=1e-6)
    return vit


def embeddings_at_weight_scale(vit: VisionTransformer) -> VisionTransformer:
    """Redraw the class token (timm: std 10⁻⁶) and position table (std 0.02) at the blocks' weight scale, in place.

    The scale is the RMS of the first block's ``Q`` and the head's weights. The law counter
    draws θ at each tensor's own scale; at timm's, the class token's stream (class token plus
    its position, size 0.02) sits next to the degenerate point 0 of the LayerNorm reading it,
    its brackets are much larger than the others' and a direction of Lie(W) stays near round-off,
    so two random θ can disagree. A generic θ of any scale has the same count; at this one the
    brackets stay further from round-off (chapter 10).

    Examples
    ========
    >>> vit = embeddings_at_weight_scale(small_vit(dim=8, depth=1))
    >>> bool(vit.cls_token.abs().max() > 1e-3)
    True
    """
    weights = torch.cat([vit.blocks[0].attn.Q.weight.detach().reshape(-1), vit.head.weight.detach().reshape(-1)])
    scale = float(weights.pow(2).mean().sqrt())
    with torch.no_grad():
        for table in (vit.cls_token, vit.pos_embed):
            table.normal_(0.0, scale)
    return vit
