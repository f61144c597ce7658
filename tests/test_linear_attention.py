"""Linear attention: its count at two sizes, its laws against the gradient, and the law the softmax removes."""

from __future__ import annotations

import pytest
import torch

from conslaw_lite.archs import ArchOptions
from conslaw_lite.certify import certify
from conslaw_lite.families.attention.block import MultiHeadAttention
from conslaw_lite.families.linear_attention.block import LinearAttention
from conslaw_lite.families.linear_attention.laws import linear_attention_laws
from conslaw_lite.laws import law_functions

F64 = torch.float64


@pytest.mark.slow
@pytest.mark.parametrize("options", [ArchOptions(heads=2), ArchOptions(dim=5, heads=2, head_dim=3, seq=4)])
def test_counted_complete_to_its_formula_at_two_sizes(options: ArchOptions) -> None:
    r = certify("linear-attention", options)
    assert r.conclusive, r.reason
    assert r.num_laws == r.formula and r.known_laws == r.num_laws and r.complete, r.formula_text


def _flat_grad(value: torch.Tensor, p: dict) -> torch.Tensor:
    grads = torch.autograd.grad(value, list(p.values()), retain_graph=True, allow_unused=True)
    return torch.cat([(torch.zeros_like(v) if g is None else g).reshape(-1) for g, v in zip(grads, p.values())])


def _alignment(model: torch.nn.Module, law, X: torch.Tensor) -> float:
    """Largest |⟨∇h, ∇L⟩| / (‖∇h‖‖∇L‖) over the entries of ``law``."""
    p = dict(model.named_parameters())
    g = _flat_grad(model(X).sin().sum(), p)
    out = []
    for entry in law(p).reshape(-1):
        dh = _flat_grad(entry, p)
        out.append(float((dh @ g).abs() / (dh.norm() * g.norm())))
    return max(out)


def test_laws_are_orthogonal_to_the_gradient_and_controls_are_not() -> None:
    torch.manual_seed(0)
    model = LinearAttention(5, 2, 3).double()
    X = torch.randn(3, 4, 5, dtype=F64)
    for name, law in law_functions(model).items():
        assert _alignment(model, law, X) < 1e-12, name
    for name, control in law_functions(model, controls=True).items():
        assert _alignment(model, control, X) > 1e-6, name


def test_the_scale_law_is_not_a_law_of_softmax_attention() -> None:
    """The same ‖Q_0‖² − ‖V_0‖² of the same weights: orthogonal to the gradient without softmax, not with it."""
    torch.manual_seed(0)
    linear = LinearAttention(4, 2, 2).double()
    softmax = MultiHeadAttention(4, 2, 2).double()
    softmax.load_state_dict(linear.state_dict())
    law = linear_attention_laws(linear)[0]["head0:‖Q‖²−‖V‖²"]
    X = torch.randn(3, 5, 4, dtype=F64)
    assert _alignment(linear, law, X) < 1e-12 < 1e-3 < _alignment(softmax, law, X)


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        LinearAttention(4, 2, 0)
    with pytest.raises(ValueError, match="expected input of shape"):
        LinearAttention(4, 1, 2)(torch.zeros(2, 3, 5))
    with pytest.raises(ValueError, match="at least --head-dim"):
        certify("linear-attention", ArchOptions(dim=2, head_dim=3))
