"""The laws of attention heads written by hand: proposed at every block width, the head's width found by its check."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from conslaw_lite import Monitor, check_laws, count_laws
from conslaw_lite.drift import measure, model_setup
from conslaw_lite.head_laws import Pattern, choose, widest
from conslaw_lite.rescaling_laws import rescaling_laws


class FusedAttention(nn.Module):
    """nanoGPT's ``CausalSelfAttention``: q, k, v split from one ``c_attn``, then ``c_proj``."""

    def __init__(self, d: int, n: int) -> None:
        super().__init__()
        self.n = n
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.n, C // self.n).transpose(1, 2) for t in self.c_attn(x).split(C, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


def rope(x: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of interleaved pairs, written by hand."""
    T, k = x.shape[-2], x.shape[-1]
    angle = torch.arange(T, dtype=x.dtype)[:, None] * 10000 ** (-torch.arange(0, k, 2, dtype=x.dtype) / k)
    even, odd = x[..., ::2], x[..., 1::2]
    return torch.stack([even * angle.cos() - odd * angle.sin(), even * angle.sin() + odd * angle.cos()], -1).flatten(-2)


class SeparateAttention(nn.Module):
    """q_proj, k_proj, v_proj, o_proj and a masked softmax, optionally with a rotary embedding on q and k."""

    def __init__(self, d: int, n: int, rotary: bool = False) -> None:
        super().__init__()
        self.n, self.rotary = n, rotary
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(d, d) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        q, k, v = (p(x).view(B, T, self.n, -1).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        if self.rotary:
            q, k = rope(q), rope(k)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
        return self.o_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, d))


class FusedSwiGLU(nn.Module):
    """A SwiGLU whose gate and linear branch are one ``Linear``, chunked."""

    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(d, 2 * hidden, bias=False), nn.Linear(hidden, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, linear = self.up(x).chunk(2, dim=-1)
        return self.down(F.silu(gate) * linear)


@pytest.mark.parametrize("build", [lambda: FusedAttention(8, 2), lambda: SeparateAttention(8, 2)])
def test_a_hand_written_attention_gets_every_law_of_its_heads(build) -> None:
    """d = 8, 2 heads of 4: Q/K and V/O per head (10 + 10 entries each) and the key bias (8): the 48 of the count,
    found without knowing the head width (blocks of 1, 2, 4, 8 proposed; 4 kept)."""
    torch.manual_seed(0)
    model = build().double()
    laws, outcome = rescaling_laws(model, (5, 8))
    assert outcome.startswith("0 laws of rescaled units and 48 of blocks of units")
    assert all("(4×4, upper triangle)" in key for key in laws if key.startswith("for h"))
    check = check_laws(model, laws, (5, 8))
    assert check.complete and check.independent == count_laws(model, (5, 8)).num_laws == 48


def test_a_rotary_embedding_keeps_the_laws_of_its_pairs_instead_of_the_query_key_blocks() -> None:
    """Under RoPE a head's q and k are rotated by position: no block of Q/K keeps its Gram law (nor the key bias,
    rotated too), but each pair of rows turned together keeps the difference of its squares; with V/O, the count."""
    torch.manual_seed(0)
    model = SeparateAttention(16, 4, rotary=True).double()
    laws, _ = rescaling_laws(model, (5, 16))
    assert [key.split(":")[0] for key in laws] == [
        "for h in 0..3 (4×4, upper triangle)",
        "for each pair P = {2j, 2j+1} a rotary embedding turns",
    ]
    check = check_laws(model, laws, (5, 16))
    assert check.complete and check.independent == count_laws(model, (5, 16)).num_laws == 48


class GroupedAttention(nn.Module):
    """Llama's attention written by hand: 4 query heads on 2 key/value heads (``repeat_interleave``), a rotary
    embedding on the two halves of each head, no biases."""

    def __init__(self, d: int = 16, heads: int = 4, kv_heads: int = 2) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.k = heads, kv_heads, d // heads
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj, self.v_proj = (nn.Linear(d, kv_heads * self.k, bias=False) for _ in range(2))
        self.o_proj = nn.Linear(d, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        q = self.q_proj(x).view(B, T, self.heads, self.k).transpose(1, 2)
        k, v = (p(x).view(B, T, self.kv_heads, self.k).transpose(1, 2) for p in (self.k_proj, self.v_proj))
        k, v = (t.repeat_interleave(self.heads // self.kv_heads, dim=1) for t in (k, v))
        angle = torch.arange(T, dtype=x.dtype)[:, None] * 10000 ** (-torch.arange(0, self.k, 2, dtype=x.dtype) / self.k)
        cos, sin = torch.cat([angle.cos()] * 2, -1), torch.cat([angle.sin()] * 2, -1)
        half = self.k // 2
        q, k = ((t * cos + torch.cat([-t[..., half:], t[..., :half]], -1) * sin) for t in (q, k))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, d))


def test_grouped_query_attention_with_rotate_half_gets_every_law_of_its_groups() -> None:
    """Two query heads share each key and value head: the laws sum over them (V/O: ``R_V[g] R_V[g]ᵀ − Σ_h O_hᵀ O_h``),
    and the rotary pairs are (j, j + k/2) of each head; found without knowing k or the grouping, complete."""
    torch.manual_seed(0)
    model = GroupedAttention().double()
    laws, _ = rescaling_laws(model, (5, 16))
    assert [key.split(":")[0] for key in laws] == [
        "for g in 0..1 (4×4, upper triangle)",
        "for each pair P = {j, j+2} of a head of 4 a rotary embedding turns summed over the heads that share one (h in "
        "2g..2g+1)",
    ]
    check = check_laws(model, laws, (5, 16))
    assert check.complete and check.independent == count_laws(model, (5, 16)).num_laws


def test_a_fused_swiglu_keeps_the_units_of_its_linear_branch() -> None:
    """``up`` holds the gate's rows then the linear branch's: only the second segment rescales against ``down``'s
    columns, one law per hidden unit, which is the count."""
    torch.manual_seed(0)
    model = FusedSwiGLU(4, 3).double()
    laws, _ = rescaling_laws(model, (4,))
    assert list(laws) == ["for h in 0..2: up.weight[3+h, :] up.weight[3+h, :]ᵀ − down.weight[:, h]ᵀ down.weight[:, h]"]
    check = check_laws(model, laws, (4,))
    assert check.complete and check.independent == 3


def test_two_linear_layers_in_a_row_keep_their_whole_gram_law_not_only_its_diagonal() -> None:
    """``W₂ W₁ x``: any invertible M between them, so the law is the 4 × 4 ``R₁ R₁ᵀ − W₂ᵀ W₂`` (10 entries), of
    which the rescaled units are the diagonal; the widest block replaces them."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2, bias=False)).double()
    laws, _ = rescaling_laws(model, (3,))
    assert len(laws) == 1 and next(iter(laws)).startswith("for h in 0..0 (4×4, upper triangle)")
    check = check_laws(model, laws, (3,))
    assert check.complete and check.independent == 10


