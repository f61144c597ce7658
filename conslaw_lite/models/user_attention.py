"""Self-attention as users write it, no registered block: what :func:`conslaw_lite.find_laws.find_laws` must search.

Both compute, per head h of width k = d / heads, ``softmax(q_h k_hᵀ / √k) v_h`` and then ``o`` of the heads side by
side; their laws are ``Q_h Q_hᵀ − K_h K_hᵀ`` and ``V_h V_hᵀ − O_hᵀ O_h`` (k × k, biases as extra columns), and each
key bias entry alone (a softmax ignores what it adds to every score of a row).

* :class:`SplitAttention`: q, k and v from one layer ``c_attn`` of 3d outputs, split after it (nanoGPT's
  ``CausalSelfAttention``, timm's ``qkv``): a head's laws pair rows B with rows d + B of one matrix.
* :class:`TorchSelfAttention`: ``nn.MultiheadAttention`` called on one input, ``in_proj_weight`` the same 3d × d.
* :class:`GroupedAttention`: Llama's layout, separate ``q_proj``, ``k_proj``, ``v_proj``, ``o_proj`` without biases,
  each K/V head shared by G query heads (``repeat_interleave``), RoPE optional. Per K/V head g:
  ``Σ_{h∈g} Q_h Q_hᵀ − K_g K_gᵀ`` (under RoPE, per pair of turned coordinates j, j + k/2, the trace of its 2 × 2
  block) and ``V_g V_gᵀ − Σ_{h∈g} O_hᵀ O_h``.
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


class GroupedAttention(nn.Module):
    """Grouped-query attention as Llama's code writes it: ``heads`` query heads on ``kv_heads`` K/V heads of width
    k = d / heads, query head h reading K/V head h // (heads / kv_heads); ``rope``: rotary embeddings turning
    coordinates j and j + k/2 of each head by position · 10000^(−2j/k); ``fused``: q, k and v from one ``qkv_proj``
    split after it (Phi-3); input (batch, tokens, d).

    Examples
    ========
    >>> attention = GroupedAttention(8, heads=2, kv_heads=1)
    >>> attention(torch.randn(3, 5, 8)).shape, attention.k_proj.weight.shape
    (torch.Size([3, 5, 8]), torch.Size([4, 8]))
    """

    def __init__(self, d: int, heads: int, kv_heads: int, rope: bool = False, fused: bool = False) -> None:
        super().__init__()
        if d % heads or heads % kv_heads:
            raise ValueError(f"GroupedAttention: d = {d}, heads = {heads}, kv_heads = {kv_heads} do not divide")
        self.heads, self.kv_heads, self.rope, self.sizes = heads, kv_heads, rope, [d, *[kv_heads * d // heads] * 2]
        if fused:  # Phi-3's qkv_proj: the rows of q, then those of k and v
            self.qkv_proj = nn.Linear(d, sum(self.sizes), bias=False)
        else:
            self.q_proj = nn.Linear(d, d, bias=False)
            self.k_proj, self.v_proj = (nn.Linear(d, size, bias=False) for size in self.sizes[1:])
        self.o_proj = nn.Linear(d, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        if hasattr(self, "qkv_proj"):
            q, k, v = self.qkv_proj(x).split(self.sizes, dim=-1)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q = q.view(B, T, self.heads, -1).transpose(1, 2)
        k, v = (t.view(B, T, self.kv_heads, -1).transpose(1, 2) for t in (k, v))
        if self.rope:
            q, k = _rotated(q), _rotated(k)
        k, v = (t.repeat_interleave(self.heads // self.kv_heads, dim=1) for t in (k, v))
        scores = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).softmax(-1)
        return self.o_proj((scores @ v).transpose(1, 2).reshape(B, T, d))


def _rotated(x: torch.Tensor) -> torch.Tensor:
    """Hugging Face's ``x cos + rotate_half(x) sin`` at each position of x (…, tokens, k)."""
    T, k = x.shape[-2:]
    frequencies = 10000.0 ** (-torch.arange(0, k, 2, dtype=x.dtype) / k)
    angles = torch.outer(torch.arange(T, dtype=x.dtype), frequencies).repeat(1, 2)
    first, second = x.chunk(2, dim=-1)
    return x * angles.cos() + torch.cat((-second, first), dim=-1) * angles.sin()
