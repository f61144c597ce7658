"""What every attention block does per head: split a projection into heads, normalize and turn them, attend.

Shared by multi-head (:mod:`.block`), grouped-query, latent and linear attention, so that each block's
``forward`` says only what is its own (how many key heads, where the latent sits, whether a softmax).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from conslaw_lite.families.attention.positional import rope_rotate

QK_NORMS = (False, "per_head", "shared")


def check_options(pe: str, pes: tuple[str, ...], qk_norm: bool | str, norm_eps: float, causal: bool) -> None:
    """A ``ValueError`` (``TypeError`` for ``causal``) naming the first option a block does not take.

    Examples
    ========
    >>> check_options("rope", ("none", "rope"), "shared", -1.0, False)
    Traceback (most recent call last):
    ...
    ValueError: norm_eps must be ≥ 0, got -1.0
    """
    if pe not in pes:
        raise ValueError(f"pe must be one of {pes}, got {pe!r}")
    if qk_norm not in QK_NORMS:
        raise ValueError(f"qk_norm must be one of {QK_NORMS}, got {qk_norm!r}")
    if norm_eps < 0:
        raise ValueError(f"norm_eps must be ≥ 0, got {norm_eps}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {causal!r}")


def qk_gain(qk_norm: str, heads: int, head_dim: int) -> nn.Parameter:
    """QK-norm's gain, ones: (heads, k) for ``"per_head"``, (k,) for ``"shared"``.

    Examples
    ========
    >>> qk_gain("per_head", 3, 2).shape, qk_gain("shared", 3, 2).shape
    (torch.Size([3, 2]), torch.Size([2]))
    """
    return nn.Parameter(torch.ones((heads, head_dim) if qk_norm == "per_head" else (head_dim,)))


def split_heads(z: torch.Tensor, heads: int) -> torch.Tensor:
    """``(B, T, heads·w) → (B, heads, T, w)``: head i takes columns ``i·w : (i+1)·w``.

    Examples
    ========
    >>> split_heads(torch.arange(6.0).view(1, 1, 6), 2).tolist()
    [[[[0.0, 1.0, 2.0]], [[3.0, 4.0, 5.0]]]]
    """
    B, T, width = z.shape
    return z.view(B, T, heads, width // heads).transpose(1, 2)


def query_key_heads(
    z: torch.Tensor, heads: int, gamma: torch.Tensor | None, eps: float, omega: torch.Tensor | None
) -> torch.Tensor:
    """The heads ``(B, heads, T, k)`` of a query or key projection ``z`` (B, T, heads·k): with a gain ``gamma``,
    ``γ ⊙ q / √(mean(q²) + ε)`` per head (``gamma`` of shape (heads, k) per head, or (k,) shared); with
    frequencies ``omega``, turned by RoPE after that.

    Examples
    ========
    >>> z = torch.tensor([[[3.0, 4.0]]])  # one token, one head of width 2
    >>> query_key_heads(z, 1, torch.ones(2), 0.0, None).pow(2).mean().item()  # RMS-normalized
    1.0
    """
    z = split_heads(z, heads)
    if gamma is not None:
        # torch's RMSNorm without its gain: its weight would span only the normalized axis (k,),
        # while per-head gains (heads, k) also vary along the head axis of z.
        g = gamma[:, None, :] if gamma.dim() == 2 else gamma  # (heads, 1, k) or (k,)
        z = g * F.rms_norm(z, (z.shape[-1],), eps=eps)
    return z if omega is None else rope_rotate(z, omega)


def softmax_attention(scores: torch.Tensor, v: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """``softmax(scores) v`` per head, heads joined: scores (B, n, T, T), v (B, n, T, w) → (B, T, n·w).

    ``causal``: token t attends only to tokens s ≤ t.

    Examples
    ========
    >>> v = torch.tensor([[[[1.0], [3.0]]]])  # one head, two tokens
    >>> softmax_attention(torch.zeros(1, 1, 2, 2), v, causal=True).flatten().tolist()  # t = 0 sees itself only
    [1.0, 2.0]
    """
    if causal:
        T = scores.shape[-1]
        later = torch.ones(T, T, dtype=torch.bool, device=scores.device).triu(1)  # s > t
        scores = scores.masked_fill(later, -math.inf)
    heads = torch.softmax(scores, dim=-1) @ v  # (B, n, T, w)
    B, n, T, w = heads.shape
    return heads.transpose(1, 2).reshape(B, T, n * w)
