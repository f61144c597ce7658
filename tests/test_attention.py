"""Multi-head attention: Q/K and V/O laws per head, RoPE's per-block laws, QK-norm, biases, torch and timm layers.

Counts come from :func:`conslaw_lite.certify.certify` (Lie rank) and are compared with the
formulas. Conservation on real layers is tested through the exact one-step identity of chapter 07:
for a quadratic h and a gradient step δ, ``h(θ − δ) − h(θ) = h(δ)`` holds iff ``⟨∇h, g⟩ = 0``,
so a law passes and a control fails.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest
import sympy as sp
import torch
from torch import nn

from conslaw_lite.archs import ArchOptions, get_arch
from conslaw_lite.certify import certify
from conslaw_lite.counting import check_laws, count_laws
from conslaw_lite.families.attention.block import MultiHeadAttention
from conslaw_lite.families.attention.symbolic import closed_form_laws, qk_condition, symbolic_attention
from conslaw_lite.flows import gradient_flow, mse_loss, train
from conslaw_lite.laws import find_blocks, law_functions, laws_of
from conslaw_lite.symbolic import quadratic_laws


def step_gaps(model: nn.Module, x: torch.Tensor, *, controls: bool = False) -> dict[str, float]:
    """``max_k |h_{k+1} − h_k − h(δ_k)| / max_k |h_k|`` over two GD steps on a random regression.

    Every parameter is moved off its initialization first (zero-initialized biases would make h ≈ 0).
    """
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    y = torch.randn(model(x).shape, dtype=torch.float64)
    run = train(model, mse_loss(x, y), lr=0.1, steps=2, laws=law_functions(model, controls=controls))
    return {name: float(np.abs(h[1:] - h[:-1] - run.h_step[name]).max() / np.abs(h).max()) for name, h in run.h.items()}


def tokens(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


# ---------------------------------------------------------------- counts at two sizes


SIZES = {  # all sizes of the report are in the chapters; here the smallest, and a second for plain MHA
    "mha": [ArchOptions(), ArchOptions(dim=3, heads=3, head_dim=3, seq=3)],
    "mha-bias": [ArchOptions()],
    "mha-rope": [ArchOptions()],
    "mha-rope-qknorm": [ArchOptions()],
    "mha-rope-qknorm-shared-eps0": [ArchOptions()],
}
EXPECTED = {  # (n, k) → formula, written out from chapters 04–05, independently of build_mha
    "mha": lambda n, k: n * k * (k + 1),
    "mha-sinusoidal": lambda n, k: n * k * (k + 1),
    "mha-bias": lambda n, k: n * k * (k + 1) + n * k,
    "mha-rope": lambda n, k: n * k // 2 + n * k * (k + 1) // 2,
    "mha-rope-qknorm": lambda n, k: n * k // 2 + n * k * (k + 1) // 2,
    "mha-rope-qknorm-eps0": lambda n, k: n * k // 2 + 2 * n + n * k * (k + 1) // 2,
    "mha-rope-qknorm-shared": lambda n, k: k // 2 + n * k * (k + 1) // 2,
    "mha-rope-qknorm-shared-eps0": lambda n, k: k // 2 + 2 * n + n * k * (k + 1) // 2,
}


@pytest.mark.parametrize("arch,options", [(a, o) for a, sizes in SIZES.items() for o in sizes])
def test_certified_count_matches_formula_and_known_laws(arch: str, options: ArchOptions) -> None:
    r = certify(arch, options)
    model = get_arch(arch).build(options).model
    assert r.conclusive, r.reason
    assert r.formula == EXPECTED[arch](model.n_heads, model.head_dim)
    assert r.num_laws == r.formula == r.known_laws
    assert r.complete and r.max_residual < 1e-12
    assert r.sigma_kept > 1e4 * r.sigma_dropped


def test_rope_certificate_says_how_it_is_conditioned() -> None:
    built = get_arch("mha-rope").build(ArchOptions())
    assert torch.allclose(built.model.omega, torch.tensor([1.0, 1 / 3], dtype=torch.float64))
    assert "base 9" in built.note


# ---------------------------------------------------------------- the book's block


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"pe": "sinusoidal", "bias": True},
        {"pe": "rope", "rope_base": 9.0, "bias": True},
        {"pe": "rope", "rope_base": 9.0, "qk_norm": "per_head", "norm_eps": 0.1},
        {"pe": "rope", "rope_base": 9.0, "qk_norm": "shared", "norm_eps": 0.0},
        {"qk_norm": "per_head", "bias": True, "norm_eps": 0.1},
    ],
)
def test_laws_hold_and_controls_move_on_a_gradient_step(kwargs: dict) -> None:
    torch.manual_seed(0)
    model = MultiHeadAttention(4, 2, 4, **kwargs).double()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("gamma"):
                p.uniform_(0.5, 1.5)
    x = tokens(6, 4, 4)
    assert max(step_gaps(model, x).values()) < 1e-12
    moved = step_gaps(model, x, controls=True)
    assert min(moved.values()) > 1e-6, moved
    if kwargs.get("qk_norm") and kwargs.get("pe") == "rope":  # the plain-RoPE law is among the controls: it moves
        assert sum("|Q^(j)|^2-|K^(j)|^2" in name for name in moved) == 2


def test_key_bias_gets_no_gradient_without_rope_but_does_with_rope() -> None:
    for pe, zero in [("none", True), ("rope", False)]:
        torch.manual_seed(0)
        model = MultiHeadAttention(4, 2, 2, pe=pe, bias=True, rope_base=9.0).double()
        model(tokens(3, 4, 4)).square().sum().backward()
        assert (model.K.bias.grad.abs().max() < 1e-14) == zero
        assert ("head0:b_k" in law_functions(model)) == zero


@pytest.mark.parametrize("pe", ["none", "sinusoidal", "rope"])
def test_causal_output_at_t_ignores_later_tokens_and_keeps_the_laws(pe: str) -> None:
    torch.manual_seed(0)
    causal = MultiHeadAttention(4, 2, 4, pe=pe, rope_base=9.0, bias=True, causal=True).double()
    full = MultiHeadAttention(4, 2, 4, pe=pe, rope_base=9.0, bias=True).double()
    full.load_state_dict(causal.state_dict())
    x = tokens(3, 5, 4)
    y = causal(x)
    for t in range(4):
        later = x.clone()
        later[:, t + 1 :] += 1.0  # change every token after t
        torch.testing.assert_close(causal(later)[:, : t + 1], y[:, : t + 1], rtol=0, atol=1e-15)
        assert not torch.allclose(full(later)[:, : t + 1], full(x)[:, : t + 1])  # unmasked, they would see it
    # The last token sees them all: there the mask changes nothing, position encoding included.
    torch.testing.assert_close(y[:, -1], full(x)[:, -1], rtol=0, atol=1e-14)
    assert law_functions(causal).keys() == law_functions(full).keys()
    assert law_functions(causal, controls=True).keys() == law_functions(full, controls=True).keys()
    assert max(step_gaps(causal, x).values()) < 1e-12
    assert min(step_gaps(causal, x, controls=True).values()) > 1e-6
    with pytest.raises(TypeError, match="causal"):
        MultiHeadAttention(4, 2, 2, causal="yes")


def test_gradient_flow_keeps_every_law() -> None:
    built = get_arch("mha-rope").build(ArchOptions(dim=4, heads=2, head_dim=4, seq=2))
    model = built.model
    x = tokens(2, *built.input_shape)
    y = torch.randn(model(x).shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    flow = gradient_flow(model, mse_loss(x, y), 1.0, n_points=3, laws=law_functions(model), rtol=1e-10, atol=1e-12)
    assert flow.loss[-1] < 0.9 * flow.loss[0]
    assert max(flow.relative_drift(n).max() for n in flow.h) < 1e-8


# ---------------------------------------------------------------- torch and timm layers


class SelfAttention(nn.Module):
    """``nn.MultiheadAttention`` as a map X ↦ Y on (batch, T, E)."""

    def __init__(self, mha: nn.MultiheadAttention) -> None:
        super().__init__()
        self.mha = mha

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mha(x, x, x, need_weights=True)[0]  # the explicit path: the fused kernel has no forward AD


@pytest.mark.parametrize("bias", [False, True])
def test_torch_multihead_attention_is_complete(bias: bool) -> None:
    torch.manual_seed(0)
    model = SelfAttention(nn.MultiheadAttention(4, 2, bias=bias, batch_first=True)).double()
    laws = law_functions(model)
    assert sorted(laws) == sorted(
        f"mha:head{i}:{name}" for i in range(2) for name in ["Q^TQ-K^TK", "V^TV-O^TO"] + (["b_k"] if bias else [])
    )
    check = check_laws(model, laws, (3, 4))
    assert check.complete and check.num_laws == 2 * 2 * 3 + (2 * 2 if bias else 0)


def test_a_zero_key_leaves_the_key_bias_unconserved() -> None:
    """``add_zero_attn`` appends a key of zeros, whose score b_k does not shift: its laws were watched, and moved at
    first order (check residuals 0.3 to 0.4). The Q/K and V/O laws stay (a zero key and value transform to zero)."""
    torch.manual_seed(0)
    model = SelfAttention(nn.MultiheadAttention(4, 2, batch_first=True, add_zero_attn=True)).double()
    with torch.no_grad():
        model.mha.in_proj_bias.normal_(0, 0.5)
    laws = law_functions(model)
    assert sorted(laws) == sorted(f"mha:head{i}:{name}" for i in range(2) for name in ["Q^TQ-K^TK", "V^TV-O^TO"])
    check = check_laws(model, laws, (3, 4))
    assert check.complete and check.num_laws == 2 * 2 * 3


def test_torch_multihead_attention_with_separate_weights() -> None:
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(4, 2, kdim=3, vdim=3, batch_first=True).double()

    class Cross(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mha = mha

        def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (batch, T, 4 + 3): queries, then keys/values
            q, kv = x[..., :4], x[..., 4:]
            return self.mha(q, kv, kv, need_weights=True)[0]

    model = Cross()
    assert max(step_gaps(model, tokens(5, 3, 7)).values()) < 1e-12
    assert min(step_gaps(model, tokens(5, 3, 7), controls=True).values()) > 1e-6


@pytest.mark.parametrize("bias, zero_attn", [(True, False), (False, False), (True, True)])
def test_a_learned_key_and_value_are_one_more_row_of_each_head(bias: bool, zero_attn: bool) -> None:
    """``add_bias_kv=True`` appends a learned key and value to every sequence: they were left out (find_laws found 12
    of the 16 laws). They are rows of K̃ and Ṽ, and the key bias's shift moves the learned key too: b_k + bias_k."""
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(4, 2, bias=bias, add_bias_kv=True, add_zero_attn=zero_attn, batch_first=True)
    model = SelfAttention(mha).double()
    laws = law_functions(model)
    shift = ["b_k+bias_k"] if bias and not zero_attn else []
    assert sorted(laws) == sorted(f"mha:head{i}:{n}" for i in range(2) for n in ["Q^TQ-K^TK", "V^TV-O^TO", *shift])
    check = check_laws(model, laws, (3, 4))
    assert check.complete and check.num_laws == 2 * 2 * 3 + 2 * len(shift) * 2, check


