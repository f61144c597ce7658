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


class BatchedExperts(nn.Module):
    """A dense mixture of E experts held in 3-D parameters, ``w1`` (E, d, h) with ``b1`` (E, h) and ``w2`` (E, h, d),
    called with ``einsum``, weighted by a softmax router."""

    def __init__(self, d: int, h: int, E: int, act) -> None:
        super().__init__()
        self.router, self.act = nn.Linear(d, E, bias=False), act
        self.w1, self.b1 = nn.Parameter(torch.randn(E, d, h) / math.sqrt(d)), nn.Parameter(torch.randn(E, h) / 4)
        self.w2 = nn.Parameter(torch.randn(E, h, d) / math.sqrt(h))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.act(torch.einsum("bd,edh->beh", x, self.w1) + self.b1)
        out = torch.einsum("beh,ehd->bed", hidden, self.w2)
        return (self.router(x).softmax(-1)[..., None] * out).sum(1)


@pytest.mark.parametrize(("act", "expected"), [(F.relu, 21), (F.gelu, 6)])
def test_experts_held_in_three_dimensional_parameters_get_the_laws_of_their_units(act, expected: int) -> None:
    """ReLU experts: each unit i of expert e, ``‖w1[e][:, i]‖² + b1[e, i]² − ‖w2[e][i, :]‖²`` (3 experts × 5 units),
    blocks of one coordinate of the experts' widths; GELU experts have none, and none is kept. Both: the router's
    shift, ``Σ_e router.weight[e, :]`` (6 inputs), which its softmax ignores; all of the count's N."""
    torch.manual_seed(0)
    model = BatchedExperts(6, 5, 3, act).double()
    laws, _ = rescaling_laws(model, (6,))
    entries = sum(law(dict(model.named_parameters())).numel() for law in laws.values())
    assert entries == expected and "Σ_e router.weight[e, :]" in laws
    check = check_laws(model, laws, (6,))
    assert check.complete and check.independent == expected == check.count.num_laws


class FusedExperts(nn.Module):
    """SwiGLU experts whose gate and linear branch are one parameter, ``w13`` (E, d, 2h), cut in halves
    (``chunk(2, -1)``) or interleaved; ``E = 0``: one SwiGLU of matrices, ``x @ w13`` (d, 2h)."""

    def __init__(self, d: int, h: int, E: int, interleaved: bool) -> None:
        super().__init__()
        self.interleaved, lead = interleaved, (E,) if E else ()
        self.w13 = nn.Parameter(torch.randn(*lead, d, 2 * h) / math.sqrt(d))
        self.w2 = nn.Parameter(torch.randn(*lead, h, d) / math.sqrt(h))
        self.router = nn.Linear(d, E, bias=False) if E else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.router is None:
            both = x @ self.w13
        else:
            both = torch.einsum("bd,edh->beh", x, self.w13)
        gate, up = (both[..., ::2], both[..., 1::2]) if self.interleaved else both.chunk(2, -1)
        if self.router is None:
            return (F.silu(gate) * up) @ self.w2
        out = torch.einsum("beh,ehd->bed", F.silu(gate) * up, self.w2)
        return (self.router(x).softmax(-1)[..., None] * out).sum(1)


@pytest.mark.parametrize(
    ("E", "interleaved", "unit"),
    [
        (0, False, "for h in 0..2: w13[:, h+3]ᵀ w13[:, h+3] − w2[h, :] w2[h, :]ᵀ"),
        (0, True, "for h in 0..2: w13[:, 2h+1]ᵀ w13[:, 2h+1] − w2[h, :] w2[h, :]ᵀ"),
        (2, False, "for h in 0..5: w13[⌊h/3⌋][:, (h mod 3)+3]ᵀ w13[⌊h/3⌋][:, (h mod 3)+3] − w2[⌊h/3⌋][h mod 3, :] "
                   "w2[⌊h/3⌋][h mod 3, :]ᵀ"),
        (2, True, "for h in 0..5: w13[⌊h/3⌋][:, 2(h mod 3)+1]ᵀ w13[⌊h/3⌋][:, 2(h mod 3)+1] − w2[⌊h/3⌋][h mod 3, :] "
                  "w2[⌊h/3⌋][h mod 3, :]ᵀ"),
    ],
)  # fmt: skip
def test_a_glu_whose_gate_and_linear_branch_are_one_parameter_gets_the_laws_of_its_units(
    E: int, interleaved: bool, unit: str
) -> None:
    """Each unit of the linear branch, ``‖w13[:, h+i]‖² − ‖w2[i, :]‖²`` (the second half) or ``‖w13[:, 2i+1]‖² − ...``
    (interleaved), per expert; the gate's half fails its check. With a router: its shift too. All of the count's N."""
    torch.manual_seed(0)
    model = FusedExperts(4, 3, E, interleaved).double()
    laws, _ = rescaling_laws(model, (4,))
    assert unit in laws
    check = check_laws(model, laws, (4,))
    assert check.complete and check.independent == check.count.num_laws == max(E, 1) * 3 + (4 if E else 0)


class MatrixAttention(nn.Module):
    """Attention as a course writes it, with matrices of its own: ``q = x @ Wq + bq``, ..., ``y @ Wo``; ``kv`` columns
    of K and V for d of Q (grouped-query attention where kv < d)."""

    def __init__(self, d: int, n: int, kv: int, bias: bool) -> None:
        super().__init__()
        self.n, self.r = n, d // kv
        self.Wq, self.Wo = (
            nn.Parameter(torch.randn(d, d) / math.sqrt(d)),
            nn.Parameter(torch.randn(d, d) / math.sqrt(d)),
        )
        self.Wk, self.Wv = nn.Parameter(torch.randn(d, kv) / math.sqrt(d)), nn.Parameter(torch.randn(d, kv))
        if bias:
            self.bq, self.bk = nn.Parameter(torch.randn(d) / 4), nn.Parameter(torch.randn(kv) / 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        q, k, v = x @ self.Wq, x @ self.Wk, x @ self.Wv
        if hasattr(self, "bq"):
            q, k = q + self.bq, k + self.bk
        q, k, v = (t.view(B, T, -1, d // self.n).transpose(1, 2) for t in (q, k, v))
        k, v = k.repeat_interleave(self.r, 1), v.repeat_interleave(self.r, 1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y.transpose(1, 2).reshape(B, T, d) @ self.Wo


@pytest.mark.parametrize(
    ("kv", "bias", "expected"),
    [(8, True, 48), (4, False, 20)],  # 2 heads of 4: Q/K, V/O and the key bias; 2 query heads on one key head
)
def test_heads_in_matrices_of_a_module_get_every_law_at_the_width_their_check_finds(
    kv: int, bias: bool, expected
) -> None:
    """A matrix is one head whose blocks of k columns (or rows) are proposed at every k: the widest that passes is a
    head, as for ``nn.Linear`` projections."""
    torch.manual_seed(0)
    model = MatrixAttention(8, 2, kv, bias).double()
    laws, _ = rescaling_laws(model, (5, 8))
    assert any(key.startswith("for ") and "Wq[:, 4h:4h+4]ᵀ Wq[:, 4h:4h+4]" in key for key in laws)
    check = check_laws(model, laws, (5, 8))
    entries = sum(law(dict(model.named_parameters())).numel() for law in laws.values())
    assert check.complete and check.independent == entries == expected == count_laws(model, (5, 8)).num_laws
