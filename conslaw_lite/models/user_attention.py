"""Self-attention as users write it, no registered block: what :func:`conslaw_lite.find_laws.find_laws` must search.

Both compute, per head h of width k = d / heads, ``softmax(q_h k_hᵀ / √k) v_h`` and then ``o`` of the heads side by
side; their laws are ``Q_h Q_hᵀ − K_h K_hᵀ`` and ``V_h V_hᵀ − O_hᵀ O_h`` (k × k, biases as extra columns), and each
key bias entry alone (a softmax ignores what it adds to every score of a row).

* :class:`SplitAttention`: q, k and v from one layer ``c_attn`` of 3d outputs, split after it (nanoGPT's
  ``CausalSelfAttention``, timm's ``qkv``): a head's laws pair rows B with rows d + B of one matrix.
* :class:`TorchSelfAttention`: ``nn.MultiheadAttention`` called on one input, ``in_proj_weight`` the same 3d × d.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class SplitAttention(nn.Module):
    """``c_attn(x).split(d, dim=-1)`` into q, k, v, heads cut out by ``view``; input (batch, tokens, d).

    Examples
    ========
    >>> attention = SplitAttention(8, heads=2)
    >>> attention(torch.randn(3, 5, 8)).shape, attention.c_attn.weight.shape
    (torch.Size([3, 5, 8]), torch.Size([24, 8]))
    """

    def __init__(self, d: int, heads: int, bias: bool = True) -> None:
        super().__init__()
        if d % heads:
            raise ValueError(f"SplitAttention: d = {d} is not a multiple of heads = {heads}")
        self.heads = heads
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d, bias=bias), nn.Linear(d, d, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        q, k, v = (t.view(B, T, self.heads, -1).transpose(1, 2) for t in self.c_attn(x).split(d, dim=2))
        scores = (q @ k.transpose(-1, -2) / math.sqrt(d // self.heads)).softmax(-1)
        return self.c_proj((scores @ v).transpose(1, 2).reshape(B, T, d))


class TorchSelfAttention(nn.Module):
    """``nn.MultiheadAttention(d, heads, batch_first=True)`` on (x, x, x); input (batch, tokens, d).

    Examples
    ========
    >>> TorchSelfAttention(8, heads=2).mha.in_proj_weight.shape
    torch.Size([24, 8])
    """

    def __init__(self, d: int, heads: int, bias: bool = True) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(d, heads, bias=bias, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mha(x, x, x, need_weights=False)[0]
