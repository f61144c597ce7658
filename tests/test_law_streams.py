"""θ's channels (:mod:`conslaw_lite.law_streams`): the streams that a residual model's Gram-matrix laws run along,
read off the sums of squares, and ``find_laws`` completing the laws along them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from conslaw_lite import find_laws
from conslaw_lite.law_streams import channel_slices
from conslaw_lite.polynomial_laws import Layout

# A (2 × 2) between two streams of width 2: row i of A and column i of B are stream Y's channel i, column i of A and
# row i of C stream X's. Coordinates: A 0..3 (row-major), B 4, 5, C 6, 7.
LAYOUT = Layout(("A", "B", "C"), ((2, 2), (1, 2), (2, 1)))
SQUARES = [(c, c) for c in range(8)]


def _law(coefficients: dict[int, float]) -> np.ndarray:
    row = np.zeros(8)
    row[list(coefficients)] = list(coefficients.values())
    return row


def _mixed(laws: list[np.ndarray]) -> np.ndarray:
    """An orthonormal basis of the laws' span that mixes them all, as a null space comes out."""
    q = np.linalg.qr(np.array(laws).T)[0]
    rotation = np.linalg.qr(np.random.default_rng(0).standard_normal((len(laws), len(laws))))[0]
    return (q @ rotation).T


def test_a_square_weight_between_two_streams_joins_each_along_the_axis_it_reads():
    y = [_law({0: 1, 1: 1, 4: -1}), _law({2: 1, 3: 1, 5: -1})]  # ‖A[i, :]‖² − B[0, i]²
    x = [_law({0: 1, 2: 1, 6: -1}), _law({1: 1, 3: 1, 7: -1})]  # ‖A[:, i]‖² − C[i, 0]²
    found = channel_slices(LAYOUT, _mixed(y + x), SQUARES)
    streams = {key[3]: [] for key, _ in found}
    for key, coords in found:
        streams[key[3]].append(coords)
    assert streams == {((0, 0), (1, 1)): [[0, 1, 4], [2, 3, 5]], ((0, 1), (2, 0)): [[0, 2, 6], [1, 3, 7]]}


def test_a_tensor_one_stream_reads_along_two_axes_is_left_out_of_it():
    both = [_law({0: 2, 1: 1, 2: 1, 4: -1, 6: -1}), _law({3: 2, 1: 1, 2: 1, 5: -1, 7: -1})]
    assert channel_slices(LAYOUT, _mixed(both), SQUARES) == [
        ((-2, 0, 2, ((1, 1), (2, 0)), 0), [4, 6]),
        ((-2, 0, 2, ((1, 1), (2, 0)), 1), [5, 7]),
    ]


def test_no_law_in_one_channel_gives_no_stream():
    spread = [_law({0: 1, 3: 1, 4: -1, 5: -1})]  # ‖A‖'s diagonal against all of B: in no unit's slice
    assert channel_slices(LAYOUT, _mixed(spread), SQUARES) == []


class _ReluStream(nn.Module):
    """h = inp(x), h ← h + W₂ relu(W₁h + b₁) + b₂, out(h): GL(4) acts on the stream, whose Gram-matrix law ties all
    four layers."""

    def __init__(self) -> None:
        super().__init__()
        self.inp, self.up, self.down, self.out = nn.Linear(3, 4), nn.Linear(4, 8), nn.Linear(8, 4), nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        return self.out(h + self.down(torch.relu(self.up(h))))


def test_a_residual_stream_s_gram_matrix_law_is_found_on_pairs_of_its_channels(one_thread):
    # N = 4·5/2 entries of the stream's law + 8 hidden units. Its off-diagonal entries (channels u ≠ v of four layers)
    # lie in no pair of layers and in no sum of squares: the pairs of the channels that the sums of squares hold laws
    # along find them, the first pair solved and moved to the others. Tried first, they reach the count before any
    # other stage runs: no guess of a fused or grouped layer (up: 8 = 2 × 4 rows), which took longer than the rest.
    torch.manual_seed(0)
    found = find_laws(_ReluStream().double(), (3,))
    assert found.complete and found.count.num_laws == 18, found.message
    head = "pairs of layers (sums of squares of all of θ; 34 pairs of channel slices: 1 solved"
    assert found.searched.startswith(head), found.searched
    assert "cut in" not in found.searched and "unit slices" not in found.searched
    assert "for i in 0..7: ‖up.weight[i, :]‖² + up.bias[i]² − ‖down.weight[:, i]‖²" in found.laws
    stream = next(name for name in found.laws if name.endswith("(4×4)"))
    assert stream.startswith("inp.weight inp.weightᵀ + inp.bias inp.biasᵀ") and "out.weightᵀ out.weight" in stream


