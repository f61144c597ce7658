"""Multi-head latent attention: the count against the formula, the group that keeps the output, the laws under GD.

Conservation is tested through the exact one-step identity of chapter 07: for a quadratic h and a
gradient step δ, ``h(θ − δ) − h(θ) = h(δ)`` holds iff ``⟨∇h, g⟩ = 0``, so a law passes and a control fails.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conslaw_lite.counting import check_laws, count_laws
from conslaw_lite.drift import arch_setup, trajectory
from conslaw_lite.families.mla.archs import generic_block
from conslaw_lite.families.mla.block import LatentAttention
from conslaw_lite.families.mla.laws import formula
from conslaw_lite.families.mla.symbolic import mla_block
from conslaw_lite.families.mla.symmetries import move
from conslaw_lite.laws import law_functions

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py
ARCHS = ["mla", "mla-norm", "mla-norm-eps0"]


def block(sizes: tuple[int, ...], **options) -> LatentAttention:
    return generic_block(*sizes, **options)


@pytest.mark.slow
@pytest.mark.parametrize(
    "sizes, options",
    [
        ((4, 2, 1, 1, 2, 2, 2), {}),  # d, n, k, k_v, d_r, d_c, d_cq: 3 + 3 + 2 + 2 + 1 = 11
        ((4, 2, 1, 1, 2, 2, 2), dict(latent_norm=True, norm_eps=1e-6)),  # 2 + 2 + 2 + 2 + 1 = 9
        ((4, 1, 3, 1, 2, 1, 1), {}),  # k = 3 > d_cq + d_c = 2: one law fewer than 3·4/2
    ],
    ids=["plain", "norm", "bottleneck"],
)
def test_the_counter_finds_the_formula_and_the_laws_are_complete(sizes: tuple[int, ...], options: dict) -> None:
    model = block(sizes, **options)
    count = count_laws(model, (4, sizes[0]))
    assert count.conclusive, count.reason
    assert count.num_laws == formula(*sizes, **options)[0]
    check = check_laws(model, law_functions(model), (4, sizes[0]), count=count)
    assert check.complete and check.independent == count.num_laws


@pytest.mark.slow
def test_derive_reaches_the_capped_count_exactly() -> None:
    """k = 3 > d_cq + d_c = 2: the 6 entries of UQ_hUQ_hᵀ − UK_hUK_hᵀ are quadratic laws, but only 5 independent."""
    derived = mla_block(2, 1, 3, 1, 2, 1, 1).derive()
    assert derived.num_laws == derived.law_rank == formula(2, 1, 3, 1, 2, 1, 1)[0] == 9
    assert len(derived.laws) > derived.law_rank  # quadratic laws with polynomial relations among them


def test_the_bottleneck_cap_is_in_the_formula() -> None:
    assert formula(4, 1, 3, 1, 2, 1, 1)[0] == 1 + 1 + (6 - 1) + 1 + 1
    assert formula(3, 1, 1, 1, 2, 7, 1)[0] == 1 + (28 - 3) + 1 + 1 + 1  # d_c = 7 > d + n(k + k_v) = 5


def test_each_factor_of_the_group_keeps_the_output() -> None:
    model = block((5, 2, 2, 2, 4, 3, 3))
    p, X = dict(model.named_parameters()), torch.randn(2, 4, 5, dtype=torch.float64)
    g = torch.Generator().manual_seed(1)
    gl = lambda *shape: torch.eye(shape[-1], dtype=torch.float64) + 0.3 * torch.randn(*shape, generator=g, dtype=torch.float64)  # noqa: E731, E501
    y = torch.func.functional_call(model, p, X)
    for element in [dict(G_Q=gl(3, 3)), dict(G_KV=gl(3, 3)), dict(A=gl(2, 2, 2)), dict(B=gl(2, 2, 2)),
                    dict(s=torch.tensor([2.0, 0.5], dtype=torch.float64))]:  # fmt: skip
        assert torch.allclose(torch.func.functional_call(model, move(model, p, **element), X), y), element
    # one head's RoPE query scaled alone is not a symmetry: the key is shared
    alone = dict(p, **{"QR.weight": p["QR.weight"] * torch.tensor([2.0] * 4 + [1.0] * 4, dtype=torch.float64)[:, None]})
    assert not torch.allclose(torch.func.functional_call(model, alone, X), y)


def test_under_the_norm_only_a_diagonal_latent_map_is_a_symmetry() -> None:
    model = block((5, 2, 2, 2, 2, 3, 3), latent_norm=True, norm_eps=1e-6)
    p, X = dict(model.named_parameters()), torch.randn(2, 4, 5, dtype=torch.float64)
    moved = move(model, p, G_KV=torch.diag(torch.tensor([2.0, 0.5, 3.0], dtype=torch.float64)))
    assert torch.allclose(torch.func.functional_call(model, moved, X), torch.func.functional_call(model, p, X))
    with pytest.raises(ValueError, match="only a diagonal G"):
        move(model, p, G_KV=torch.ones(3, 3, dtype=torch.float64) + torch.eye(3, dtype=torch.float64))


def identity_errors(t, keys: list[str]) -> list[float]:
    """Per quantity, ``max_k |h_{k+1} − h_k − h(δ_k)| / max_k |h_k|``: round-off for a law under GD/SGD."""
    h, h_step = t.run.h, t.run.h_step
    return [float(np.abs(np.diff(h[n], axis=0) - h_step[n]).max() / np.abs(h[n]).max()) for n in keys]


@pytest.mark.parametrize("optimizer", ["gd", "sgd"])
@pytest.mark.parametrize("arch", ARCHS)
def test_a_step_moves_the_laws_by_tau_squared_only_and_the_controls_at_first_order(arch: str, optimizer: str) -> None:
    setup = arch_setup(arch, samples=32, batch=4 if optimizer == "sgd" else None)
    t = trajectory(setup, 0, lr=0.05, steps=10, optimizer=optimizer)
    assert t.identity_error() <= 1e-10 and max(identity_errors(t, t.conserved)) <= 1e-10
    assert t.drift()[-1] > 1e-12  # the laws did move (at second order): the identity is not vacuous
    assert min(identity_errors(t, t.controls)) > 1e-6  # every control moves at first order
    if optimizer == "gd":  # full batch: the laws' drift is far below the controls'
        laws = np.mean([t.run.relative_drift(key)[-1] for key in t.conserved])
        controls = np.mean([t.run.relative_drift(key)[-1] for key in t.controls])
        assert controls > 10 * laws, (laws, controls)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(rope_dim=3), "rope_dim must be even"),
        (dict(kv_rank=0), "kv_rank must be a positive integer"),
        (dict(q_rank=2.5), "q_rank must be a positive integer"),
        (dict(norm_eps=-1.0), "norm_eps must be ≥ 0"),
    ],
)
def test_bad_sizes_are_refused_by_name(kwargs: dict, message: str) -> None:
    sizes = dict(d=4, n_heads=2, head_dim=1, v_dim=1, rope_dim=2, kv_rank=2, q_rank=2) | kwargs
    options = {k: sizes.pop(k) for k in ["norm_eps"] if k in sizes}
    with pytest.raises(ValueError, match=message):
        LatentAttention(**sizes, **options)


def test_bad_input_and_unmodelled_points_are_refused() -> None:
    with pytest.raises(ValueError, match=r"expected input of shape \(batch, T, 4\)"):
        block((4, 2, 1, 1, 2, 2, 2))(torch.zeros(1, 3, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match="d_r must be even"):
        formula(4, 2, 1, 1, 3, 2, 2)
    with pytest.raises(ValueError, match="kv_rank = 1 under RMSNorm with ε = 0"):
        law_functions(block((4, 2, 1, 1, 2, 1, 2), latent_norm=True, norm_eps=0.0))
