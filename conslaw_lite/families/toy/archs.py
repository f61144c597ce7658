"""The toy products ``θ_1·θ_2·…·θ_D·x`` as a named architecture (``toy``)."""

from __future__ import annotations

import string

import torch

from conslaw_lite.archs import Arch, ArchOptions, Built
from conslaw_lite.families.toy.block import ToyProduct
from conslaw_lite.families.toy.laws import formula


def build_toy(options: ArchOptions) -> Built:
    """The toy product with ``--dim`` factors named a, b, c, ... (default 2), seeded standard-normal values.

    Examples
    ========
    >>> built = build_toy(ArchOptions(dim=3))
    >>> [n for n, _ in built.model.named_parameters()], built.formula
    (['a', 'b', 'c'], 2)
    """
    D = options.with_defaults(dim=2).dim
    if not 2 <= D <= 26:
        raise ValueError(f"toy: --dim is the number of factors, from 2 to 26; got {D}")
    values = torch.randn(D, generator=torch.Generator().manual_seed(options.seed), dtype=torch.float64)
    model = ToyProduct(**{name: float(v) for name, v in zip(string.ascii_lowercase, values)})
    return Built(model, (1,), *formula(D))


ARCHITECTURES = (
    Arch(
        "toy",
        "θ_1·θ_2·…·θ_D·x with D = --dim factors (default 2: a·b·x; --dim 3: a·b·c·x): D − 1 laws",
        build_toy,
        ("dim",),
    ),
)