def test_the_widest_block_whose_corners_pass_is_chosen_and_the_units_stay_beside_it() -> None:
    family = ("rescale", "v", 0, "o")
    patterns = [Pattern(family, k, f"k={k}", None, lambda p: p) for k in (2, 4, 8)]
    units = Pattern(family, 1, "units", None)
    chosen = choose([units, *patterns], lambda laws: {"k=2", "k=4"} & set(laws))
    assert [p.key for p in chosen] == ["units", "k=4"]
    assert [p.key for p in widest(chosen)] == ["k=4"]


class TinyGPT(nn.Module):
    """nanoGPT at a tiny size: token and position embeddings, pre-norm blocks of ``FusedAttention`` and a GELU MLP,
    the head tied to the embedding."""

    def __init__(self, vocab: int = 32, T: int = 8, d: int = 16, n: int = 2, layers: int = 2) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(T, d)
        self.blocks = nn.ModuleList(
            nn.ModuleDict(
                {
                    "ln_1": nn.LayerNorm(d),
                    "attn": FusedAttention(d, n),
                    "ln_2": nn.LayerNorm(d),
                    "mlp": nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)),
                }
            )
            for _ in range(layers)
        )
        self.ln_f, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))
        for block in self.blocks:
            x = x + block["attn"](block["ln_1"](x))
            x = x + block["mlp"](block["ln_2"](x))
        return self.head(self.ln_f(x))