def test_a_learned_key_and_value_with_separate_weights() -> None:
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(4, 2, kdim=3, vdim=3, add_bias_kv=True, batch_first=True).double()

    class Cross(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mha = mha

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            q, kv = x[..., :4], x[..., 4:]
            return self.mha(q, kv, kv, need_weights=True)[0]

    model = Cross()
    assert max(step_gaps(model, tokens(5, 3, 7)).values()) < 1e-12
    assert min(step_gaps(model, tokens(5, 3, 7), controls=True).values()) > 1e-6


def test_a_parametrized_weight_leaves_the_block_out_with_a_warning() -> None:
    """weight_norm on out_proj: its weight is a function of two other parameters, and the registered V/O laws read a
    name the model no longer has as a parameter (the monitor raised a KeyError)."""
    from torch.nn.utils.parametrizations import weight_norm

    normed = SelfAttention(nn.MultiheadAttention(4, 2, batch_first=True))
    weight_norm(normed.mha.out_proj)
    model = nn.Sequential(normed, SelfAttention(nn.MultiheadAttention(4, 2, batch_first=True)))
    with pytest.warns(UserWarning, match="a parametrization on out_proj"):
        blocks = find_blocks(model)
    assert [block.path for block in blocks] == ["1.mha"]


def test_timm_vit_lists_every_head_of_every_block(timm: ModuleType) -> None:
    torch.manual_seed(0)
    vit = timm.models.vision_transformer.VisionTransformer(
        img_size=8, patch_size=4, embed_dim=8, depth=2, num_heads=2, mlp_ratio=1.0, num_classes=3
    ).double()
    attention = {n: f for n, f in law_functions(vit).items() if ".attn:" in n}
    # timm's default qkv_bias=True: a key bias, conserved without RoPE
    assert sorted(attention) == sorted(
        f"blocks.{b}.attn:head{i}:{name}"
        for b in range(2)
        for i in range(2)
        for name in ("Q^TQ-K^TK", "b_k", "V^TV-O^TO")
    )
    x = tokens(4, 3, 8, 8)
    gaps = step_gaps(vit, x)
    assert max(gaps[n] for n in attention) < 1e-12
    moved = step_gaps(vit, x, controls=True)
    assert min(v for n, v in moved.items() if ".attn:" in n) > 1e-6


def test_timm_qk_norm_is_left_out_by_name(timm: ModuleType) -> None:
    """Its laws are not the plain layer's: left out with a warning naming the norms, so a model holding it keeps its
    other blocks' laws; alone, it has no block with known laws."""
    attn = timm.layers.Attention(8, num_heads=2, qk_norm=True, norm_layer=nn.LayerNorm)
    with pytest.warns(UserWarning, match="has q_norm and k_norm"), pytest.raises(ValueError, match="no block with"):
        laws_of(attn)


def test_timm_qk_norm_over_two_coordinates_is_counted_as_derived(timm: ModuleType) -> None:
    """A LayerNorm over a head of 2 coordinates reads the head's query only through ``s = w·x/√((w·x)² + ε)``, w half
    the difference of its two rows of W_q: ``q = γ_q∘(1, −1)·s + β_q`` (keys alike, gains shared by the heads). The
    scores read the gains through ``A = γ_q·γ_k`` and ``C = β_q1γ_k1 − β_q2γ_k2`` alone (the rest is constant along a
    softmax row), and ∇A, ∇C and their bracket close into a Lie algebra of dimension 3 on those 6 coordinates. Laws:
    the row sums of each head's W_q and W_k (16), β_k (2, unread), 6 − 3 = 3 on the gains, each head's V/O balance
    (3 each): 27."""
    attn = timm.layers.Attention(4, num_heads=2, qk_norm=True, norm_layer=nn.LayerNorm)
    count = count_laws(attn, (3, 4), seed=1)
    assert count.conclusive and count.num_laws == 27, count


# ---------------------------------------------------------------- symbolic, at the smallest size


@pytest.mark.slow  # a sympy derivation of every quadratic law
def test_symbolic_quadratic_laws_are_exactly_the_qk_and_vo_laws() -> None:
    sym = symbolic_attention(2, 2, n_heads=1, T=2)
    found = quadratic_laws(sym.outputs, sym.params, sym.inputs)
    closed = closed_form_laws(sym)
    assert len(found) == len(closed) == 6
    monomials = sorted({m for e in found + closed for m in sp.Poly(e, *sym.params).monoms()})

    def rank(exprs: list[sp.Expr]) -> int:
        return sp.Matrix([[sp.Poly(e, *sym.params).coeff_monomial(m) for m in monomials] for e in exprs]).rank()

    assert rank(found) == rank(closed) == rank(found + closed) == 6


def test_rope_block_law_is_exact_and_the_plain_law_is_not() -> None:
    sym = symbolic_attention(2, 4, T=2, pe="rope")
    block0 = closed_form_laws(sym, pe="rope")[0]  # ‖Q^(0)‖² − ‖K^(0)‖²
    assert set(qk_condition(sym, block0)) == {0}
    Q, K = sym.heads[0]["Q"], sym.heads[0]["K"]
    mixed = sp.expand((Q.T * Q - K.T * K)[0, 2])  # an off-block entry: no rotation-commuting symmetry
    assert any(c != 0 for c in qk_condition(sym, mixed))


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="pe"):
        MultiHeadAttention(4, 2, 2, pe="alibi")
    with pytest.raises(ValueError, match="even head_dim"):
        MultiHeadAttention(4, 2, 3, pe="rope")
    with pytest.raises(ValueError, match="qk_norm"):
        MultiHeadAttention(4, 2, 2, qk_norm="layer")
    with pytest.raises(ValueError, match="batch, T, 4"):
        MultiHeadAttention(4, 2, 2)(torch.zeros(3, 4))
    with pytest.raises(ValueError, match="--dim"):
        get_arch("mha").build(ArchOptions(dim=2, head_dim=3))


