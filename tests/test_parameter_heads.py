"""Attention heads held in 3-D parameters (TransformerLens, einsum): their laws proposed and found by their check."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from conslaw_lite import Monitor, check_laws, count_laws
from conslaw_lite.rescaling_laws import rescaling_laws
from tests.test_head_laws import rope


class EinsumAttention(nn.Module):
    """TransformerLens's layout: ``W_Q``, ``W_K``, ``W_V`` (heads, d, k), ``W_O`` (heads, k, d), biases per head;
    ``n_kv`` key/value heads repeated for the queries; ``transposed``: Q and K stored (heads, k, d) instead."""

    def __init__(self, d: int, n: int, k: int, n_kv: int | None = None, bias: bool = True, rotary: bool = False,
                 transposed: bool = False) -> None:  # fmt: skip
        super().__init__()
        n_kv, self.rotary, self.transposed = n_kv or n, rotary, transposed
        shape = (lambda h: (h, k, d)) if transposed else (lambda h: (h, d, k))
        self.W_Q, self.W_K = nn.Parameter(torch.randn(shape(n)) / math.sqrt(d)), nn.Parameter(torch.randn(shape(n_kv)))
        self.W_V, self.W_O = nn.Parameter(torch.randn(n_kv, d, k)), nn.Parameter(torch.randn(n, k, d) / math.sqrt(k))
        self.r = n // n_kv
        if bias:
            self.b_Q, self.b_K = nn.Parameter(torch.randn(n, k) / 4), nn.Parameter(torch.randn(n_kv, k) / 4)
            self.b_V, self.b_O = nn.Parameter(torch.randn(n_kv, k) / 4), nn.Parameter(torch.zeros(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pattern = "btd,hkd->bhtk" if self.transposed else "btd,hdk->bhtk"
        q, k = torch.einsum(pattern, x, self.W_Q), torch.einsum(pattern, x, self.W_K)
        v = torch.einsum("btd,hdk->bhtk", x, self.W_V)
        if hasattr(self, "b_Q"):
            q, k, v = q + self.b_Q[:, None], k + self.b_K[:, None], v + self.b_V[:, None]
        if self.rotary:
            q, k = rope(q), rope(k)
        k, v = k.repeat_interleave(self.r, 1), v.repeat_interleave(self.r, 1)
        z = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out = torch.einsum("bhtk,hkd->btd", z, self.W_O)
        return out + self.b_O if hasattr(self, "b_O") else out


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (lambda: EinsumAttention(8, 2, 4), 48),  # Q/K and V/O per head (10 + 10) and the key bias (8)
        (lambda: EinsumAttention(8, 4, 2, n_kv=2, bias=False, transposed=True), 12),  # 2 query heads a key: 3 + 3
        (lambda: EinsumAttention(8, 2, 4, bias=False, rotary=True), 24),  # RoPE: 2 pairs and 10 V/O a head
    ],
)
def test_heads_held_in_three_dimensional_parameters_get_every_law(build, expected: int) -> None:
    """Nothing names the parameters or the axis of their heads: every two are proposed along each axis, each with the
    bias of its name; the check keeps the count's N, none twice."""
    torch.manual_seed(0)
    model = build().double()
    laws, outcome = rescaling_laws(model, (5, 8))
    assert "of blocks of units" in outcome
    check = check_laws(model, laws, (5, 8))
    entries = sum(law(dict(model.named_parameters())).numel() for law in laws.values())
    assert check.complete and check.independent == entries == expected == count_laws(model, (5, 8)).num_laws


class EinsumBlock(nn.Module):
    """A pre-norm block around :class:`EinsumAttention`, with an MLP: TransformerLens's ``TransformerBlock``."""

    def __init__(self, d: int, n: int) -> None:
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(d), EinsumAttention(d, n, d // n)
        self.ln2, self.mlp = nn.LayerNorm(d), nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def test_a_monitor_watches_the_heads_of_an_einsum_transformer() -> None:
    """Two blocks of d = 32 (25,408 parameters, over a monitor's search): each block's Q/K and V/O laws (4 heads of
    8: 36 entries each) and key bias are found and watched."""
    torch.manual_seed(0)
    model = nn.Sequential(EinsumBlock(32, 4), EinsumBlock(32, 4))
    monitor = Monitor(model, input_shape=(6, 32))
    laws = monitor.own.laws
    for block in ("0", "1"):
        assert any(key.startswith(f"for h in 0..3 (8×8, upper triangle): {block}.attn.W_Q[h]ᵀ") for key in laws)
        assert any(key.startswith(f"for h in 0..3 (8×8, upper triangle): {block}.attn.W_V[h]ᵀ") for key in laws)
    assert "1.attn.b_K" in laws
