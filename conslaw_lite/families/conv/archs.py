"""Convolutional ReLU nets as named architectures: ``conv-relu`` (Conv1d) and ``conv2d-relu``."""

from __future__ import annotations

from conslaw_lite.archs import Arch, ArchOptions, Built
from conslaw_lite.families.conv.block import ConvBlock
from conslaw_lite.families.conv.laws import formula
from conslaw_lite.seeding import seeded

KERNEL = 3
SIZES = ("dim", "hidden", "out", "seq")  # channels in, hidden, out; the input's length (side)


def _build(options: ArchOptions, dims: int, **defaults: int) -> Built:
    o = options.with_defaults(**defaults)
    if o.seq < 2 * KERNEL - 1:
        raise ValueError(f"--seq ({o.seq}) must be at least {2 * KERNEL - 1}: two convolutions of width {KERNEL}")
    with seeded(o.seed):
        model = ConvBlock(o.dim, o.hidden, o.out, KERNEL, dims).double()
    shape = (o.dim, o.seq) if dims == 1 else (o.dim, o.seq, o.seq)
    note = f"--dim, --hidden, --out are channels; --seq the input's length (side, in 2-d); kernel {KERNEL}, no padding"
    return Built(model, shape, *formula(o.hidden), note)


def build_conv_relu(options: ArchOptions) -> Built:
    """``Conv1d → ReLU → Conv1d`` (defaults 1 → 3 → 1 channels, length 8, kernel 3).

    Examples
    ========
    >>> built = build_conv_relu(ArchOptions())
    >>> built.formula_text, built.input_shape
    ('c_h = 3', (1, 8))
    """
    return _build(options, 1, dim=1, hidden=3, out=1, seq=8)


def build_conv2d_relu(options: ArchOptions) -> Built:
    """``Conv2d → ReLU → Conv2d`` (defaults 2 → 3 → 1 channels, 6×6 input, 3×3 kernels).

    Examples
    ========
    >>> build_conv2d_relu(ArchOptions()).input_shape
    (2, 6, 6)
    """
    return _build(options, 2, dim=2, hidden=3, out=1, seq=6)


ARCHITECTURES = (
    Arch("conv-relu", "Conv1d → ReLU → Conv1d: ‖W2[:,c]‖² − ‖W1[c]‖², one law per hidden channel", build_conv_relu,
         SIZES),
    Arch("conv2d-relu", "Conv2d → ReLU → Conv2d: ‖W2[:,c]‖² − ‖W1[c]‖², one law per hidden channel", build_conv2d_relu,
         SIZES),
)