@pytest.mark.parametrize(
    "module",
    [
        MultiHeadAttention(6, 3, 2, bias=True),
        MultiHeadAttention(6, 2, 4, pe="rope", qk_norm="per_head", norm_eps=0.0),
        MultiHeadAttention(6, 2, 4, pe="rope", qk_norm="shared", norm_eps=1e-6),
        nn.MultiheadAttention(6, 3, kdim=4, vdim=5),
    ],
    ids=["bias", "rope-qknorm-eps0", "rope-qknorm-shared", "torch-separate"],
)
def test_each_batch_is_the_stack_of_its_per_head_laws(module: nn.Module) -> None:
    """A block's batches cover every per-head law and control once, and slice j of one call is law names[j]."""
    torch.manual_seed(0)
    module = module.double()
    with torch.no_grad():
        for p in module.parameters():
            p.normal_()
    (block,) = find_blocks(module)
    p = dict(module.named_parameters())
    functions = {**block.laws, **block.controls}
    names = [name for batch in block.batches for name in batch.names]
    assert sorted(names) == sorted(name for name in functions if name.startswith("head"))
    for batch in block.batches:
        stacked = batch.fn(p)
        assert stacked.shape[0] == len(batch.names)
        for j, name in enumerate(batch.names):
            torch.testing.assert_close(stacked[j], functions[name](p), rtol=1e-15, atol=0)
