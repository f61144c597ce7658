"""Feed-forward blocks: GELU/SiLU keep nothing, ReLU and SwiGLU keep one law per hidden unit.

Conservation is tested through the exact one-step identity of chapter 07: for a quadratic
h and a gradient step δ = τg, ``h(θ − δ) − h(θ) = h(δ)`` holds iff ``⟨∇h, g⟩ = 0``
(otherwise a cross term ``−2τ θᵀMg`` remains), so a law passes and a control fails.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from conslaw_lite.archs import ArchOptions, get_arch
from conslaw_lite.certify import certify
from conslaw_lite.counting import check_laws, count_laws
from conslaw_lite.families.ffn.block import FFN, SwiGLU
from conslaw_lite.families.ffn.laws import unit_balance
from conslaw_lite.families.ffn.symbolic import sympy_form
from conslaw_lite.flows import gradient_flow, mse_loss, train
from conslaw_lite.laws import find_blocks, law_functions, laws_of


def step_gaps(model: nn.Module, x: torch.Tensor, *, controls: bool = False, seed: int = 0) -> dict[str, float]:
    """``max_k |h_{k+1} − h_k − h(δ_k)| / max_k |h_k|`` over two GD steps on a random regression."""
    torch.manual_seed(seed)
    model = model.double()
    y = torch.randn(model(x).shape, dtype=torch.float64)
    run = train(model, mse_loss(x, y), lr=0.05, steps=2, laws=law_functions(model, controls=controls))
    return {name: float(np.abs(h[1:] - h[:-1] - run.h_step[name]).max() / np.abs(h).max()) for name, h in run.h.items()}


def inputs(*shape: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize(
    "make",
    [
        lambda bias: FFN(3, 4, 2, "relu", bias=bias),
        lambda bias: FFN(3, 2, 3, "linear", bias=bias),
        lambda bias: SwiGLU(3, 4, 2, bias=bias),
    ],
    ids=["relu", "linear", "swiglu"],
)
def test_laws_conserved_controls_not(make, bias: bool) -> None:
    torch.manual_seed(0)
    model = make(bias)
    x = inputs(6, 5, 3)  # (batch, T, d): the blocks act token-wise
    assert max(step_gaps(model, x).values()) < 1e-12
    assert min(step_gaps(model, x, controls=True).values()) > 1e-6


@pytest.mark.parametrize("activation", ["gelu", "silu"])
def test_gelu_silu_have_no_law_and_relus_law_fails(activation: str) -> None:
    model = FFN(3, 4, 2, activation, bias=True)
    assert laws_of(model) == {}
    gaps = step_gaps(model, inputs(8, 3), controls=True)
    assert gaps["|A_{:,i}|^2-|[B_{i,:},b_i]|^2"] > 1e-6  # ReLU's law is not conserved under GELU/SiLU


def test_bias_joins_the_rescaled_row_only() -> None:
    model = SwiGLU(3, 4, 2, bias=True)
    assert list(laws_of(model)) == ["|A_{:,i}|^2-|[C_{i,:},c_i]|^2"]
    x = inputs(8, 3)
    assert max(step_gaps(model, x).values()) < 1e-12
    # Without c_i² the quantity is not conserved: the value bias must join its row.
    torch.manual_seed(0)
    y = torch.randn(8, 2, dtype=torch.float64)
    run = train(model.double(), mse_loss(x, y), lr=0.05, steps=1, laws={"no c": unit_balance("A.weight", "C.weight")})
    h = run.h["no c"]
    assert np.abs(h[1] - h[0] - run.h_step["no c"][0]).max() > 1e-6


def test_gradient_flow_keeps_swiglu_laws() -> None:
    torch.manual_seed(0)
    model = SwiGLU(2, 3, 2).double()
    x, y = inputs(10, 2), inputs(10, 2, seed=2)
    laws = {**law_functions(model), **law_functions(model, controls=True)}
    flow = gradient_flow(model, mse_loss(x, y), 2.0, n_points=5, laws=laws)
    assert flow.relative_drift("|A_{:,i}|^2-|C_{i,:}|^2").max() < 1e-8
    assert flow.relative_drift("|A_{:,i}|^2").max() > 1e-3


def test_wrong_sizes_and_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="activation"):
        FFN(3, 4, 2, activation="tanh")
    with pytest.raises(ValueError, match="r must be"):
        SwiGLU(3, 0, 2)
    with pytest.raises(ValueError, match="min"):
        get_arch("ffn-linear").build(ArchOptions(dim=2, hidden=3, out=3))
    with pytest.raises(ValueError, match="block must be"):
        sympy_form("tanh", 1, 1, 1)


# ---- counts: certify at two sizes, biases, symbolic ----

SIZES = [
    ("ffn-gelu", (2, 3, 2)), ("ffn-gelu", (3, 4, 2)),
    ("ffn-silu", (2, 3, 2)), ("ffn-silu", (3, 4, 2)),
    ("ffn-relu", (2, 3, 2)), ("ffn-relu", (3, 4, 2)),
    ("ffn-linear", (3, 2, 3)), ("ffn-linear", (4, 3, 4)),
    ("swiglu", (2, 3, 2)), ("swiglu", (3, 4, 2)),
]  # fmt: skip


@pytest.mark.parametrize("arch,size", SIZES)
def test_certify_matches_formula(arch: str, size: tuple[int, int, int]) -> None:
    d, r, m = size
    result = certify(arch, ArchOptions(dim=d, hidden=r, out=m))
    expected = {"ffn-gelu": 0, "ffn-silu": 0, "ffn-relu": r, "ffn-linear": r * (r + 1) // 2, "swiglu": r}[arch]
    assert result.formula == expected
    assert result.conclusive and result.num_laws == expected
    assert result.complete and result.known_laws == expected


@pytest.mark.parametrize(
    "model,expected",
    [(FFN(3, 4, 2, "relu", bias=True), 4), (FFN(3, 2, 3, "linear", bias=True), 3),
     (FFN(3, 4, 2, "gelu", bias=True), 0), (SwiGLU(3, 4, 2, bias=True), 4)],
    ids=["relu", "linear", "gelu", "swiglu"],
)  # fmt: skip
def test_biases_add_no_law_and_the_bias_forms_are_complete(model: nn.Module, expected: int) -> None:
    # Wide inputs: every ReLU unit must switch on the samples, whatever its bias.
    wide = 10 * inputs(64, 3)
    model = model.double()
    count = count_laws(model, inputs=wide)
    assert count.conclusive and count.num_laws == expected
    check = check_laws(model, law_functions(model), inputs=wide, count=count) if expected else None
    assert check is None or (check.complete and check.independent == expected)


def test_symbolic_smooth_activations_have_no_quadratic_law() -> None:
    from conslaw_lite.symbolic import quadratic_laws

    assert quadratic_laws(*sympy_form("gelu", 2, 2, 2)) == []
    assert quadratic_laws(*sympy_form("silu", 2, 2, 2)) == []


@pytest.mark.parametrize("block,letter", [("swiglu", "C"), ("linear", "B")])
def test_symbolic_laws_are_the_table(block: str, letter: str) -> None:
    import sympy as sp

    from conslaw_lite.symbolic import quadratic_laws

    form = sympy_form(block, 2, 2, 2)
    found, params = quadratic_laws(*form), form[1]
    P = {str(p): p for p in params}
    unit = [sum(P[f"A_{j}{i}"] ** 2 for j in (1, 2)) - sum(P[f"{letter}_{i}{k}"] ** 2 for k in (1, 2)) for i in (1, 2)]
    # SwiGLU: exactly one law per unit. Linear: the 3 entries of AᵀA − BBᵀ, whose diagonal is the unit laws.
    assert len(found) == (2 if block == "swiglu" else 3)
    assert {sp.expand(h) for h in unit} <= {sp.expand(h) for h in found}
    if block == "swiglu":  # the gate B is in no law
        assert not any(str(p).startswith("B") for h in found for p in h.free_symbols)


# ---- timm ----



@pytest.mark.usefixtures("timm")
@pytest.mark.parametrize("bias", [False, True])
def test_timm_mlp(bias: bool) -> None:
    from timm.layers import Mlp

    x = inputs(8, 3)
    assert laws_of(Mlp(3, 5, 2, bias=bias)) == {}  # GELU, timm's default
    relu = Mlp(3, 5, 2, act_layer=nn.ReLU, bias=bias)
    (block,) = find_blocks(relu)
    assert block.kind == "ffn-relu" and laws_of(relu)[block.key(next(iter(block.laws)))].shape == (5,)
    assert max(step_gaps(relu, x).values()) < 1e-12
    assert min(step_gaps(relu, x, controls=True).values()) > 1e-6


@pytest.mark.usefixtures("timm")
def test_timm_mlp_claims_nothing_it_cannot_back() -> None:
    from timm.layers import Mlp

    with pytest.raises(ValueError, match="no block with known"):
        laws_of(Mlp(3, 5, 2, act_layer=nn.Tanh))
    with pytest.raises(ValueError, match="no block with known"):
        laws_of(Mlp(3, 5, 2, act_layer=nn.ReLU, norm_layer=nn.LayerNorm))  # a hidden norm breaks the rescaling


@pytest.mark.usefixtures("timm")
@pytest.mark.parametrize("act", [nn.SiLU, nn.ReLU])
def test_timm_swiglu_value_branch_is_fc1_x(act: type[nn.Module]) -> None:
    from timm.layers import SwiGLU as TimmSwiGLU

    model = TimmSwiGLU(3, 5, 2, act_layer=act)
    laws = law_functions(model)
    assert len(laws) == (2 if act is nn.ReLU else 1)  # a ReLU gate (ReGLU) has its own rescaling
    x = inputs(8, 3)
    assert max(step_gaps(model, x).values()) < 1e-12
    assert min(step_gaps(model, x, controls=True).values()) > 1e-6


@pytest.mark.usefixtures("timm")
@pytest.mark.parametrize("gate_last", [True, False])
def test_timm_glu_mlp_halves(gate_last: bool) -> None:
    from timm.layers import GluMlp

    model = GluMlp(3, 8, 2, act_layer=nn.SiLU, gate_last=gate_last)
    x = inputs(8, 3)
    assert list(laws_of(model).values())[0].shape == (4,)
    assert max(step_gaps(model, x).values()) < 1e-12
    assert min(step_gaps(model, x, controls=True).values()) > 1e-6  # includes the gate half's balance


@pytest.mark.usefixtures("timm")
def test_timm_vit_every_mlp_found_and_conserved() -> None:
    from timm.layers import SwiGLU as TimmSwiGLU
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    vit = VisionTransformer(
        img_size=8, patch_size=4, num_classes=3, embed_dim=8, depth=3, num_heads=2, mlp_ratio=2,
        mlp_layer=TimmSwiGLU, act_layer=nn.SiLU,
    )  # fmt: skip
    mlps = [b for b in find_blocks(vit) if b.kind == "swiglu"]
    assert [b.path for b in mlps] == [f"blocks.{i}.mlp" for i in range(3)]
    gaps = step_gaps(vit, inputs(4, 3, 8, 8))
    mlp_gaps = [v for k, v in gaps.items() if ".mlp:" in k]
    assert len(mlp_gaps) == 3 and max(mlp_gaps) < 1e-12


@pytest.mark.parametrize("block", ["gelu", "silu", "relu", "linear", "swiglu"])
def test_sympy_form_is_the_torch_block(block: str) -> None:
    import sympy as sp

    d, r, m = 2, 2, 2
    f, params, xs = sympy_form(block, d, r, m)
    torch.manual_seed(0)
    model = (SwiGLU(d, r, m) if block == "swiglu" else FFN(d, r, m, block)).double()
    C = getattr(model, "C", model.B)
    matrices = {"A": model.A.weight.detach(), "B": model.B.weight.detach(), "C": C.weight.detach()}
    values = {p: float(matrices[str(p)[0]][int(str(p)[2]) - 1, int(str(p)[3]) - 1]) for p in params}
    x = inputs(1, d)
    values.update({xi: float(x[0, k]) for k, xi in enumerate(xs)})
    symbolic = [float(sp.N(fj.subs(values))) for fj in f]
    np.testing.assert_allclose(symbolic, model(x)[0].tolist(), rtol=1e-12)


@pytest.mark.usefixtures("timm")
@pytest.mark.parametrize("make", ["book", "timm-swiglu", "timm-reglu", "timm-glu-mlp"])
def test_glu_batch_is_the_stack_of_its_laws_and_controls(make: str) -> None:
    """One call gives the value law, the control and the gate balance, each equal to its own function."""
    from timm.layers import GluMlp
    from timm.layers import SwiGLU as TimmSwiGLU

    torch.manual_seed(0)
    model = {
        "book": lambda: SwiGLU(3, 4, 2, bias=True),
        "timm-swiglu": lambda: TimmSwiGLU(3, 5, 2, bias=True),
        "timm-reglu": lambda: TimmSwiGLU(3, 5, 2, act_layer=nn.ReLU),
        "timm-glu-mlp": lambda: GluMlp(3, 8, 2, act_layer=nn.SiLU, bias=True),
    }[make]().double()
    (block,) = find_blocks(model)
    p = dict(model.named_parameters())
    functions = {**block.laws, **block.controls}
    (batch,) = block.batches
    assert sorted(batch.names) == sorted(functions)
    stacked = batch.fn(p)
    for j, name in enumerate(batch.names):
        torch.testing.assert_close(stacked[j], functions[name](p), rtol=1e-15, atol=0)
