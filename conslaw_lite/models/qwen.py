"""A Qwen-3-style decoder, built from the book's blocks so the monitor knows every law.

Data flow, for tokens (batch, T)::

    x = E[tokens]                                  token embedding, (B, T, d)
    repeat n_layers times:
        x = x + Attention(RMSNorm(x))              grouped-query, causal, RoPE, optional QK-norm
        x = x + FFN(RMSNorm(x))                    SwiGLU, or a mixture of SwiGLU experts (shared + routed)
    logits = W_out · RMSNorm(x)                    W_out = E when the head is tied, (B, T, V)

Attention is :class:`~conslaw_lite.families.gqa.block.GroupedQueryAttention` with ``causal=True``, as in
Qwen-3: ``n_heads`` query heads share ``n_kv_heads`` key/value heads. The mask only removes scores, so the
symmetries — one scale per key/value group and RoPE block on the group's queries against its key, GL(k) per
group on V against the group's outputs O — hence the laws are those of the unmasked block.
The feed-forward is :class:`~conslaw_lite.families.ffn.block.SwiGLU` or
:class:`~conslaw_lite.families.moe.block.MoE`. Each block is found by its own law
finder, so :class:`~conslaw_lite.monitor.Monitor` tracks exactly the laws of the
configuration: QK-norm swaps the plain-RoPE laws for the gain laws.
RMSNorm is torch's ``nn.RMSNorm`` (gain γ ∈ R^d), as in the other models of the book.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from conslaw_lite.families.ffn.block import SwiGLU
from conslaw_lite.families.gqa.block import GroupedQueryAttention
from conslaw_lite.families.moe.block import MoE
from conslaw_lite.families.moe_shared.block import SharedMoE


@dataclass(frozen=True)
class QwenConfig:
    """Sizes and options of :class:`QwenDecoder` (Qwen-3's choices where it has one).

    ``n_experts = 0`` gives a dense SwiGLU feed-forward; otherwise a mixture of
    ``n_experts`` SwiGLU experts with ``gating`` ("softmax" or "sigmoid") and
    ``top_k`` (``None`` = dense gating). ``qk_norm``: ``False``, ``"per_head"`` or
    ``"shared"`` (Qwen-3 shares the gains across heads). ``n_kv_heads`` key/value heads serve the
    ``n_heads`` query heads, ``n_heads/n_kv_heads`` each (Qwen-3-8B: 32 on 8; 1 is multi-query attention);
    ``None`` means ``n_heads``, multi-head attention, as ``num_key_value_heads`` in Hugging Face's configs.
    ``n_shared_experts > 0`` adds that many shared experts to the ``n_experts`` routed ones
    (DeepSeek-MoE, softmax gating only).

    Examples
    ========
    >>> QwenConfig(n_experts=4, top_k=2, n_shared_experts=1).n_shared_experts
    1
    >>> QwenConfig(n_heads=8, n_kv_heads=2).n_kv_heads, QwenConfig(n_heads=8).n_kv_heads  # grouped; None: per head
    (2, 8)
    >>> QwenConfig(n_shared_experts=1)
    Traceback (most recent call last):
    ...
    ValueError: n_shared_experts (1) needs routed experts: set n_experts ≥ 1
    """

    vocab_size: int = 256  # V
    dim: int = 64  # d
    n_layers: int = 2
    n_heads: int = 4  # n_q
    n_kv_heads: int | None = None  # n_kv, dividing n_q; None: n_q
    head_dim: int = 16  # k, even (RoPE turns pairs)
    hidden: int = 128  # r, SwiGLU width (per expert in a mixture)
    qk_norm: bool | str = False
    n_experts: int = 0  # n_E
    gating: str = "softmax"
    top_k: int | None = None
    n_shared_experts: int = 0  # n_s: experts every token uses, beside the routed ones
    tie_embeddings: bool = True
    norm_eps: float = 1e-6
    rope_base: float = 10000.0

    def __post_init__(self) -> None:
        if self.n_kv_heads is None:
            object.__setattr__(self, "n_kv_heads", self.n_heads)  # frozen: set once, here
        for name in ("vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "head_dim", "hidden"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads}): equal groups"
            )
        if self.n_experts < 0:
            raise ValueError(f"n_experts must be ≥ 0 (0 = dense SwiGLU), got {self.n_experts}")
        if self.n_shared_experts < 0:
            raise ValueError(f"n_shared_experts must be ≥ 0, got {self.n_shared_experts}")
        if self.n_shared_experts and not self.n_experts:
            raise ValueError(f"n_shared_experts ({self.n_shared_experts}) needs routed experts: set n_experts ≥ 1")
        if self.n_shared_experts and self.gating != "softmax":
            raise ValueError(f"shared experts route with softmax gating (DeepSeek-MoE), got gating={self.gating!r}")


class DecoderLayer(nn.Module):
    """``x + Attention(RMSNorm(x))``, then ``x + FFN(RMSNorm(x))`` (pre-norm, as in Qwen-3)."""

    def __init__(self, c: QwenConfig) -> None:
        super().__init__()
        self.attn_norm = nn.RMSNorm(c.dim, eps=c.norm_eps)
        self.attn = GroupedQueryAttention(
            c.dim,
            c.n_heads,
            c.n_kv_heads,
            c.head_dim,
            pe="rope",
            qk_norm=c.qk_norm,
            norm_eps=c.norm_eps,
            rope_base=c.rope_base,
            causal=True,
        )
        self.ffn_norm = nn.RMSNorm(c.dim, eps=c.norm_eps)
        if c.n_shared_experts:
            top_k = c.top_k or c.n_experts  # None: every routed expert
            self.ffn = SharedMoE(c.dim, c.n_shared_experts, c.n_experts, c.hidden, c.dim, top_k=top_k)
        elif c.n_experts:
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
    >>> model = QwenDecoder(QwenConfig(vocab_size=10, dim=8, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=4, hidden=6))
    >>> model(torch.zeros(3, 5, dtype=torch.long)).shape
    torch.Size([3, 5, 10])
    >>> tuple(model.layers[0].attn.K.weight.shape)  # one key head of width 4 for both query heads
    (4, 8)
    >>> QwenConfig(n_heads=3, n_kv_heads=2)
    Traceback (most recent call last):
    ...
    ValueError: n_heads (3) must be a multiple of n_kv_heads (2): equal groups
    >>> model.head.weight is model.embed.weight  # tied head
    True
    """

    def __init__(self, config: QwenConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.dim)  # E: (V, d)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.n_layers))
        self.norm = nn.RMSNorm(config.dim, eps=config.norm_eps)
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
