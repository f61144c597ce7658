"""A Qwen-3-style decoder, built from the book's blocks so the monitor knows every law.

Data flow, for tokens (batch, T)::

    x = E[tokens]                                  token embedding, (B, T, d)
    repeat n_layers times:
        x = x + Attention(RMSNorm(x))              causal, RoPE, optional QK-norm
        x = x + FFN(RMSNorm(x))                    SwiGLU, or a mixture of SwiGLU experts
    logits = W_out · RMSNorm(x)                    W_out = E when the head is tied, (B, T, V)

Attention is :class:`~conslaw_lite.blocks.attention.MultiHeadAttention` with a
causal mask (:class:`CausalSelfAttention`): the mask only removes scores, so the
symmetries ``Q → QG, K → KG^{−ᵀ}`` (one scale per RoPE block) and
``V → VG, O → OG^{−ᵀ}`` — hence the laws — are those of the unmasked block.
The feed-forward is :class:`~conslaw_lite.blocks.ffn.SwiGLU` or
:class:`~conslaw_lite.blocks.moe.MoE`. Each block is found by its own law
finder, so :class:`~conslaw_lite.monitor.Monitor` tracks exactly the laws of the
configuration: QK-norm swaps the plain-RoPE laws for the gain laws.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from conslaw_lite.blocks.attention import MultiHeadAttention
from conslaw_lite.blocks.ffn import SwiGLU
from conslaw_lite.blocks.moe import MoE


@dataclass(frozen=True)
class QwenConfig:
    """Sizes and options of :class:`QwenDecoder` (Qwen-3's choices where it has one).

    ``n_experts = 0`` gives a dense SwiGLU feed-forward; otherwise a mixture of
    ``n_experts`` SwiGLU experts with ``gating`` ("softmax" or "sigmoid") and
    ``top_k`` (``None`` = dense gating). ``qk_norm``: ``False``, ``"per_head"`` or
    ``"shared"`` (Qwen-3 shares the gains across heads).
    """

    vocab_size: int = 256  # V
    dim: int = 64  # d
    n_layers: int = 2
    n_heads: int = 4  # n
    head_dim: int = 16  # k, even (RoPE turns pairs)
    hidden: int = 128  # r, SwiGLU width (per expert in a mixture)
    qk_norm: bool | str = False
    n_experts: int = 0  # n_E
    gating: str = "softmax"
    top_k: int | None = None
    tie_embeddings: bool = True
    norm_eps: float = 1e-6
    rope_base: float = 10000.0

    def __post_init__(self) -> None:
        for name in ("vocab_size", "dim", "n_layers", "n_heads", "head_dim", "hidden"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.n_experts < 0:
            raise ValueError(f"n_experts must be ≥ 0 (0 = dense SwiGLU), got {self.n_experts}")


class RMSNorm(nn.Module):
    """``γ ⊙ x / √(mean(x²) + ε)`` over the last axis, γ ∈ R^d (``weight``).

    Examples
    ========
    >>> norm = RMSNorm(2, eps=0.0)
    >>> norm(torch.tensor([[3.0, 4.0]])).mul(2 ** -0.5 * 5).tolist()  # x / rms(x), rms = 5/√2
    [[3.0, 4.0]]
    """

    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))  # γ

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (..., d)
        return self.weight * x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps)


class CausalSelfAttention(MultiHeadAttention):
    """:class:`MultiHeadAttention` where token t attends only to tokens s ≤ t.

    Head i: ``softmax(mask(q_i k_iᵀ/√k)) v_i O_iᵀ`` with the same Q, K, V, O (and
    RoPE, QK-norm) as the parent; only the mask is new.

    Examples
    ========
    >>> attn = CausalSelfAttention(4, 2, 2, pe="rope").double()
    >>> X = torch.randn(1, 5, 4, dtype=torch.float64)
    >>> Y = attn(X)
    >>> X2 = X.clone(); X2[0, 4] += 1.0  # change the last token only
    >>> bool(torch.allclose(attn(X2)[0, :4], Y[0, :4]))  # earlier outputs cannot see it
    True
    """

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        if X.dim() != 3 or X.shape[-1] != self.d:
            raise ValueError(f"expected input of shape (batch, T, {self.d}), got {tuple(X.shape)}")
        B, T, _ = X.shape
        q = self._heads(X, self.Q, getattr(self, "gamma_q", None))  # (B, n, T, k), normed and turned
        k = self._heads(X, self.K, getattr(self, "gamma_k", None))
        v = self.V(X).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, n, T, k)
        heads = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # scale 1/√k, (B, n, T, k)
        return self.O(heads.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim))  # (B, T, d)


class DecoderLayer(nn.Module):
    """``x + Attention(RMSNorm(x))``, then ``x + FFN(RMSNorm(x))`` (pre-norm, as in Qwen-3)."""

    def __init__(self, c: QwenConfig) -> None:
        super().__init__()
        self.attn_norm = RMSNorm(c.dim, c.norm_eps)
        self.attn = CausalSelfAttention(
            c.dim, c.n_heads, c.head_dim, pe="rope", qk_norm=c.qk_norm, norm_eps=c.norm_eps, rope_base=c.rope_base
        )
        self.ffn_norm = RMSNorm(c.dim, c.norm_eps)
        if c.n_experts:
            self.ffn = MoE(c.dim, c.n_experts, c.hidden, c.dim, gating=c.gating, top_k=c.top_k)
        else:
            self.ffn = SwiGLU(c.dim, c.hidden, c.dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, T, d)
        x = x + self.attn(self.attn_norm(x))
        return x + self.ffn(self.ffn_norm(x))


class QwenDecoder(nn.Module):
    """Token ids (B, T) → next-token logits (B, T, V).

    Examples
    ========
    >>> model = QwenDecoder(QwenConfig(vocab_size=10, dim=8, n_layers=1, n_heads=2, head_dim=4, hidden=6))
    >>> model(torch.zeros(3, 5, dtype=torch.long)).shape
    torch.Size([3, 5, 10])
    >>> model.head.weight is model.embed.weight  # tied head
    True
    """

    def __init__(self, config: QwenConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.dim)  # E: (V, d)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.dim, config.norm_eps)
        self.head = nn.Linear(config.dim, config.vocab_size, bias=False)  # W_out: (V, d)
        if config.tie_embeddings:
            self.head.weight = self.embed.weight
        # Small embeddings keep the initial logits near uniform, as in GPT-2 and Qwen.
        nn.init.normal_(self.embed.weight, std=0.02)
        # QK-norm gains start at 1 in Qwen-3, where the gain laws ‖γ_q⁽ʲ⁾‖² − ‖γ_k⁽ʲ⁾‖² are exactly 0 and
        # their relative drift is undefined; gains drawn from [0.5, 1.5] make the laws measurable.
        for name, p in self.named_parameters():
            if name.endswith(("gamma_q", "gamma_k")):
                nn.init.uniform_(p, 0.5, 1.5)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.dim() != 2:
            raise ValueError(f"expected token ids of shape (batch, T), got {tuple(tokens.shape)}")
        x = self.embed(tokens)  # (B, T, d)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))  # (B, T, V)
