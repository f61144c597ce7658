"""Grouped-query attention: n_q query heads share n_kv key/value heads, ``n_q/n_kv`` queries per group.

Query head h of group g = h // (n_q/n_kv) maps tokens X ∈ R^(T×d) to
``softmax(X Q_h K_gᵀ Xᵀ / √k) X V_g O_hᵀ`` with Q_h, O_h, K_g, V_g ∈ R^(d×k); the block returns the
sum over query heads (Llama-2 70B, Mistral, Qwen use it to shrink the key/value cache). With
``n_kv = n_q`` it is multi-head attention, with ``n_kv = 1`` multi-query attention; the layout against
``nn.Linear`` is the same::

    Q_h = Q.weight[h·k:(h+1)·k, :]ᵀ    K_g = K.weight[g·k:(g+1)·k, :]ᵀ    (likewise V_g)
    O_h = O.weight[:, h·k:(h+1)·k]

Options as in :class:`~conslaw_lite.families.attention.block.MultiHeadAttention`: ``pe="rope"`` turns
each 2×2 block (2j, 2j+1) of q and k by ``p·ω_j``; ``qk_norm`` applies RMSNorm with gains to each
query head's q and each key head's k before RoPE (Qwen-3), ``"per_head"`` gains γ_q (n_q, k) and
γ_k (n_kv, k), ``"shared"`` gains (k,) for every head; ``causal`` masks the scores of later tokens,
which removes scores only and leaves the symmetries — hence the laws — of the unmasked block.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from conslaw_lite.families.attention.heads import (
    check_options,
    qk_gain,
    query_key_heads,
    softmax_attention,
    split_heads,
)
from conslaw_lite.families.attention.positional import rope_frequencies

PES = ("none", "rope")


class GroupedQueryAttention(nn.Module):
    """``Σ_h softmax(X Q_h K_gᵀ Xᵀ/√k) X V_g O_hᵀ``, head h in group g = h // (n_heads/n_kv_heads).

    Examples
    ========
    >>> gqa = GroupedQueryAttention(4, n_heads=4, n_kv_heads=2, head_dim=2).double()
    >>> gqa(torch.randn(3, 5, 4, dtype=torch.float64)).shape
    torch.Size([3, 5, 4])
    >>> tuple(gqa.Q.weight.shape), tuple(gqa.K.weight.shape)  # 4 query heads, 2 key heads
    ((8, 4), (4, 4))
    >>> qwen = GroupedQueryAttention(8, 4, 2, 4, pe="rope", qk_norm="per_head", causal=True)
    >>> tuple(qwen.gamma_q.shape), tuple(qwen.gamma_k.shape)  # a gain row per query head, per key head
    ((4, 4), (2, 4))
    >>> GroupedQueryAttention(4, n_heads=3, n_kv_heads=2, head_dim=2)
    Traceback (most recent call last):
    ...
    ValueError: n_heads (3) must be a multiple of n_kv_heads (2): equal groups
    """

    def __init__(
        self,
        d: int,
        n_heads: int,
        n_kv_heads: int,
        head_dim: int,
        *,
        pe: str = "none",
        qk_norm: bool | str = False,
        norm_eps: float = 1e-6,
        rope_base: float = 10000.0,
        causal: bool = False,
    ) -> None:
        super().__init__()
        if min(d, n_heads, n_kv_heads, head_dim) < 1:
            raise ValueError(f"sizes must be positive: d={d}, n_heads={n_heads}, n_kv_heads={n_kv_heads}, k={head_dim}")
        if n_heads % n_kv_heads:
            raise ValueError(f"n_heads ({n_heads}) must be a multiple of n_kv_heads ({n_kv_heads}): equal groups")
        check_options(pe, PES, qk_norm, norm_eps, causal)
        self.d, self.n_heads, self.n_kv_heads, self.head_dim = d, n_heads, n_kv_heads, head_dim
        self.pe, self.qk_norm, self.norm_eps, self.causal = pe, qk_norm, norm_eps, causal
        self.Q = nn.Linear(d, n_heads * head_dim, bias=False)
        self.K = nn.Linear(d, n_kv_heads * head_dim, bias=False)
        self.V = nn.Linear(d, n_kv_heads * head_dim, bias=False)
        self.O = nn.Linear(n_heads * head_dim, d, bias=False)
        if qk_norm:
            self.gamma_q, self.gamma_k = qk_gain(qk_norm, n_heads, head_dim), qk_gain(qk_norm, n_kv_heads, head_dim)
        if pe == "rope":
            self.register_buffer("omega", rope_frequencies(head_dim, rope_base), persistent=False)

    def forward(self, X: torch.Tensor) -> torch.Tensor:  # X: (B, T, d)
        if X.dim() != 3 or X.shape[-1] != self.d:
            raise ValueError(f"expected input of shape (batch, T, {self.d}), got {tuple(X.shape)}")
        per_group, omega = self.n_heads // self.n_kv_heads, getattr(self, "omega", None)
        q = query_key_heads(self.Q(X), self.n_heads, getattr(self, "gamma_q", None), self.norm_eps, omega)
        k = query_key_heads(self.K(X), self.n_kv_heads, getattr(self, "gamma_k", None), self.norm_eps, omega)
        v = split_heads(self.V(X), self.n_kv_heads)  # no norm, no turn: (B, n_kv, T, k)
        k, v = k.repeat_interleave(per_group, dim=1), v.repeat_interleave(per_group, dim=1)  # (B, n_q, T, k)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)  # (B, n_q, T, T)
        heads = softmax_attention(scores, v, self.causal)  # (B, T, n_q·k)
        return self.O(heads)  # (B, T, d)