def test_a_monitor_watches_the_heads_of_a_tiny_nanogpt_and_their_drift_falls_as_tau_squared() -> None:
    """D = 7,232, over a monitor's search: its heads' laws are found by their check (2 layers × (Q/K 2 × 36, V/O
    2 × 36, key bias 16)), beside the norms' couplings; under SGD their drift goes as τ² (slope 2), as gradient flow's
    laws do."""
    torch.manual_seed(0)
    ids = torch.randint(0, 32, (16, 8), generator=torch.Generator().manual_seed(1))
    monitor = Monitor(TinyGPT().double(), inputs=ids)
    (part,) = monitor.own.parts
    assert " and 320 of blocks of units (an attention's heads" in part.outcome
    heads = {key: law for key, law in part.laws.items() if "attn" in key and "ln_1" not in key and "Σ_e" not in key}
    assert len(heads) == 6
    report = measure(model_setup(TinyGPT, inputs=ids, samples=16), [1e-5, 2e-5], steps=3, laws=heads)
    assert abs(report.slope_lr - 2) < 0.05 and all(p.identity_error < 1e-12 for p in report.points)


class RMSNorm(nn.Module):
    """An RMSNorm of one's own: no registered class, a 1-D gain."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class LlamaBlock(nn.Module):
    """A Llama block as users write it: RMSNorms of their own, :class:`GroupedAttention`, a SwiGLU of w1, w2, w3."""

    def __init__(self, d: int = 16, hidden: int = 24) -> None:
        super().__init__()
        self.attention_norm, self.attention = RMSNorm(d), GroupedAttention(d)
        self.ffn_norm = RMSNorm(d)
        self.w1, self.w2, self.w3 = (
            nn.Linear(d, hidden, bias=False),
            nn.Linear(hidden, d, bias=False),
            nn.Linear(d, hidden, bias=False),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        h = self.ffn_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


def test_a_hand_written_llama_block_gets_all_its_laws_norm_gains_against_every_reader() -> None:
    """Each norm's gain is read by several layers (q, k, v; w1, w3): ``γ_j² − Σ_C ‖C[:, j]‖²``; with the SwiGLU's
    units, the grouped V/O blocks and the rotary pairs, the count (80 at D = 1,952)."""
    torch.manual_seed(0)
    model = LlamaBlock().double()
    laws, _ = rescaling_laws(model, (6, 16))
    gain = "for i in 0..15: attention_norm.weight[i]² − ‖attention.q_proj.weight[:, i]‖² − ‖attention.k_proj.weight"
    assert any(key.startswith(gain) for key in laws)
    check = check_laws(model, laws, (6, 16))
    assert check.complete and check.independent == count_laws(model, (6, 16)).num_laws == 80


class ValueFirst(SeparateAttention):
    """v_proj called first, then q_proj and k_proj: the output projection follows k_proj, not v_proj."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        v, q, k = (p(x).view(B, T, self.n, -1).transpose(1, 2) for p in (self.v_proj, self.q_proj, self.k_proj))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, d))


def test_the_value_projection_is_paired_with_the_output_whatever_order_q_k_v_are_called_in() -> None:
    torch.manual_seed(0)
    model = ValueFirst(8, 2).double()
    laws, _ = rescaling_laws(model, (5, 8))
    assert any("v_proj.weight[4h:4h+4, :]" in key and "o_proj" in key for key in laws)
    check = check_laws(model, laws, (5, 8))
    assert check.complete and check.independent == 48


