"""Grouped- and multi-query attention: counts against the formula, laws against the gradient, layouts, bad input."""

from __future__ import annotations

import pytest
import torch

from conslaw_lite import laws_of
from conslaw_lite.archs import ArchOptions
from conslaw_lite.certify import certify
from conslaw_lite.families.attention.block import MultiHeadAttention
from conslaw_lite.families.gqa.archs import ARCHITECTURES
from conslaw_lite.families.gqa.block import GroupedQueryAttention
from conslaw_lite.families.gqa.laws import GroupedSpec, formula, grouped_laws, spec_of
from conslaw_lite.laws import law_functions

F64 = torch.float64


@pytest.mark.slow
@pytest.mark.parametrize("arch", [a.name for a in ARCHITECTURES])
def test_every_architecture_is_counted_complete_to_its_formula(arch: str) -> None:
    r = certify(arch, ArchOptions(heads=1, dim=5))
    assert r.conclusive, r.reason
    assert r.num_laws == r.formula and r.known_laws == r.num_laws and r.complete, r.formula_text


def _flat_grad(value: torch.Tensor, p: dict) -> torch.Tensor:
    grads = torch.autograd.grad(value, list(p.values()), retain_graph=True, allow_unused=True)
    return torch.cat([(torch.zeros_like(v) if g is None else g).reshape(-1) for g, v in zip(grads, p.values())])


@pytest.mark.parametrize("options", [dict(pe="none"), dict(pe="rope"), dict(pe="rope", qk_norm="per_head"),
                                     dict(pe="rope", qk_norm="shared", norm_eps=0.0)])
def test_laws_are_orthogonal_to_the_gradient_and_controls_are_not(options: dict) -> None:
    """⟨∇h, ∇L⟩ = 0 for every entry of every law (6 queries on 2 K/V heads, a causal mask); a control moves."""
    torch.manual_seed(0)
    model = GroupedQueryAttention(6, 6, 2, 4, causal=True, **options).double()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("gamma"):
                p.uniform_(0.5, 1.5)
    p = dict(model.named_parameters())
    g = _flat_grad(model(torch.randn(3, 5, 6, dtype=F64)).sin().sum(), p)
    for name, fn in law_functions(model).items():
        for entry in fn(p).reshape(-1):
            dh = _flat_grad(entry, p)
            assert float((dh @ g).abs()) < 1e-12 * float(dh.norm() * g.norm()), name
    for name, fn in law_functions(model, controls=True).items():
        assert max(float((_flat_grad(e, p) @ g).abs()) for e in fn(p).reshape(-1)) > 1e-6, name


def test_one_query_per_group_gives_the_laws_of_multi_head_attention() -> None:
    torch.manual_seed(0)
    gqa = GroupedQueryAttention(6, 3, 3, 4, pe="rope", qk_norm="per_head").double()
    mha = MultiHeadAttention(6, 3, 4, pe="rope", qk_norm="per_head").double()
    mha.load_state_dict(gqa.state_dict())
    X = torch.randn(2, 5, 6, dtype=F64)
    assert torch.allclose(gqa(X), mha(X), rtol=1e-12, atol=1e-13)
    mine, theirs = (torch.cat([v.reshape(-1) for v in laws_of(m).values()]).sort().values for m in (gqa, mha))
    assert torch.allclose(mine, theirs, rtol=1e-13, atol=1e-14)


def test_hugging_face_pairs_give_the_same_laws_on_the_permuted_weights() -> None:
    """``pairs="half"`` reads block j from coordinates (j, j + k/2): permuting each head's coordinates from
    (2j, 2j+1) to that layout, with the same function computed, gives the same law values."""
    torch.manual_seed(0)
    n_q, n_kv, k, d = 4, 2, 6, 6
    model = GroupedQueryAttention(d, n_q, n_kv, k, pe="rope", qk_norm="shared").double()
    with torch.no_grad():
        model.gamma_q.uniform_(0.5, 1.5), model.gamma_k.uniform_(0.5, 1.5)
    p = {n: t.detach() for n, t in model.named_parameters()}
    order = torch.cat([torch.arange(0, k, 2), torch.arange(1, k, 2)])  # new coordinate c holds old order[c]

    def rows(W: torch.Tensor) -> torch.Tensor:
        return W.view(-1, k, W.shape[-1])[:, order].reshape(W.shape)

    half = {"q": rows(p["Q.weight"]), "k": rows(p["K.weight"]), "v": p["V.weight"], "o": p["O.weight"],
            "gq": p["gamma_q"][order], "gk": p["gamma_k"][order]}
    spec = GroupedSpec(n_q, n_kv, k, "q", "k", "v", "o", pe="rope", pairs="half", gamma_q="gq", gamma_k="gk",
                       shared_gains=True, norm_eps=model.norm_eps)
    interleaved, _, _ = grouped_laws(spec_of(model))
    hf, _, _ = grouped_laws(spec)
    assert sorted(interleaved) == sorted(hf)
    for name in interleaved:
        assert torch.allclose(interleaved[name](p), hf[name](half), rtol=1e-14, atol=1e-14), name
    wrong, _, _ = grouped_laws(GroupedSpec(**{**spec.__dict__, "pairs": "interleaved"}))
    assert not torch.allclose(wrong["‖γ_q⁽ʲ⁾‖²−‖γ_k⁽ʲ⁾‖²"](half), hf["‖γ_q⁽ʲ⁾‖²−‖γ_k⁽ʲ⁾‖²"](half))


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="multiple of n_kv_heads"):
        GroupedQueryAttention(4, 3, 2, 2)
    with pytest.raises(ValueError, match="pairs must be one of"):
        GroupedSpec(4, 2, 4, pe="rope", pairs="rotate")
    with pytest.raises(ValueError, match="even head width"):
        GroupedSpec(4, 2, 3, pe="rope")
    with pytest.raises(ValueError, match="both gains"):
        GroupedSpec(4, 2, 4, gamma_q="g")
    with pytest.raises(ValueError, match="needs n_heads"):
        formula(2, 4, pe="rope", qk_norm="shared")
    with pytest.raises(ValueError, match="pe must be one of"):
        GroupedQueryAttention(4, 2, 1, 2, pe="sinusoidal")


def test_the_decoder_shares_its_key_value_heads_and_the_monitor_finds_the_grouped_laws() -> None:
    from conslaw_lite.laws import find_blocks
    from conslaw_lite.models import QwenConfig, QwenDecoder

    config = QwenConfig(vocab_size=11, dim=8, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=4, hidden=6)
    model = QwenDecoder(config).double()
    attention = [b for b in find_blocks(model) if b.path.endswith("attn")]
    assert [b.kind for b in attention] == ["gqa-rope", "gqa-rope"]
    N, _ = formula(config.n_kv_heads, config.head_dim, pe="rope")
    k = config.head_dim
    entries = sum(v.numel() for key, v in laws_of(model).items() if key.startswith("layers.0.attn:"))
    assert entries == N + config.n_kv_heads * k * (k - 1) // 2  # V/O laws listed as full k×k matrices
    with pytest.raises(ValueError, match="multiple of n_kv_heads"):
        QwenConfig(n_heads=4, n_kv_heads=3)
