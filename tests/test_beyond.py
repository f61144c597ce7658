"""Weight decay, whole-network laws, the homework helpers and the homework page's links."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch
from torch import nn

from conslaw_lite.counting import check_laws, count_laws
from conslaw_lite.drift import arch_setup, measure
from conslaw_lite.families.network.couplings import NetworkLaws, NormCoupling
from conslaw_lite.families.network.laws import discover_couplings
from conslaw_lite.flows import gradient_flow, train
from conslaw_lite.homework import grade_law, how_many_laws
from conslaw_lite.laws import law_functions, laws_of
from conslaw_lite.models.tiny import TinyTransformer
from conslaw_lite.weight_decay import decayed_law, discrete_residual, with_weight_decay

ROOT = Path(__file__).resolve().parents[1]
torch.set_num_threads(1)

# ---- weight decay ---------------------------------------------------------------------------------------------------


def test_flow_with_weight_decay_follows_exponential() -> None:
    lam = 0.4
    model, loss = arch_setup("swiglu")(0)
    laws = law_functions(model)
    flow = gradient_flow(model, with_weight_decay(loss, lam), 2.0, laws=laws, n_points=21)
    for name in laws:
        h0 = flow.h[name][0]
        assert np.abs(flow.h[name] - decayed_law(h0, lam, flow.t)).max() <= 1e-8 * np.abs(h0).max()
        assert np.abs(flow.h[name][-1]).max() < 0.3 * np.abs(h0).max()  # and it really decayed: e^{-1.6} ≈ 0.2


@pytest.mark.parametrize("optimizer,batch", [("gd", None), ("sgd", 8)])
def test_discrete_weight_decay_identity_is_exact(optimizer: str, batch: int | None) -> None:
    lam = 0.3
    model, loss = arch_setup("swiglu", batch=batch)(1)
    laws = law_functions(model)
    run = train(model, with_weight_decay(loss, lam), lr=0.05, steps=60, optimizer=optimizer, laws=laws)
    for name in laws:
        assert discrete_residual(run, name, lam) < 1e-12
        # Without the decay term the same records violate the identity by O(τλ): the check can fail.
        assert discrete_residual(run, name, 0.0) > 1e-3


def test_weight_decay_rejects_negative_lambda() -> None:
    _, loss = arch_setup("swiglu")(0)
    with pytest.raises(ValueError, match="weight decay"):
        with_weight_decay(loss, -0.1)


# ---- optimizers -----------------------------------------------------------------------------------------------------


def test_momentum_drift_is_second_order_in_tau() -> None:
    """Heavy-ball momentum keeps GD's τ² (Adam's τ¹ is tests/test_drift.py's)."""
    report = measure(arch_setup("swiglu"), [1e-4, 2e-4, 4e-4], steps=5, optimizer="momentum")
    assert abs(report.slope_lr - 2) < 0.15


# ---- whole-network laws ---------------------------------------------------------------------------------------------

CASES = {
    "rms": (dict(norm="rms", norm_eps=1e-6), 0),
    "rms-eps0": (dict(norm="rms", norm_eps=0.0), 1),
    "layer": (dict(norm="layer", norm_eps=1e-6), 5 + 2 * 2 + 3),
}


@pytest.mark.parametrize("case", list(CASES))
def test_tiny_transformer_laws_are_complete(case: str) -> None:
    options, extra = CASES[case]
    vocab, d, n, k, r = 5, 4, 2, 2, 3
    model = TinyTransformer(vocab, d, n, k, r, **options).double()
    check = check_laws(model, law_functions(model), (3, vocab))
    assert check.max_residual < 1e-9
    assert check.count.num_laws == n * k * (k + 1) + r + 3 * d + extra  # formula: blocks + 3 norms (+ ε=0, LayerNorm)
    assert check.independent == check.count.num_laws and check.complete


def test_network_laws_are_tracked_and_declared_couplings_match_the_trace() -> None:
    model = TinyTransformer(5, 4, 2, 2, 3, n_layers=2).double()
    keys = list(laws_of(model))
    assert sum("gamma^2-|W[:,j]|^2" in key for key in keys) == 2 * 2 + 1  # two norms per block, one final norm
    declared = sorted(
        (prefix + c.norm, tuple(prefix + x for x in c.consumers))
        for prefix, module in [("", model)] + [(f"blocks.{i}.", b) for i, b in enumerate(model.blocks)]
        for c in module.norm_couplings()
    )
    traced = sorted((c.norm, c.consumers) for c in discover_couplings(model, torch.randn(2, 3, 5, dtype=torch.float64)))
    assert declared == traced


