"""Multi-head latent attention (DeepSeek-V2/V3): queries and keys/values read through low-rank latents.

Token x ∈ R^d is compressed twice, and each head h of n reads the latents back up::

    c_Q  = DQ x  ∈ R^(d_cq)        q_h = [UQ_h c_Q ; RoPE(QR_h c_Q)]   ∈ R^(k + d_r)
    c_KV = DKV x ∈ R^(d_c)         k_h = [UK_h c_KV ; RoPE(KR x)]     ∈ R^(k + d_r)
                                   v_h = UV_h c_KV                    ∈ R^(k_v)

    out = Σ_h O_h softmax(q_h·k_h / √(k + d_r)) v_h

The RoPE key ``KR x`` is one for all heads (the "decoupled" key of DeepSeek-V2, which keeps the
cache at d_c + d_r numbers per token). With ``latent_norm=True`` both latents pass an RMSNorm
with gains γ_Q ∈ R^(d_cq), γ_KV ∈ R^(d_c) (ε = ``norm_eps``), as in DeepSeek-V2/V3. Layout
against ``nn.Linear`` (``y = W x``), head h owning rows h·k:(h+1)·k (h·d_r:(h+1)·d_r for QR,
h·k_v:(h+1)·k_v for UV) and columns h·k_v:(h+1)·k_v of ``O.weight``::

    DQ.weight (d_cq, d)   UQ.weight (n·k, d_cq)   QR.weight (n·d_r, d_cq)
    DKV.weight (d_c, d)   UK.weight (n·k, d_c)    UV.weight (n·k_v, d_c)
    KR.weight (d_r, d)    O.weight (d, n·k_v)
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from conslaw_lite.families.attention.heads import softmax_attention, split_heads
from conslaw_lite.families.attention.positional import rope_frequencies, rope_rotate


class LatentAttention(nn.Module):
    """DeepSeek's multi-head latent attention: ``Σ_h O_h softmax(q_h·k_h/√(k+d_r)) v_h`` (module docstring).

    Sizes: ``d`` tokens, ``n_heads`` heads with ``head_dim`` = k (the no-RoPE part of q and k),
    ``v_dim`` = k_v, ``rope_dim`` = d_r (even), ``kv_rank`` = d_c, ``q_rank`` = d_cq.
    Input (batch, T, d), output (batch, T, d).

    Examples
    ========
    >>> mla = LatentAttention(6, n_heads=2, head_dim=2, v_dim=2, rope_dim=2, kv_rank=3, q_rank=3).double()
    >>> mla(torch.randn(4, 5, 6, dtype=torch.float64)).shape
    torch.Size([4, 5, 6])
    >>> tuple(mla.UK.weight.shape), tuple(mla.KR.weight.shape)  # 2 heads of k = 2; one RoPE key
    ((4, 3), (2, 6))
    >>> LatentAttention(6, n_heads=2, head_dim=2, v_dim=2, rope_dim=3, kv_rank=3, q_rank=3)
    Traceback (most recent call last):
    ...
    ValueError: rope_dim must be even and ≥ 2 (RoPE turns pairs of coordinates), got 3
    """

    def __init__(
        self,
        d: int,
        n_heads: int,
        head_dim: int,
        v_dim: int,
        rope_dim: int,
        kv_rank: int,
        q_rank: int,
        *,
        latent_norm: bool = False,
        norm_eps: float = 1e-6,
        rope_base: float = 10000.0,
    ) -> None:
        super().__init__()
        sizes = dict(d=d, n_heads=n_heads, head_dim=head_dim, v_dim=v_dim, kv_rank=kv_rank, q_rank=q_rank)
        for name, size in sizes.items():
            if not isinstance(size, int) or size < 1:
                raise ValueError(f"{name} must be a positive integer, got {size!r}")
        if not isinstance(rope_dim, int) or rope_dim < 2 or rope_dim % 2:
            raise ValueError(f"rope_dim must be even and ≥ 2 (RoPE turns pairs of coordinates), got {rope_dim!r}")
        if not norm_eps >= 0:
            raise ValueError(f"norm_eps must be ≥ 0, got {norm_eps}")
        self.d, self.n_heads, self.head_dim, self.v_dim = d, n_heads, head_dim, v_dim
        self.rope_dim, self.kv_rank, self.q_rank = rope_dim, kv_rank, q_rank
        self.latent_norm, self.norm_eps = bool(latent_norm), norm_eps
        self.DQ = nn.Linear(d, q_rank, bias=False)
        self.UQ = nn.Linear(q_rank, n_heads * head_dim, bias=False)
        self.QR = nn.Linear(q_rank, n_heads * rope_dim, bias=False)
        self.DKV = nn.Linear(d, kv_rank, bias=False)
        self.UK = nn.Linear(kv_rank, n_heads * head_dim, bias=False)
        self.UV = nn.Linear(kv_rank, n_heads * v_dim, bias=False)
        self.KR = nn.Linear(d, rope_dim, bias=False)
        self.O = nn.Linear(n_heads * v_dim, d, bias=False)
        if latent_norm:
            self.gamma_q = nn.Parameter(torch.ones(q_rank))
            self.gamma_kv = nn.Parameter(torch.ones(kv_rank))
        self.register_buffer("omega", rope_frequencies(rope_dim, rope_base), persistent=False)

    def _latent(self, X: torch.Tensor, down: nn.Linear, gain: str) -> torch.Tensor:
        c = down(X)  # (B, T, rank)
        if not self.latent_norm:
            return c
        return getattr(self, gain) * F.rms_norm(c, (c.shape[-1],), eps=self.norm_eps)

    def forward(self, X: torch.Tensor) -> torch.Tensor:  # X: (B, T, d)
        if X.dim() != 3 or X.shape[-1] != self.d:
            raise ValueError(f"expected input of shape (batch, T, {self.d}), got {tuple(X.shape)}")
        cQ = self._latent(X, self.DQ, "gamma_q")  # (B, T, d_cq)
        cKV = self._latent(X, self.DKV, "gamma_kv")  # (B, T, d_c)
        qC, kC = split_heads(self.UQ(cQ), self.n_heads), split_heads(self.UK(cKV), self.n_heads)  # (B, n, T, k)
        qR = rope_rotate(split_heads(self.QR(cQ), self.n_heads), self.omega)  # (B, n, T, d_r)
        kR = rope_rotate(self.KR(X), self.omega)[:, None]  # (B, 1, T, d_r): one key for every head
        v = split_heads(self.UV(cKV), self.n_heads)  # (B, n, T, k_v)
        scores = (qC @ kC.transpose(-1, -2) + qR @ kR.transpose(-1, -2)) / math.sqrt(self.head_dim + self.rope_dim)
        heads = softmax_attention(scores, v)  # (B, T, n·k_v)
        return self.O(heads)  # (B, T, d)
