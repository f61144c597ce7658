"""Convolutional ReLU nets and residual blocks: certificates at two sizes, a user's Sequential, no claims."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from conslaw_lite import check_laws, laws_of
from conslaw_lite.archs import ArchOptions
from conslaw_lite.certify import certify
from conslaw_lite.families.conv import ConvBlock
from conslaw_lite.families.residual import ResidualFFN
from conslaw_lite.laws import find_blocks, law_functions
from tests.certificates import assert_complete


@pytest.mark.slow
@pytest.mark.parametrize(
    ("arch", "options"),
    [
        ("conv-relu", ArchOptions()),
        ("conv-relu", ArchOptions(dim=2, hidden=4, out=2, seq=7)),
        ("conv2d-relu", ArchOptions()),
        ("conv2d-relu", ArchOptions(dim=1, hidden=2, out=2, seq=5)),
        ("residual-relu", ArchOptions()),
        ("residual-relu", ArchOptions(dim=4, hidden=6)),
        ("residual-relu-bias", ArchOptions()),
        ("residual-relu-bias", ArchOptions(dim=2, hidden=5)),
        ("residual-gelu", ArchOptions()),
        ("residual-gelu", ArchOptions(dim=2, hidden=5)),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_certificate_is_complete_at_two_sizes(arch: str, options: ArchOptions) -> None:
    assert_complete(arch, options)


@pytest.mark.slow
def test_a_users_conv_sequential_gets_one_law_per_hidden_channel_per_layer() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv1d(1, 3, 3), nn.ReLU(), nn.Conv1d(3, 2, 2), nn.ReLU(), nn.Conv1d(2, 1, 3, bias=False)
    ).double()
    (block,) = find_blocks(net)
    assert block.kind == "conv-relu" and len(block.laws) == 2  # two hidden layers, biases joining
    check = check_laws(net, law_functions(net), (1, 9))
    assert check.complete and check.independent == 3 + 2, check


def test_the_conv_law_of_hidden_channel_c_is_the_closed_form() -> None:
    torch.manual_seed(1)
    net = nn.Sequential(nn.Conv2d(2, 3, 2), nn.ReLU(), nn.Conv2d(3, 1, 2)).double()
    (h,) = laws_of(net).values()
    W1, b1, W2 = net[0].weight, net[0].bias, net[2].weight
    expected = (W2**2).sum((0, 2, 3)) - (W1**2).sum((1, 2, 3)) - b1**2
    torch.testing.assert_close(h, expected.detach())


def test_no_claim_for_what_the_conv_finder_does_not_model() -> None:
    pooled = nn.Sequential(nn.Conv1d(1, 3, 3), nn.ReLU(), nn.MaxPool1d(2), nn.Conv1d(3, 1, 3))
    grouped = nn.Sequential(nn.Conv1d(2, 4, 3, groups=2), nn.ReLU(), nn.Conv1d(4, 1, 3))
    linear = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))  # not a conv stack: unchanged behaviour
    for net in (pooled, grouped, linear):
        assert find_blocks(net) == []
    gelu = nn.Sequential(nn.Conv1d(1, 3, 3), nn.GELU(), nn.Conv1d(3, 1, 3))
    (block,) = find_blocks(gelu)
    assert block.kind == "conv-gelu" and block.laws == {} and block.controls


def test_the_residual_block_adds_x_and_keeps_the_ffn_laws() -> None:
    torch.manual_seed(2)
    block = ResidualFFN(3, 4, bias=True).double()
    (found,) = find_blocks(block)
    assert found.kind == "residual-relu" and list(found.laws) == ["‖A_{:,i}‖²−‖[B_{i,:},b_i]‖²"]
    expected = (block.A.weight**2).sum(0) - (block.B.weight**2).sum(1) - block.B.bias**2
    torch.testing.assert_close(next(iter(laws_of(block).values())), expected.detach())


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="dims must be 1"):
        ConvBlock(1, 3, 1, dims=3)
    with pytest.raises(ValueError, match=r"expected input \(batch, 1, L\)"):
        ConvBlock(1, 3, 1)(torch.randn(2, 2, 8))
    with pytest.raises(ValueError, match="--seq"):
        certify("conv-relu", ArchOptions(seq=4))
    with pytest.raises(ValueError, match="activation must be one of"):
        ConvBlock(1, 3, 1, activation="tanh")
