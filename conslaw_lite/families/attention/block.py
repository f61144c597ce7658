"""Multi-head self-attention in the paper's per-head notation.

Head i of n maps tokens X ∈ R^(T×d) to ``softmax(X Q_i K_iᵀ Xᵀ / √k) X V_i O_iᵀ``
with Q_i, K_i, V_i, O_i ∈ R^(d×k); the block returns the sum over heads.

Layout against ``nn.Linear`` (``y = W x``, W ∈ R^(out×in)), with rows/columns
``i·k : (i+1)·k`` belonging to head i::

    Q_i = Q.weight[i·k:(i+1)·k, :]ᵀ     (Q.weight: (n·k, d); likewise K, V)
    O_i = O.weight[:, i·k:(i+1)·k]      (O.weight: (d, n·k))

Options: ``pe="sinusoidal"`` adds a fixed table to X; ``pe="rope"`` turns each
2×2 block of q and k by a position-dependent angle (:mod:`.positional`);
``qk_norm`` applies RMSNorm with gains γ_q, γ_k to each head's q and k before RoPE
(Qwen-3): ``"per_head"`` gains of shape (n, k), ``"shared"`` gains of shape (k,);
``bias=True`` gives Q, K, V and O a bias each; ``causal=True`` lets token t attend
only to tokens s ≤ t (a decoder). The law finder ignores ``causal``: the mask only
removes scores, and leaves the symmetries ``Q_i → Q_i G, K_i → K_i G^{−ᵀ}``,
``V_i → V_i G, O_i → O_i G^{−ᵀ}`` — hence the laws — untouched.
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
from conslaw_lite.families.attention.positional import rope_frequencies, sinusoidal_table

PES = ("none", "sinusoidal", "rope")


class MultiHeadAttention(nn.Module):
    """n heads of width k on tokens of width d: ``Σ_i softmax(X Q_i K_iᵀ Xᵀ/√k) X V_i O_iᵀ``.

    Input (batch, T, d), output (batch, T, d). With ``qk_norm`` the rows of
    ``q = X Q_i`` become ``γ_q ⊙ q / √(mean(q²) + ε)`` (likewise k), ε = ``norm_eps``.
    With ``causal`` the scores of s > t are −∞ before the softmax (row t sees tokens s ≤ t);
    the laws are those of the unmasked block, since the mask does not touch the parameter symmetries.

    Examples
    ========
    >>> import torch
    >>> mha = MultiHeadAttention(4, 2, 2, pe="rope", rope_base=9.0).double()
    >>> mha(torch.randn(3, 5, 4, dtype=torch.float64)).shape
    torch.Size([3, 5, 4])
    >>> mha.head(1)["Q"].shape  # Q_1 ∈ R^(d×k)
    torch.Size([4, 2])
    >>> dec = MultiHeadAttention(4, 2, 2, pe="rope", causal=True).double()
    >>> X = torch.randn(1, 5, 4, dtype=torch.float64)
    >>> X2 = X.clone(); X2[0, 4] += 1.0  # change the last token only
    >>> bool(torch.equal(dec(X2)[0, :4], dec(X)[0, :4]))  # earlier outputs cannot see it
    True
    """

    def __init__(
        self,
        d: int,
        n_heads: int,
        head_dim: int,
        pe: str = "none",
        qk_norm: bool | str = False,
        norm_eps: float = 1e-6,
        bias: bool = False,
        rope_base: float = 10000.0,
        causal: bool = False,
    ) -> None:
        super().__init__()
        if min(d, n_heads, head_dim) < 1:
            raise ValueError(f"d, n_heads and head_dim must be positive, got {d}, {n_heads}, {head_dim}")
        check_options(pe, PES, qk_norm, norm_eps, causal)
        self.d, self.n_heads, self.head_dim = d, n_heads, head_dim
        self.pe, self.qk_norm, self.norm_eps, self.bias, self.causal = pe, qk_norm, norm_eps, bias, causal
        self.Q = nn.Linear(d, n_heads * head_dim, bias=bias)
        self.K = nn.Linear(d, n_heads * head_dim, bias=bias)
        self.V = nn.Linear(d, n_heads * head_dim, bias=bias)
        self.O = nn.Linear(n_heads * head_dim, d, bias=bias)
        if qk_norm:
            self.gamma_q, self.gamma_k = qk_gain(qk_norm, n_heads, head_dim), qk_gain(qk_norm, n_heads, head_dim)
        if pe == "rope":
            self.register_buffer("omega", rope_frequencies(head_dim, rope_base), persistent=False)

    def head(self, i: int) -> dict[str, torch.Tensor]:
        """Head i's matrices in the paper's convention: ``{"Q": Q_i, "K": K_i, "V": V_i, "O": O_i}``, each (d, k)."""
        rows = slice(i * self.head_dim, (i + 1) * self.head_dim)
        return {
            "Q": self.Q.weight[rows].T,
            "K": self.K.weight[rows].T,
            "V": self.V.weight[rows].T,
            "O": self.O.weight[:, rows],
        }

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        if X.dim() != 3 or X.shape[-1] != self.d:
            raise ValueError(f"expected input of shape (batch, T, {self.d}), got {tuple(X.shape)}")
        if self.pe == "sinusoidal":
            X = X + sinusoidal_table(X.shape[1], self.d, dtype=X.dtype).to(X.device)
        omega = getattr(self, "omega", None)
        q = query_key_heads(self.Q(X), self.n_heads, getattr(self, "gamma_q", None), self.norm_eps, omega)
        k = query_key_heads(self.K(X), self.n_heads, getattr(self, "gamma_k", None), self.norm_eps, omega)
        v = split_heads(self.V(X), self.n_heads)  # (B, n, T, k)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)  # (B, n, T, T)
        heads = softmax_attention(scores, v, self.causal)  # (B, T, n·k)
        return self.O(heads)  # (B, T, d)
