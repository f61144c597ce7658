"""Grouped-query attention: n_q query heads share n_kv key/value heads, ``n_q/n_kv`` queries per group.

Query head h of group g = h // (n_q/n_kv) maps tokens X ∈ R^(T×d) to
``softmax(X Q_h K_gᵀ Xᵀ / √k) X V_g O_hᵀ`` with Q_h, O_h, K_g, V_g ∈ R^(d×k); the block returns the
sum over query heads (Llama-2 70B, Mistral, Qwen use it to shrink the key/value cache). With
``n_kv = n_q`` it is multi-head attention; the layout against ``nn.Linear`` is the same::

    Q_h = Q.weight[h·k:(h+1)·k, :]ᵀ    K_g = K.weight[g·k:(g+1)·k, :]ᵀ    (likewise V_g)
    O_h = O.weight[:, h·k:(h+1)·k]
"""

from __future__ import annotations

import math

import torch
from torch import nn


class GroupedQueryAttention(nn.Module):
    """``Σ_h softmax(X Q_h K_gᵀ Xᵀ/√k) X V_g O_hᵀ``, head h in group g = h // (n_heads/n_kv_heads).

    Examples
    ========
    >>> gqa = GroupedQueryAttention(4, n_heads=4, n_kv_heads=2, head_dim=2).double()
    >>> gqa(torch.randn(3, 5, 4, dtype=torch.float64)).shape
    torch.Size([3, 5, 4])
    >>> tuple(gqa.Q.weight.shape), tuple(gqa.K.weight.shape)  # 4 query heads, 2 key heads
    ((8, 4), (4, 4))
    >>> GroupedQueryAttention(4, n_heads=3, n_kv_heads=2, head_dim=2)
    Traceback (most recent call last):
    ...
    ValueError: n_heads (3) must be a multiple of n_kv_heads (2): equal groups
    """

    def __init__(self, d: int, n_heads: int, n_kv_heads: int, head_dim: int) -> None:
        super().__init__()
        if min(d, n_heads, n_kv_heads, head_dim) < 1:
            raise ValueError(f"sizes must be positive: d={d}, n_heads={n_heads}, n_kv_heads={n_kv_heads}, k={head_dim}")
        if n_heads % n_kv_heads:
            raise ValueError(f"n_heads ({n_heads}) must be a multiple of n_kv_heads ({n_kv_heads}): equal groups")
        self.d, self.n_heads, self.n_kv_heads, self.head_dim = d, n_heads, n_kv_heads, head_dim
        self.Q = nn.Linear(d, n_heads * head_dim, bias=False)
        self.K = nn.Linear(d, n_kv_heads * head_dim, bias=False)
        self.V = nn.Linear(d, n_kv_heads * head_dim, bias=False)
        self.O = nn.Linear(n_heads * head_dim, d, bias=False)

    def _split(self, z: torch.Tensor, heads: int) -> torch.Tensor:
        B, T, _ = z.shape
        return z.view(B, T, heads, self.head_dim).transpose(1, 2)  # (B, heads, T, k)

    def forward(self, X: torch.Tensor) -> torch.Tensor:  # X: (B, T, d)
        if X.dim() != 3 or X.shape[-1] != self.d:
            raise ValueError(f"expected input of shape (batch, T, {self.d}), got {tuple(X.shape)}")
        B, T, _ = X.shape
        per_group = self.n_heads // self.n_kv_heads
        q = self._split(self.Q(X), self.n_heads)  # (B, n_q, T, k)
        k = self._split(self.K(X), self.n_kv_heads).repeat_interleave(per_group, dim=1)  # (B, n_q, T, k)
        v = self._split(self.V(X), self.n_kv_heads).repeat_interleave(per_group, dim=1)  # (B, n_q, T, k)
        A = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.head_dim), dim=-1)  # (B, n_q, T, T)
        heads = (A @ v).transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim)  # (B, T, n_q·k)
        return self.O(heads)  # (B, T, d)
