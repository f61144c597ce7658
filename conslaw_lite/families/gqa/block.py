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
import torch.nn.functional as F
from torch import nn

from conslaw_lite.families.attention.positional import rope_frequencies, rope_rotate

PES = ("none", "rope")
QK_NORMS = (False, "per_head", "shared")


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
        if pe not in PES:
            raise ValueError(f"pe must be one of {PES}, got {pe!r}")
        if qk_norm not in QK_NORMS:
            raise ValueError(f"qk_norm must be one of {QK_NORMS}, got {qk_norm!r}")
        if norm_eps < 0:
            raise ValueError(f"norm_eps must be ≥ 0, got {norm_eps}")
        if not isinstance(causal, bool):
            raise TypeError(f"causal must be True or False, got {causal!r}")
        self.d, self.n_heads, self.n_kv_heads, self.head_dim = d, n_heads, n_kv_heads, head_dim
        self.pe, self.qk_norm, self.norm_eps, self.causal = pe, qk_norm, norm_eps, causal
        self.Q = nn.Linear(d, n_heads * head_dim, bias=False)
        self.K = nn.Linear(d, n_kv_heads * head_dim, bias=False)
        self.V = nn.Linear(d, n_kv_heads * head_dim, bias=False)
        self.O = nn.Linear(n_heads * head_dim, d, bias=False)
        if qk_norm:
            per_head = qk_norm == "per_head"
            self.gamma_q = nn.Parameter(torch.ones((n_heads, head_dim) if per_head else (head_dim,)))
            self.gamma_k = nn.Parameter(torch.ones((n_kv_heads, head_dim) if per_head else (head_dim,)))
        if pe == "rope":
            self.register_buffer("omega", rope_frequencies(head_dim, rope_base), persistent=False)

    def _heads(self, X: torch.Tensor, proj: nn.Linear, heads: int, gamma: torch.Tensor | None) -> torch.Tensor:
        B, T, _ = X.shape
        z = proj(X).view(B, T, heads, self.head_dim).transpose(1, 2)  # (B, heads, T, k)
        if gamma is not None:
            g = gamma[:, None, :] if gamma.dim() == 2 else gamma  # (heads, 1, k) or (k,)
            z = g * F.rms_norm(z, (self.head_dim,), eps=self.norm_eps)
        if self.pe == "rope":
            z = rope_rotate(z, self.omega)
        return z

    def forward(self, X: torch.Tensor) -> torch.Tensor:  # X: (B, T, d)
        if X.dim() != 3 or X.shape[-1] != self.d:
            raise ValueError(f"expected input of shape (batch, T, {self.d}), got {tuple(X.shape)}")
        B, T, _ = X.shape
        per_group = self.n_heads // self.n_kv_heads
        q = self._heads(X, self.Q, self.n_heads, getattr(self, "gamma_q", None))  # (B, n_q, T, k)
        k = self._heads(X, self.K, self.n_kv_heads, getattr(self, "gamma_k", None))  # (B, n_kv, T, k)
        v = self.V(X).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)  # no norm, no turn: (B, n_kv, T, k)
        k, v = k.repeat_interleave(per_group, dim=1), v.repeat_interleave(per_group, dim=1)  # (B, n_q, T, k)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)  # (B, n_q, T, T)
        if self.causal:
            later = torch.ones(T, T, dtype=torch.bool, device=X.device).triu(1)  # s > t
            scores = scores.masked_fill(later, -math.inf)
        A = torch.softmax(scores, dim=-1)  # (B, n_q, T, T)
        heads = (A @ v).transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim)  # (B, T, n_q·k)
        return self.O(heads)  # (B, T, d)