class _TwoStreams(nn.Module):
    """Two residual streams of width 4 joined by ``mid``, every weight 4 × 4 but ``inp``'s and ``out``'s: GL(4) acts on
    each stream, and ``mid`` is read along its axis 1 by the first and its axis 0 by the second."""

    def __init__(self) -> None:
        super().__init__()
        self.inp, self.up1, self.down1 = nn.Linear(3, 4), nn.Linear(4, 4), nn.Linear(4, 4)
        self.mid, self.up2, self.down2, self.out = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        h = h + self.down1(torch.relu(self.up1(h)))
        g = self.mid(h)
        return self.out(g + self.down2(torch.relu(self.up2(g))))


@pytest.mark.slow
def test_square_weights_join_the_stream_they_write_and_two_streams_of_one_width_stay_apart(one_thread):
    # N = 2 · 10 entries of the streams' laws + 2 · 4 hidden units. At width 4 the hidden units, both streams and the
    # square weights all have axes of size 4: the sums of squares tell which axis of which tensor is whose channel.
    torch.manual_seed(0)
    found = find_laws(_TwoStreams().double(), (3,))
    assert found.complete and found.count.num_laws == 28, found.message
    streams = sorted(name for name in found.laws if name.endswith("(4×4)"))
    assert [name.split(" + ")[0] for name in streams] == ["inp.weight inp.weightᵀ", "mid.weight mid.weightᵀ"]
    assert "− mid.weightᵀ mid.weight" in streams[0] and "− out.weightᵀ out.weight" in streams[1]


class _NormedStream(nn.Module):
    """h = inp(x), then twice h ← h + down(gelu(up(norm(h)))), out(h): a pre-norm residual MLP. The LayerNorm centres
    the stream, so of GL(3) only the rescaling of its direction 𝟙 against the head is left."""

    def __init__(self, out: int) -> None:
        super().__init__()
        self.inp, self.out = nn.Linear(2, 3), nn.Linear(3, out)
        self.norms = nn.ModuleList([nn.LayerNorm(3) for _ in range(2)])
        self.ups = nn.ModuleList([nn.Linear(3, 4) for _ in range(2)])
        self.downs = nn.ModuleList([nn.Linear(4, 3) for _ in range(2)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for norm, up, down in zip(self.norms, self.ups, self.downs, strict=True):
            h = h + down(nn.functional.gelu(up(norm(h))))
        return self.out(h)


@pytest.mark.parametrize("out", [2, 3], ids=["head 3 → 2", "square head 3 → 3"])
def test_a_normed_stream_s_law_along_its_direction_of_ones_is_found_on_its_gram_block(one_thread, out):
    # N = 9: each norm's 3 gains against the columns of the layer after it, 2 linear laws of the biases the norms
    # centre, and 𝟙ᵀ(inp.weight inp.weightᵀ + inp.bias inp.biasᵀ + Σ down.weight down.weightᵀ + … − out.weightᵀ
    # out.weight)𝟙: a sum over every pair of the stream's channels, in no pair of them, found with all the tensors of
    # width 3 at once (a square head's products along both its axes: the stream reads its columns)
    torch.manual_seed(0)
    found = find_laws(_NormedStream(out).double(), (2,))
    assert found.complete and found.count.num_laws == 9, found.message
    assert "Gram laws of the axes of size 3" in found.searched and "cut in" not in found.searched
    ones = [law for law in found.laws if "out.weight" in law]
    assert len(ones) == 1 and "2·⟨inp.bias[0], inp.bias[1]⟩" in ones[0] and "‖downs.1.weight‖²" in ones[0]
