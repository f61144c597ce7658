"""The activations the book's blocks use, one row each: everything an engine needs to know about ρ.

A row (:class:`Activation`) gives the torch function a block applies, the module class names a
law finder recognizes it by (torch's and timm's classes share them), its sympy form, the identity
:func:`conslaw_lite.symbolic.derive` may use (``None``: ρ and ρ′ are independent shapes), the
rescaling it leaves a hidden unit (``"unit"``: ρ(λz) = λρ(z) for λ > 0, one law per unit;
``"all"``: ρ is linear, every invertible mixing of the units; ``"none"``), the torch functions
kinked at 0 that the counter records as activation patterns (:mod:`conslaw_lite.counting.strata`),
and ρ, ρ′ continued to complex arguments (:mod:`conslaw_lite.continuation`).

Adding an activation is adding a row to :data:`ACTIVATIONS`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F

from conslaw_lite.continuation import gelu, gelu_prime, silu, silu_prime

Rescaling = Literal["unit", "all", "none"]


def _sympy_gelu(z):
    import sympy as sp  # only the symbolic chain needs it

    return z / 2 * (1 + sp.erf(z / sp.sqrt(2)))


def _sympy_silu(z):
    import sympy as sp

    return z / (1 + sp.exp(-z))


def _sympy_relu(z):
    import sympy as sp

    return sp.Max(z, 0)


@dataclass(frozen=True)
class Activation:
    """One activation ρ as every engine sees it (see the module docstring for the fields).

    Examples
    ========
    >>> relu = ACTIVATIONS["relu"]
    >>> relu.torch(torch.tensor([-1.0, 2.0])).tolist(), relu.identity, relu.rescaling
    ([0.0, 2.0], 'relu', 'unit')
    >>> import sympy as sp
    >>> ACTIVATIONS["silu"].sympy(sp.Symbol("z"))
    z/(1 + exp(-z))
    """

    name: str
    torch: Callable[[torch.Tensor], torch.Tensor]
    modules: tuple[str, ...]
    sympy: Callable
    identity: str | None
    rescaling: Rescaling
    kinks: frozenset = frozenset()
    complex: tuple[Callable, Callable] | None = None  # (ρ, ρ′) for complex z


ACTIVATIONS: dict[str, Activation] = {
    a.name: a
    for a in (
        Activation("gelu", F.gelu, ("GELU", "GELUTanh"), _sympy_gelu, None, "none", complex=(gelu, gelu_prime)),
        Activation("silu", F.silu, ("SiLU", "Swish"), _sympy_silu, None, "none", complex=(silu, silu_prime)),
        Activation(
            "relu",
            F.relu,
            ("ReLU", "LeakyReLU"),  # LeakyReLU is positively homogeneous too
            _sympy_relu,
            "relu",
            "unit",
            frozenset({torch.relu, torch.relu_, F.relu, F.relu_, torch.Tensor.relu, torch.Tensor.relu_,
                       F.leaky_relu, F.leaky_relu_}),  # fmt: skip
        ),
        Activation("linear", lambda z: z, ("Identity",), lambda z: z, "linear", "all"),
    )
}


def activation_of(module: torch.nn.Module) -> Activation | None:
    """The row of an activation module (by its class name, torch's or timm's), ``None`` for an unknown one.

    Examples
    ========
    >>> activation_of(torch.nn.SiLU()).name, activation_of(torch.nn.Tanh())
    ('silu', None)
    """
    name = type(module).__name__
    return next((a for a in ACTIVATIONS.values() if name in a.modules), None)


def kinked_at_zero() -> frozenset:
    """Every torch function of the table with a kink at 0 (the pieces z and αz).

    Examples
    ========
    >>> torch.relu in kinked_at_zero(), torch.tanh in kinked_at_zero()
    (True, False)
    """
    return frozenset().union(*(a.kinks for a in ACTIVATIONS.values()))


def euler_ratio(act: str, z: np.ndarray | complex) -> np.ndarray | complex:
    """z ρ′(z) / ρ(z) for an activation with a complex continuation: identically 1 only for a homogeneous ρ.

    Examples
    ========
    Along z = iy the GELU ratio grows like |z|² (it is 1 + z φ(z)/Φ(z)):

    >>> [round(abs(complex(euler_ratio("gelu", 1j * y))), 1) for y in (5.0, 10.0)]
    [24.9, 100.0]
    >>> bool(np.isclose(euler_ratio("silu", 0.5), 1 + 0.5 * (1 - 1 / (1 + np.exp(-0.5)))))
    True
    """
    continued = {name: a.complex for name, a in ACTIVATIONS.items() if a.complex}
    if act not in continued:
        raise ValueError(f"act must be one of {sorted(continued)}, got {act!r}")
    f, f_prime = continued[act]
    return z * f_prime(z) / f(z)
