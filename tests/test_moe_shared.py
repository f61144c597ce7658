"""DeepSeek-MoE (shared + routed experts, routing bias): certificates at two sizes, the routing, the bias."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conslaw_lite.archs import ArchOptions, get_arch
from conslaw_lite.counting import count_laws
from conslaw_lite.families.moe_shared import SharedMoE, balance_step
from conslaw_lite.families.moe_shared.laws import bias_as_parameter
from conslaw_lite.families.moe_shared.training import train_balanced
from tests.certificates import assert_complete

F64 = torch.float64


@pytest.mark.slow
@pytest.mark.parametrize(
    ("arch", "options"),
    [
        ("moe-shared", ArchOptions()),
        ("moe-shared", ArchOptions(dim=4, experts=6, hidden=3, top_k=3)),
        ("moe-shared", ArchOptions(top_k=1)),  # not renormalised: the gate is not frozen, d laws still
        ("moe-shared-bias", ArchOptions()),
        ("moe-shared-bias", ArchOptions(dim=2, experts=5, hidden=2, top_k=2)),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_certificate_is_complete_at_two_sizes(arch: str, options: ArchOptions) -> None:
    assert_complete(arch, options)


def _dense(moe: SharedMoE, x: torch.Tensor) -> torch.Tensor:
    """Every expert on every token, weighted by softmax(z) on the top-k of z + b and 0 elsewhere."""
    z = moe.gate(x)
    chosen = (z + (0 if moe.route_bias is None else moe.route_bias)).topk(moe.top_k, dim=-1).indices
    g = torch.zeros_like(z).scatter(1, chosen, z.softmax(-1).gather(1, chosen))
    routed = sum(g[:, e : e + 1] * E(x) for e, E in enumerate(moe.experts))
    return routed + sum(S(x) for S in moe.shared)


def test_sparse_dispatch_equals_the_dense_reference_with_and_without_bias() -> None:
    torch.manual_seed(0)
    x = torch.randn(40, 3, dtype=F64)
    for bias in (False, True):
        moe = SharedMoE(3, 2, 5, 2, 2, top_k=2, routing_bias=bias).double()
        if bias:
            moe.route_bias.copy_(torch.randn(5, dtype=F64))
        torch.testing.assert_close(moe(x), _dense(moe, x))


def test_the_bias_chooses_but_does_not_weigh() -> None:
    torch.manual_seed(1)
    moe = SharedMoE(3, 1, 4, 2, 2, top_k=2, routing_bias=True).double()
    x = torch.randn(30, 3, dtype=F64)
    before, _ = moe.route(x)
    moe.route_bias.copy_(torch.tensor([3.0, 3.0, -3.0, -3.0], dtype=F64))
    experts, weights = moe.route(x)
    assert not torch.equal(before, experts)  # the selection moved
    assert set(experts.flatten().tolist()) == {0, 1}
    torch.testing.assert_close(weights, moe.gate(x).softmax(-1)[:, :2].gather(1, experts))


@pytest.mark.slow
def test_the_bias_as_a_parameter_is_frozen_by_gradient_flow() -> None:
    """Handed to the counter as a parameter, each b_e is a law of gradient flow: n_r more laws."""
    built = get_arch("moe-shared-bias").build(ArchOptions())
    f, params = bias_as_parameter(built.model)
    count = count_laws(f, built.input_shape, params=params)
    assert count.conclusive, count.reason
    assert count.num_laws == built.formula + len(built.model.experts)


def test_laws_hold_while_the_balancing_moves_the_bias() -> None:
    torch.manual_seed(2)
    moe = SharedMoE(3, 1, 4, 2, 2, top_k=2, routing_bias=True).double()
    x, y = torch.randn(64, 3, dtype=F64), torch.randn(64, 2, dtype=F64)
    run = train_balanced(moe, x, y, lr=1e-3, steps=30, rate=0.05)
    assert np.abs(run.bias[-1] - run.bias[0]).sum() > 0 and run.imbalance.shape == (30,)
    assert run.law_drift[-1] < 1e-3 * run.control_drift[-1], (run.law_drift[-1], run.control_drift[-1])  # τ² vs τ
    with pytest.raises(ValueError, match="diverges"):
        train_balanced(moe, x, 1e200 * y, lr=1e6, steps=3, rate=0.05)


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="top_k must be an integer in"):
        SharedMoE(3, 1, 4, 2, 2, top_k=0)
    with pytest.raises(ValueError, match="n_shared must be a non-negative integer"):
        SharedMoE(3, -1, 4, 2, 2)
    with pytest.raises(ValueError, match="needs a SharedMoE built with routing_bias=True"):
        balance_step(SharedMoE(3, 1, 4, 2, 2), torch.randn(4, 3), 0.1)
    with pytest.raises(ValueError, match="expected input of width 3"):
        SharedMoE(3, 1, 4, 2, 2)(torch.randn(4, 2))
    with pytest.raises(ValueError, match="has no routing bias"):
        bias_as_parameter(SharedMoE(3, 1, 4, 2, 2))


def test_the_qwen_decoder_takes_shared_experts_and_their_laws() -> None:
    from conslaw_lite.families.moe_shared.laws import formula
    from conslaw_lite.laws import find_blocks
    from conslaw_lite.models.qwen import QwenConfig, QwenDecoder

    config = QwenConfig(vocab_size=8, dim=4, n_layers=1, n_heads=1, head_dim=2, hidden=2, n_experts=3, top_k=2,
                        n_shared_experts=2)  # fmt: skip
    model = QwenDecoder(config).double()
    assert model(torch.zeros(2, 5, dtype=torch.long)).shape == (2, 5, 8)
    blocks = find_blocks(model.layers[0].ffn)
    assert [b.kind for b in blocks] == ["moe-shared"] + ["swiglu"] * 5
    n_laws = sum(int(torch.as_tensor(fn(dict(model.layers[0].ffn.named_parameters()))).numel())
                 for b in blocks for fn in b.laws.values())  # fmt: skip
    assert n_laws == formula(2, 3, 2, 4)[0]
    with pytest.raises(ValueError, match="softmax gating"):
        QwenConfig(n_experts=3, n_shared_experts=1, gating="sigmoid")
