"""Position encodings for attention: sinusoidal tables (added to X) and RoPE (rotating q and k).

RoPE pairs the coordinates of a head as 2×2 blocks j = 0..k/2−1 and turns block
j of the vector at position p by the angle ``p·ω_j``, with ``ω_j = base^(−2j/k)``.
Then ``⟨R_p q, R_s k⟩ = qᵀ R_{s−p} k``: the score sees only the offset s − p.
"""

from __future__ import annotations

import torch


def sinusoidal_table(T: int, d: int, *, base: float = 10000.0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The (T, d) table ``P[p, 2j] = sin(p ω_j)``, ``P[p, 2j+1] = cos(p ω_j)``, ``ω_j = base^(−2j/d)``.

    Examples
    ========
    >>> sinusoidal_table(2, 2).tolist()
    [[0.0, 1.0], [0.8414709848078965, 0.5403023058681398]]
    """
    if T < 1 or d < 1:
        raise ValueError(f"the table needs T ≥ 1 and d ≥ 1, got T={T}, d={d}")
    omega = base ** (-torch.arange(0, d, 2, dtype=dtype) / d)  # (ceil(d/2),)
    angle = torch.arange(T, dtype=dtype)[:, None] * omega  # (T, ceil(d/2))
    table = torch.stack([angle.sin(), angle.cos()], dim=-1).reshape(T, -1)  # (T, 2·ceil(d/2))
    return table[:, :d]


def rope_frequencies(k: int, base: float = 10000.0, *, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The k/2 angular frequencies ``ω_j = base^(−2j/k)`` of RoPE on a head of width k.

    Examples
    ========
    >>> rope_frequencies(4, base=9.0).tolist()
    [1.0, 0.3333333333333333]
    """
    if k < 2 or k % 2:
        raise ValueError(f"RoPE needs an even head_dim ≥ 2, got {k}")
    if not base > 1:
        raise ValueError(f"rope_base must be > 1, got {base}")
    return base ** (-torch.arange(0, k, 2, dtype=dtype) / k)


def rope_rotate(x: torch.Tensor, omega: torch.Tensor) -> torch.Tensor:
    """Turn block j = (2j, 2j+1) of the vector at position p (axis −2) by the angle ``p·ω_j``.

    ``x``: (..., T, k). Block j maps ``(a, b) → (a cos − b sin, a sin + b cos)``.

    Examples
    ========
    >>> import math
    >>> x = torch.tensor([[1.0, 0.0], [1.0, 0.0]], dtype=torch.float64)
    >>> rope_rotate(x, torch.tensor([math.pi / 2], dtype=torch.float64)).round(decimals=12).tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """
    T, k = x.shape[-2], x.shape[-1]
    angle = torch.arange(T, dtype=omega.dtype, device=x.device)[:, None] * omega.to(x.device)  # (T, k/2)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    a, b = x[..., 0::2], x[..., 1::2]  # (..., T, k/2) each
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).reshape(*x.shape[:-1], k)
