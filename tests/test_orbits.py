"""The group action of every law family: it keeps the output, its laws are the registry's, levels are reached."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.func import functional_call

from conslaw_lite import laws_of
from conslaw_lite.families.attention.block import MultiHeadAttention
from conslaw_lite.families.ffn.block import FFN, SwiGLU
from conslaw_lite.families.gqa.block import GroupedQueryAttention
from conslaw_lite.families.moe.block import MoE
from conslaw_lite.families.toy.block import ToyProduct
from conslaw_lite.orbits import act, laws, level_coordinates, move_to_level, orbits_of, pieces_of, supported_types

F64 = torch.float64


def _models() -> dict[str, tuple[nn.Module, tuple[int, ...]]]:
    torch.manual_seed(0)
    vec = torch.tensor([1.5, 0.7], dtype=F64)
    return {
        "toy": (ToyProduct(a=2.0, b=0.5), (1,)),
        "toy-3-ensemble": (ToyProduct(a=vec, b=vec.flip(0), c=vec / 2), (1,)),
        "ffn-relu-bias": (FFN(3, 5, 2, activation="relu", bias=True), (3,)),
        "ffn-linear-bias": (FFN(4, 3, 3, activation="linear", bias=True), (4,)),
        "swiglu-bias": (SwiGLU(3, 4, 2, bias=True), (3,)),
        "mha": (MultiHeadAttention(4, 2, 2), (3, 4)),
        "mha-sinusoidal": (MultiHeadAttention(4, 2, 2, pe="sinusoidal"), (3, 4)),
        "mha-rope": (MultiHeadAttention(4, 2, 2, pe="rope"), (3, 4)),
        "gqa": (GroupedQueryAttention(4, 4, 2, 2), (3, 4)),
        "gqa-rope": (GroupedQueryAttention(4, 6, 2, 4, pe="rope"), (3, 4)),
        "moe-top2": (MoE(3, 4, 2, 2, top_k=2), (3,)),
        "sequential": (nn.Sequential(FFN(3, 4, 3, activation="relu"), SwiGLU(3, 4, 2)), (3,)),
    }


MODELS = _models()


def test_every_registered_action_has_a_model_here() -> None:
    """A family's new ``orbits.py`` fails here until a model of its block joins MODELS (and the checks below)."""
    tested = {type(m).__name__ for model, _ in MODELS.values() for m in model.modules()}
    assert set(supported_types()) <= tested, sorted(set(supported_types()) - tested)


@pytest.fixture(params=list(MODELS))
def case(request: pytest.FixtureRequest) -> tuple[nn.Module, torch.Tensor]:
    model, shape = MODELS[request.param]
    g = torch.Generator().manual_seed(1)
    return model.double(), torch.randn(16, *shape, generator=g, dtype=F64)


def _theta(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _random_xi(pieces, scale: float = 0.5) -> torch.Tensor:
    g = torch.Generator().manual_seed(2)
    return scale * torch.randn(sum(p.size for p in pieces), generator=g, dtype=F64)


def test_the_action_leaves_the_output_unchanged_in_float64(case) -> None:
    model, x = case
    pieces, theta = pieces_of(orbits_of(model)), _theta(model)
    moved = act(pieces, theta, _random_xi(pieces))
    assert any(not torch.equal(moved[n], theta[n]) for n in moved)  # it does move θ
    with torch.no_grad():
        before, after = model(x), functional_call(model, {**theta, **moved}, (x,))
    assert torch.allclose(after, before, rtol=1e-12, atol=1e-13), float((after - before).abs().max())


def test_the_pieces_laws_are_the_registrys_laws(case) -> None:
    model, _ = case
    mine = torch.cat(laws(pieces_of(orbits_of(model)), _theta(model)))
    registry = torch.cat([v.reshape(-1) for v in laws_of(model).values()])
    assert mine.numel() == registry.numel()
    assert torch.allclose(mine.sort().values, registry.sort().values, rtol=1e-13, atol=1e-14)


def test_the_level_of_the_start_is_reached_again_from_a_moved_point(case) -> None:
    model, _ = case
    pieces, theta = pieces_of(orbits_of(model)), _theta(model)
    h0 = laws(pieces, theta)
    moved = {**theta, **act(pieces, theta, _random_xi(pieces))}
    assert max(float((a - b).abs().max()) for a, b in zip(laws(pieces, moved), h0)) > 1e-3
    back = {**moved, **act(pieces, moved, level_coordinates(pieces, moved, h0))}
    scale = max(float(h.abs().max()) for h in h0)
    assert max(float((a - b).abs().max()) for a, b in zip(laws(pieces, back), h0)) < 1e-11 * max(scale, 1.0)


def test_the_balanced_point_has_every_law_at_zero(case) -> None:
    model, x = copy.deepcopy(case[0]), case[1]  # a copy: the models are shared by the tests
    with torch.no_grad():
        before = model(x)
    move_to_level(model)
    pieces = pieces_of(orbits_of(model))
    assert max(float(h.abs().max()) for h in laws(pieces, _theta(model))) < 1e-12
    with torch.no_grad():
        assert torch.allclose(model(x), before, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (nn.Linear(2, 2), "no block with known conservation laws"),
        (nn.Sequential(FFN(3, 4, 2, activation="gelu")), "no block with a symmetry"),
        (MultiHeadAttention(4, 2, 2, bias=True), "without biases"),
        (MultiHeadAttention(4, 2, 2, pe="rope", qk_norm="per_head"), "without QK-norm"),
        (MoE(3, 4, 2, 2, top_k=1), "top-1"),
        (type("MyFFN", (FFN,), {})(3, 4, 2, activation="relu"), "no group action is written"),
    ],
    ids=["unknown", "no-laws", "mha-bias", "qk-norm", "moe-top1", "subclass"],
)
def test_a_model_whose_action_is_not_known_is_refused_by_name(model: nn.Module, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        orbits_of(model)


def test_the_linear_level_off_the_orbit_is_said_so() -> None:
    torch.manual_seed(0)
    model = FFN(3, 4, 2, activation="linear").double()  # AᵀA has rank 2, BBᵀ rank 3: h = 0 is not on the orbit
    with pytest.raises(RuntimeError, match="is the level on this orbit"):
        move_to_level(model)