class Head(nn.Module):
    """One head of "Let's build GPT": its own key, query and value ``Linear`` layers."""

    def __init__(self, d: int, width: int) -> None:
        super().__init__()
        self.key, self.query, self.value = (nn.Linear(d, width, bias=False) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T = x.shape[1]
        scores = self.query(x) @ self.key(x).transpose(-2, -1) * self.key.out_features**-0.5
        scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
        return scores.softmax(-1) @ self.value(x)


class ConcatenatedHeads(nn.Module):
    """Heads in an ``nn.ModuleList``, their outputs concatenated before ``proj``."""

    def __init__(self, d: int = 8, heads: int = 2) -> None:
        super().__init__()
        self.heads = nn.ModuleList(Head(d, d // heads) for _ in range(heads))
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(torch.cat([head(x) for head in self.heads], dim=-1))


def test_heads_concatenated_before_the_projection_each_get_their_columns() -> None:
    """Head h's value reaches only columns 4h:4h+4 of ``proj`` (found by moving its weight for one forward), so its V/O
    law is against those; with each head's Q/K, the count."""
    torch.manual_seed(0)
    model = ConcatenatedHeads().double()
    laws, _ = rescaling_laws(model, (5, 8))
    assert any(key.endswith("proj.weight[:, 4+4h:4+4h+4]") and "heads.1.value" in key for key in laws)
    check = check_laws(model, laws, (5, 8))
    assert check.complete and check.independent == count_laws(model, (5, 8)).num_laws == 40


class FusedKeyValue(nn.Module):
    """A query of its own and keys fused with values (``to_q``, ``to_kv``, as lucidrains writes attention), ``n_kv``
    key/value heads repeated for ``n`` query heads; ``kv_first`` calls ``to_kv`` before ``to_q``."""

    def __init__(self, d: int, n: int, n_kv: int, k: int, bias: bool = False, kv_first: bool = False) -> None:
        super().__init__()
        self.n, self.n_kv, self.kv_first = n, n_kv, kv_first
        self.to_q, self.to_kv = nn.Linear(d, n * k, bias=bias), nn.Linear(d, 2 * n_kv * k, bias=bias)
        self.to_out = nn.Linear(n * k, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        kv = self.to_kv(x) if self.kv_first else None
        q = self.to_q(x).view(B, T, self.n, -1).transpose(1, 2)
        k, v = (self.to_kv(x) if kv is None else kv).chunk(2, dim=-1)
        k, v = (t.view(B, T, self.n_kv, -1).transpose(1, 2).repeat_interleave(self.n // self.n_kv, 1) for t in (k, v))
        return self.to_out(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, T, -1))


class SplitQKV(nn.Module):
    """gpt-fast's attention: one ``wqkv`` split into a query of d rows and a key and a value of d/r rows each."""

    def __init__(self, d: int, n: int, n_kv: int) -> None:
        super().__init__()
        self.n, self.n_kv, self.k = n, n_kv, d // n
        self.wqkv, self.wo = nn.Linear(d, (n + 2 * n_kv) * self.k, bias=False), nn.Linear(d, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        q, k, v = self.wqkv(x).split([d, self.n_kv * self.k, self.n_kv * self.k], dim=-1)
        q = q.view(B, T, self.n, self.k).transpose(1, 2)
        k, v = (
            t.view(B, T, self.n_kv, self.k).transpose(1, 2).repeat_interleave(self.n // self.n_kv, 1) for t in (k, v)
        )
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(B, T, d))


class InterleavedQKV(nn.Module):
    """One ``qkv`` whose rows are, per group of G key heads, its r query heads, its key, its value: GPT-NeoX's per-head
    q, k, v (G = n), Megatron's grouped layout (G < n); a rotary embedding on q and k if asked."""

    def __init__(self, d: int, n: int, G: int, rotary: bool = False) -> None:
        super().__init__()
        self.n, self.G, self.k, self.rotary = n, G, d // n, rotary
        self.qkv, self.out = nn.Linear(d, (n + 2 * G) * self.k), nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, d = x.shape
        r = self.n // self.G
        q, k, v = self.qkv(x).view(B, T, self.G, (r + 2) * self.k).split([r * self.k, self.k, self.k], dim=-1)
        q = q.reshape(B, T, self.n, self.k).transpose(1, 2)
        k, v = (t.transpose(1, 2).repeat_interleave(r, 1) for t in (k, v))
        if self.rotary:
            q, k = rope(q), rope(k)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(B, T, d))


@pytest.mark.parametrize(
    ("build", "d", "expected"),
    [
        (lambda: FusedKeyValue(8, 2, 2, 4, bias=True), 8, 48),  # Q/K and V/O per head (10 + 10) and the key bias (8)
        (lambda: FusedKeyValue(6, 3, 1, 2, kv_first=True), 6, 6),  # 3 queries on one key head of 2: Q/K 3, V/O 3
        (lambda: SplitQKV(8, 2, 1), 8, 20),  # 2 queries on one key head of 4: Q/K and V/O summed over the group
        (lambda: InterleavedQKV(8, 2, 2), 8, 48),  # GPT-NeoX: Q/K and V/O per head (10 + 10), key bias (8)
        (lambda: InterleavedQKV(8, 4, 2), 8, 16),  # Megatron, 4 query heads of 2 on 2 groups: 3 + 3 + 2 a group
        (lambda: InterleavedQKV(16, 4, 4, rotary=True), 16, 48),  # RoPE: 2 pairs and 10 V/O a head, no key bias
    ],
)
def test_each_layout_of_q_k_and_v_in_linear_layers_gets_every_law(build, d: int, expected: int) -> None:
    """The query its own layer and keys and values one (``to_kv``); one layer split into segments of unequal widths
    (q of d rows, k and v of d/r); q, k and v interleaved head by head: every law of the count, none twice."""
    torch.manual_seed(0)
    model = build().double()
    laws, outcome = rescaling_laws(model, (5, d))
    check = check_laws(model, laws, (5, d))
    entries = sum(law(dict(model.named_parameters())).numel() for law in laws.values())
    assert check.complete and check.independent == entries == expected == count_laws(model, (5, d)).num_laws


class CrossAttention(nn.Module):
    """Queries from one tensor, keys and values from another (``to_q``, ``to_k``, ``to_v``, ``to_out``)."""

    def __init__(self, d: int, n: int) -> None:
        super().__init__()
        self.n = n
        self.to_q, self.to_k, self.to_v = (nn.Linear(d, d, bias=False) for _ in range(3))
        self.to_out = nn.Linear(d, d)

    def forward(self, x: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(t.shape[0], t.shape[1], self.n, -1).transpose(1, 2)

        q, k, v = heads(self.to_q(x)), heads(self.to_k(context)), heads(self.to_v(context))
        y = F.scaled_dot_product_attention(q, k, v)
        return self.to_out(y.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1))


class Perceiver(nn.Module):
    """Learned latents attending to the input, then a linear head."""

    def __init__(self, d: int = 8, latents: int = 3) -> None:
        super().__init__()
        self.latents = nn.Parameter(torch.randn(latents, d))
        self.cross, self.head = CrossAttention(d, 2), nn.Linear(d, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.cross(self.latents.expand(x.shape[0], -1, -1), x).mean(1))


def test_a_query_and_a_key_that_read_different_tensors_are_paired_where_neither_reads_the_other() -> None:
    """Cross-attention: to_q reads the latents, to_k the input; moving either leaves the other's input as it was, so
    they are paired (20 Q/K laws beside the 20 of V/O and 8 units of the head), as no MLP's two layers would be."""
    torch.manual_seed(0)
    model = Perceiver().double()
    laws, _ = rescaling_laws(model, (5, 8))
    assert any(key.startswith("for h in 0..1 (4×4, upper triangle): cross.to_q.weight[4h:4h+4, :]") for key in laws)
    check = check_laws(model, laws, (5, 8))
    entries = sum(law(dict(model.named_parameters())).numel() for law in laws.values())
    assert check.max_residual < 1e-9 and check.independent == entries == 48


def test_a_deep_mlp_in_one_module_keeps_its_units_and_pairs_no_two_layers() -> None:
    """Sixty ReLU layers in one ``nn.Sequential``: where the signal vanishes, moving a layer seems not to reach the
    later ones, so their layers must not be paired as a query and a key (the first layer's bias then passed the check,
    its gradients vanishing too); only the units, 32 a layer, are kept."""
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(60) for m in (nn.Linear(32, 32), nn.ReLU())], nn.Linear(32, 4))
    laws, outcome = rescaling_laws(model, (32,))
    assert outcome.startswith("1920 laws of rescaled units checked;") and all(key.startswith("for i") for key in laws)
