"""Linear attention: multi-head attention with the softmax taken out.

Head i maps tokens X ∈ R^(T×d) to ``(X Q_i K_iᵀ Xᵀ / √k)(X V_i) O_iᵀ / T`` with Q_i, K_i, V_i, O_i ∈ R^(d×k)
(the scores weigh the values directly, averaged over the T keys); the block returns the sum over heads.
The layout against ``nn.Linear`` is that of
:class:`~conslaw_lite.families.attention.block.MultiHeadAttention`::

    Q_i = Q.weight[i·k:(i+1)·k, :]ᵀ    (likewise K, V)      O_i = O.weight[:, i·k:(i+1)·k]

Without the softmax the head is a product of its score and its value, both linear in the weights: a
scale can leave the query for the value, ``Q_i → λQ_i, V_i → V_i/λ``, which the softmax forbids.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from conslaw_lite.families.attention.heads import split_heads


class LinearAttention(nn.Module):
    """n heads of width k on tokens of width d: ``Σ_i (X Q_i K_iᵀ Xᵀ/√k) X V_i O_iᵀ / T``.

    Examples
    ========
    >>> block = LinearAttention(4, 2, 2).double()
    >>> X = torch.randn(3, 5, 4, dtype=torch.float64)
    >>> block(X).shape
    torch.Size([3, 5, 4])
    >>> with torch.no_grad():  # a scale moved from the queries to the values: the same output
    ...     before = block(X)
    ...     _ = block.Q.weight.mul_(2.0), block.V.weight.div_(2.0)
    >>> bool(torch.allclose(block(X), before))
    True
    >>> LinearAttention(4, 0, 2)
    Traceback (most recent call last):
    ...
    ValueError: d, n_heads and head_dim must be positive, got 4, 0, 2
    """

    def __init__(self, d: int, n_heads: int, head_dim: int) -> None:
        super().__init__()
        if min(d, n_heads, head_dim) < 1:
            raise ValueError(f"d, n_heads and head_dim must be positive, got {d}, {n_heads}, {head_dim}")
        self.d, self.n_heads, self.head_dim = d, n_heads, head_dim
        self.Q = nn.Linear(d, n_heads * head_dim, bias=False)
        self.K = nn.Linear(d, n_heads * head_dim, bias=False)
        self.V = nn.Linear(d, n_heads * head_dim, bias=False)
        self.O = nn.Linear(n_heads * head_dim, d, bias=False)

    def forward(self, X: torch.Tensor) -> torch.Tensor:  # X: (B, T, d)
        if X.dim() != 3 or X.shape[-1] != self.d:
            raise ValueError(f"expected input of shape (batch, T, {self.d}), got {tuple(X.shape)}")
        B, T, _ = X.shape
        q, k, v = (split_heads(proj(X), self.n_heads) for proj in (self.Q, self.K, self.V))  # (B, n, T, k) each
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)  # (B, n, T, T), no softmax
        heads = (scores @ v / T).transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim)  # (B, T, n·k)
        return self.O(heads)  # (B, T, d)
