"""A convolutional block ``W2 ∗ ρ(W1 ∗ x + b1) + b2``, one- or two-dimensional.

``W1 = conv1.weight`` has shape (c_h, c_in, k[, k]) and ``W2 = conv2.weight`` (c_out, c_h, k[, k]), as in
``nn.Conv1d``/``nn.Conv2d``: hidden channel c owns the filter ``W1[c]`` (and the bias ``b1[c]``) that writes
it and the slice ``W2[:, c]`` that reads it. With a positively homogeneous ρ (ReLU), ``W1[c] → λW1[c]``,
``b1[c] → λb1[c]``, ``W2[:, c] → W2[:, c]/λ`` leaves every output unchanged, however many positions the
filters slide over: the weight sharing is the same at every position, so one scalar per channel survives.
"""

from __future__ import annotations

import torch
from torch import nn

from conslaw_lite.activations import ACTIVATIONS

CONVS = {1: nn.Conv1d, 2: nn.Conv2d}


class ConvBlock(nn.Module):
    """``f(x) = W2 ∗ ρ(W1 ∗ x + b1) + b2``: two convolutions (``conv1``, ``conv2``) around an activation.

    ``d`` input channels, ``hidden`` channels c_h, ``out`` channels; ``kernel`` the filter width,
    ``dims`` 1 (``Conv1d``, input ``(batch, d, L)``) or 2 (``Conv2d``, input ``(batch, d, H, W)``).
    No padding: the output is shorter than the input by ``2(kernel − 1)`` per axis.

    Examples
    ========
    >>> block = ConvBlock(1, hidden=3, out=2, kernel=3).double()
    >>> block(torch.randn(4, 1, 8, dtype=torch.float64)).shape
    torch.Size([4, 2, 4])
    >>> tuple(block.conv1.weight.shape), tuple(block.conv2.weight.shape)  # W1: c_h×d×k, W2: m×c_h×k
    ((3, 1, 3), (2, 3, 3))
    >>> ConvBlock(1, hidden=3, out=1, dims=3)
    Traceback (most recent call last):
    ...
    ValueError: dims must be 1 (Conv1d) or 2 (Conv2d), got 3
    """

    def __init__(
        self,
        d: int,
        hidden: int,
        out: int,
        kernel: int = 3,
        dims: int = 1,
        activation: str = "relu",
        bias: bool = False,
    ) -> None:
        super().__init__()
        for name, v in (("d", d), ("hidden", hidden), ("out", out), ("kernel", kernel)):
            if not (isinstance(v, int) and v >= 1):
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if dims not in CONVS:
            raise ValueError(f"dims must be 1 (Conv1d) or 2 (Conv2d), got {dims!r}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {tuple(ACTIVATIONS)}, got {activation!r}")
        self.dims, self.activation = dims, activation
        self.conv1 = CONVS[dims](d, hidden, kernel, bias=bias)
        self.conv2 = CONVS[dims](hidden, out, kernel, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (batch, d, L) or (batch, d, H, W)
        """``W2 ∗ ρ(W1 ∗ x + b1) + b2``; a ``ValueError`` names an input of the wrong rank or channels.

        Examples
        ========
        With one channel, a kernel of width 1 and ReLU: ``f(x) = 2·relu(x)``.

        >>> block = ConvBlock(1, 1, 1, kernel=1).double()
        >>> with torch.no_grad(): _ = block.conv1.weight.fill_(1.0), block.conv2.weight.fill_(2.0)
        >>> block(torch.tensor([[[-1.0, 3.0]]], dtype=torch.float64)).flatten().tolist()
        [0.0, 6.0]
        """
        d = self.conv1.in_channels
        if x.dim() != self.dims + 2 or x.shape[1] != d:
            raise ValueError(f"expected input (batch, {d}, {'L' if self.dims == 1 else 'H, W'}), got {tuple(x.shape)}")
        return self.conv2(ACTIVATIONS[self.activation].torch(self.conv1(x)))