def test_gain_symmetry_is_real_and_its_law_is_kept_while_gamma_squared_is_not() -> None:
    model = TinyTransformer(5, 4, 2, 2, 3).double()
    u = torch.randn(8, 3, 5, dtype=torch.float64)
    before = model(u)
    with torch.no_grad():  # the finite symmetry γ_j → λγ_j, W[:, j] → W[:, j]/λ leaves f unchanged
        model.norm.weight.mul_(2.0)
        model.head.weight.mul_(0.5)
    assert torch.allclose(model(u), before)
    from conslaw_lite.flows import mse_loss

    loss = mse_loss(u, torch.randn_like(before))
    law, control = "norm.gamma^2-|W[:,j]|^2_(head)", "norm.gamma^2"
    fns = {law: law_functions(model)[law], control: law_functions(model, controls=True)[control]}
    run = train(model, loss, lr=1e-4, steps=5, laws=fns)
    assert run.drift(law)[-1] < 1e-2 * run.drift(control)[-1]  # second order against first order in τ
    exact = run.h[law][0] + run.h_step[law].sum(axis=0)  # h_K = h_0 + Σ h(δ_k), the exact one-step identity
    assert np.abs(run.h[law][-1] - exact).max() < 1e-12 * np.abs(run.h[law][0]).max()


class _Miswired(NetworkLaws):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(3)
        self.W = nn.Linear(4, 2)

    def norm_couplings(self) -> list[NormCoupling]:
        return [NormCoupling("norm", ("W",))]


def test_misdeclared_coupling_is_an_error() -> None:
    with pytest.raises(ValueError, match="'W' is not an nn.Linear reading the 3 outputs"):
        laws_of(_Miswired())


def test_tiny_transformer_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="norm must be one of"):
        TinyTransformer(5, 4, 2, 2, 3, norm="batch")
    with pytest.raises(ValueError, match="expected token ids"):
        TinyTransformer(5, 4, 2, 2, 3)(torch.randn(2, 3, 6))


def test_layernorm_gives_the_symmetry_count() -> None:
    d_in, d, m = 3, 4, 2
    norm = nn.LayerNorm(d, 1e-6, bias=False)
    net = nn.Sequential(nn.Linear(d_in, d, bias=False), norm, nn.Linear(d, m, bias=False)).double()
    assert count_laws(net, (d_in,)).num_laws == d + d_in  # gain couplings + column sums of E


# ---- homework helpers -----------------------------------------------------------------------------------------------


def test_grade_law_verdicts() -> None:
    from conslaw_lite.families.toy.block import ToyProduct

    toy = ToyProduct(a=1.0, b=2.0, c=0.5)
    good = grade_law(toy, lambda p: p["a"] ** 2 - p["c"] ** 2, (1,), name="a²−c²")
    assert good.conserved and good.num_laws == 2 and "CONSERVED" in str(good)
    bad = grade_law(toy, lambda p: p["a"] ** 2 + p["b"] ** 2, (1,), name="a²+b²")
    assert not bad.conserved and "NOT CONSERVED" in str(bad)
    constant = grade_law(toy, lambda p: p["a"] * 0 + 3.0, (1,), name="3")
    assert not constant.conserved and "CONSTANT" in str(constant)
    with pytest.raises(TypeError, match="law must be a function"):
        grade_law(toy, "a^2 - b^2", (1,))


def test_how_many_laws_matches_formulas() -> None:
    linear = nn.Sequential(nn.Linear(3, 2, bias=False), nn.Linear(2, 3, bias=False)).double()
    assert how_many_laws(linear, (3,)) == 2 * 3 // 2  # r(r+1)/2, r = 2
    assert how_many_laws(nn.Sequential(nn.Linear(3, 4, bias=False), nn.GELU(), nn.Linear(4, 2, bias=False)), (3,)) == 0


# ---- the homework page ----------------------------------------------------------------------------------------------


def _exercise_labels(text: str) -> set[str]:
    return set(re.findall(r"(?:```|:::)\{exercise\}[^\n]*\n(?::[a-z-]+:[^\n]*\n)*?:label: ([\w-]+)", text))


def _book_texts() -> dict[str, str]:
    texts = {p.name: p.read_text() for p in (ROOT / "book").glob("*.md")}
    for p in (ROOT / "book").glob("*.ipynb"):
        texts[p.name] = "\n".join(c.source for c in nbformat.read(p, as_version=4).cells if c.cell_type == "markdown")
    return texts


def test_homework_page_links_exactly_the_book_exercises() -> None:
    texts = _book_texts()
    defined = {label for name, text in texts.items() if name != "homework.md" for label in _exercise_labels(text)}
    linked = set(re.findall(r"\{(?:ref|numref)\}`(?:[^`<]*<)?([\w-]+)>?`", texts["homework.md"]))
    assert linked, "homework.md links no exercise"
    assert linked <= defined, f"homework.md links labels no chapter defines: {sorted(linked - defined)}"
    assert defined <= linked, f"exercises missing from homework.md: {sorted(defined - linked)}"


def test_exercise_titles_keep_their_labels() -> None:
    # sphinx-exercise drops the label of an exercise whose title holds inline code, so links to it break.
    titled = re.compile(r"(?:```|:::)\{exercise\}([^\n]*)\n(?::[a-z-]+:[^\n]*\n)*?:label: ([\w-]+)")
    broken = [label for text in _book_texts().values() for title, label in titled.findall(text) if "`" in title]
    assert not broken, f"exercise titles with `code` lose their label in the HTML build: {broken}"
